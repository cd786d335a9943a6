"""`gputopo-scheduler`: the scheduler's subcommands (`run` against a cluster, `simulate` in memory,
`demo`), dispatched by `agent.dispatch`."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from agent.dispatch import dispatch, usage

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "run": ("scheduler.cli.run", "the secondary scheduler against a cluster"),
    "simulate": ("scheduler.cli.simulate", "replay a workload on a simulated cluster"),
    "demo": ("scheduler.cli.demo", "the demo on an embedded default (no GPU, no cluster)"),
}

USAGE = usage("gputopo-scheduler", SUBCOMMANDS)


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch("gputopo-scheduler", SUBCOMMANDS, USAGE, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    raise SystemExit(main())
