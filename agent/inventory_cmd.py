"""`gputopo-agent inventory`: print the node's GPUs, MIG slices, NUMA nodes and GPU link matrix."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from agent import logsetup
from agent.errors import AgentError, NvmlUnavailable
from agent.inventory import load_inventory
from agent.model import NodeInventory
from agent.nvml.fixture import builtin_names, dump, to_document
from agent.topo_table import render_inventory

log = logging.getLogger(__name__)

PROG = "gputopo-agent inventory"


def add_source_flags(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> None:
    """`--nvml-fixture`, `--host-root` and `--log-format` (defaults from GPUTOPO_<FLAG>)."""
    parser.add_argument(
        "--nvml-fixture",
        metavar="NAME|PATH",
        default=environ.get("GPUTOPO_NVML_FIXTURE") or None,
        help="answer from a fake NVML fixture instead of the driver "
        f"(built-in: {', '.join(builtin_names())})",
    )
    parser.add_argument(
        "--host-root",
        metavar="PATH",
        type=Path,
        default=Path(environ.get("GPUTOPO_HOST_ROOT") or "/"),
        help="where /sys is read (default: /)",
    )
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default=environ.get("GPUTOPO_LOG_FORMAT") or "text",
        help="log line format on stderr (default: text)",
    )


def parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__)
    add_source_flags(p, environ)
    p.add_argument(
        "-o",
        "--output",
        choices=("table", "json", "yaml"),
        default="table",
        help="table (topo -m layout), or the fixture format as json/yaml (default: table)",
    )
    return p


def render(inventory: NodeInventory, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(to_document(inventory), indent=2) + "\n"
    if fmt == "yaml":
        return dump(inventory)
    return render_inventory(inventory)


def failure_line(prog: str, exc: AgentError) -> str:
    """The one line a command prints for an error it expects."""
    if isinstance(exc, NvmlUnavailable):
        return (
            f"{prog}: NVML is not available on this machine ({exc}); "
            "run it on a GPU node or pass --nvml-fixture NAME to use a fake GPU node\n"
        )
    return f"{prog}: {exc}\n"


def main(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> int:
    args = parser(os.environ if environ is None else environ).parse_args(list(argv))
    logsetup.configure(args.log_format, level=logging.WARNING)
    try:
        inventory = load_inventory(args.nvml_fixture, args.host_root)
    except AgentError as exc:
        sys.stderr.write(failure_line(PROG, exc))
        return 1
    sys.stdout.write(render(inventory, args.output))
    return 0
