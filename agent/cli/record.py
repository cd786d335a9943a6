"""`gputopo-agent record`: write this node's NVML view as a fixture file (the format of the
built-in fixtures in agent/nvml/fixtures/).

Attach the file to a bug report, or load it back with `--nvml-fixture FILE`: the inventory it gives
equals the one recorded.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Mapping, Sequence

from agent.cli.nvml_source import open_inventory, source_parser
from agent.nvml.fixture import dump
from agent.plural import counted

log = logging.getLogger(__name__)

PROG = "gputopo-agent record"


def parser(environ: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    p = source_parser(PROG, __doc__, environ)
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        default="-",
        help="fixture file to write; .json writes JSON, anything else YAML (default: stdout)",
    )
    return p


def main(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> int:
    args = parser(environ).parse_args(list(argv))
    inventory = open_inventory(PROG, args)
    if inventory is None:
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
    log.info("recorded %s to %s", counted(len(inventory.gpus), "GPU"), args.output)
    return 0
