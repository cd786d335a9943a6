"""`gputopo-agent`: the agent's subcommands (`run`, `inventory`, `record`, `mps`), dispatched by
`agent.dispatch`."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from agent.dispatch import dispatch, usage

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "run": (
        "agent.cli.run",
        "the DaemonSet process: device plugins, NRT publisher, labels, metrics",
    ),
    "inventory": ("agent.cli.inventory", "print GPUs, MIG slices, NUMA and the GPU link matrix"),
    "record": ("agent.cli.record", "dump this node's NVML view as a fixture file"),
    "mps": ("agent.cli.mps", "supervise CUDA MPS control daemons for shared GPUs (own DaemonSet)"),
}

USAGE = usage("gputopo-agent", SUBCOMMANDS)


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch("gputopo-agent", SUBCOMMANDS, USAGE, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    raise SystemExit(main())
