"""`gputopo-agent`: dispatch to the subcommand modules (each has `main(argv) -> int`)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "run": (
        "agent.cli.run",
        "the DaemonSet process: device plugins, NRT publisher, labels, metrics",
    ),
    "inventory": ("agent.cli.inventory", "print GPUs, MIG slices, NUMA and the GPU link matrix"),
    "record": ("agent.cli.record", "dump this node's NVML view as a fixture file"),
}


def usage(prog: str, table: dict[str, tuple[str, str]]) -> str:
    """`usage: PROG {a,b} [--help] ...` and one line per subcommand."""
    names = ",".join(table)
    lines = "".join(f"  {name:<10} {text}\n" for name, (_, text) in table.items())
    return f"usage: {prog} {{{names}}} [--help] ...\n{lines}"


USAGE = usage("gputopo-agent", SUBCOMMANDS)


def dispatch(prog: str, table: dict[str, tuple[str, str]], usage: str, argv: Sequence[str]) -> int:
    """Run `table[argv[0]]`'s `main(argv[1:])`; exit 2 with a one-line reason otherwise."""
    if not argv or argv[0] in {"-h", "--help"}:
        sys.stdout.write(usage)
        return 0 if argv else 2
    name, rest = argv[0], list(argv[1:])
    if name not in table:
        sys.stderr.write(f"{prog}: unknown command {name!r}\n{usage}")
        return 2
    module_name = table[name][0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        sys.stderr.write(f"{prog} {name}: not available yet\n")
        return 2
    code: int = module.main(rest)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch("gputopo-agent", SUBCOMMANDS, USAGE, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    raise SystemExit(main())
