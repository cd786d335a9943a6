"""`gputopo-agent record`: write this node's NVML view as a fixture file (DESIGN.md §3).

Attach the file to a bug report, or load it back with `--nvml-fixture FILE`: the inventory it gives
equals the one recorded.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping, Sequence

from agent import logsetup
from agent.errors import AgentError
from agent.inventory import load_inventory
from agent.inventory_cmd import add_source_flags, failure_line
from agent.nvml.fixture import dump

log = logging.getLogger(__name__)

PROG = "gputopo-agent record"


def parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__)
    add_source_flags(p, environ)
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        default="-",
        help="fixture file to write; .json writes JSON, anything else YAML (default: stdout)",
    )
    return p


def main(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> int:
    args = parser(os.environ if environ is None else environ).parse_args(list(argv))
    logsetup.configure(args.log_format)
    try:
        inventory = load_inventory(args.nvml_fixture, args.host_root)
    except AgentError as exc:
        sys.stderr.write(failure_line(PROG, exc))
        return 1
    text = dump(inventory, fmt="json" if args.output.endswith(".json") else "yaml")
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    try:
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(text)
    except OSError as exc:
        sys.stderr.write(f"{PROG}: cannot write {args.output}: {exc.strerror}\n")
        return 1
    log.info("recorded %d GPUs to %s", len(inventory.gpus), args.output)
    return 0
