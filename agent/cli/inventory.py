"""`gputopo-agent inventory`: print the node's GPUs, MIG slices, NUMA nodes and GPU link matrix."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Mapping, Sequence

from agent.cli.nvml_source import open_inventory, source_parser
from agent.model import NodeInventory
from agent.nvml.fixture import dump, to_document
from agent.topo_table import render_inventory

log = logging.getLogger(__name__)

PROG = "gputopo-agent inventory"


def parser(environ: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    p = source_parser(PROG, __doc__, environ)
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


def main(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> int:
    args = parser(environ).parse_args(list(argv))
    inventory = open_inventory(PROG, args, log_level=logging.WARNING)
    if inventory is None:
        return 1
    sys.stdout.write(render(inventory, args.output))
    return 0
