"""`gputopo-scheduler simulate --generated N`: N generated workloads (`scheduler.sim.generate`),
every policy on each, the per-workload table and the summary of `scheduler.sim.generalise`.

Workload k (0 ≤ k < N) is the one of seed `--generated-seed` + k; `--generated-jobs`,
`--generated-nodes` and `--generated-load` size them (jobs; GPU nodes, with a quarter as many
CPU-only nodes; the GPU work offered over the arrival horizon per GPU). `--seed` gives
the simulator's seeds (node order, `random`'s draws; default 1), apart from the workloads':
each policy runs each workload once per simulator seed, and the table shows their averages.
`--generated-history`: `fgd` and `gputopo` know the day before (the same seed's cluster and mix,
other jobs) instead of `fgd` knowing the day's own typical pods (`run_events`).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence

from scheduler.config import SchedulerConfig
from scheduler.sim.generalise import (
    PEERS,
    SUBJECT,
    format_rows,
    format_summary,
    run_generated,
    summarise,
)
from scheduler.sim.generate import DEFAULT_SIZE, Size

__all__ = [
    "KNOWN",
    "add_arguments",
    "add_size_flags",
    "generated_size",
    "run_generated_study",
    "size_of",
    "size_text",
]

KNOWN = {False: "fgd: the day's own typical pods", True: "the day before"}
"""What the policies know in advance, without and with the day before (`--generated-history`)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--generated",
        type=int,
        help="run N generated workloads (cluster and jobs drawn from a seed each) for every "
        "policy and print the per-workload table and its summary (default: off)",
    )
    p.add_argument(
        "--generated-seed", type=int, default=1, help="seed of the first one (default: 1)"
    )
    add_size_flags(p)
    p.add_argument(
        "--generated-history",
        action="store_true",
        help="fgd and gputopo know the day before, not fgd the day's own workload",
    )


def add_size_flags(p: argparse.ArgumentParser) -> None:
    """The flags that size generated workloads (`size_of` reads them)."""
    base = DEFAULT_SIZE
    p.add_argument("--generated-jobs", type=int, help=f"jobs per workload (default: {base.jobs})")
    p.add_argument(
        "--generated-nodes", type=int, help=f"GPU nodes per cluster (default: {base.gpu_nodes})"
    )
    p.add_argument(
        "--generated-load",
        type=float,
        help="GPU work offered over the arrival horizon per GPU of the cluster "
        f"(default: {base.load:g}; above 1 a queue builds up)",
    )


def size_of(args: argparse.Namespace) -> Size:
    """The `Size` of `add_size_flags`' flags; ValueError naming the flag when one is out of
    range."""
    if any(v is not None and v < 1 for v in (args.generated_jobs, args.generated_nodes)):
        raise ValueError("--generated-jobs and --generated-nodes must be at least 1")
    load = args.generated_load
    if load is not None and not (0 < load < math.inf):
        raise ValueError(f"--generated-load: must be a number above 0, got {load}")
    return generated_size(args.generated_jobs, args.generated_nodes, load)


def generated_size(jobs: int | None, gpu_nodes: int | None, load: float | None = None) -> Size:
    """The default `Size` with the jobs, GPU nodes and load given (CPU nodes: a quarter of the
    GPU nodes)."""
    base = DEFAULT_SIZE
    nodes = base.gpu_nodes if gpu_nodes is None else gpu_nodes
    return Size(
        jobs=base.jobs if jobs is None else jobs,
        gpu_nodes=nodes,
        cpu_nodes=base.cpu_nodes if gpu_nodes is None else max(1, nodes // 4),
        load=base.load if load is None else load,
    )


def size_text(size: Size) -> str:
    return (
        f"{size.jobs} jobs, {size.gpu_nodes} GPU nodes, {size.cpu_nodes} CPU nodes, "
        f"load {size.load:g}"
    )


def problem(args: argparse.Namespace, policies: Sequence[str]) -> str | None:
    """Why these flags cannot run, or None."""
    if args.generated < 1:
        return f"--generated: must be at least 1, got {args.generated}"
    try:
        size_of(args)
    except ValueError as exc:
        return str(exc)
    missing = [p for p in (SUBJECT, *PEERS) if p not in policies]
    if missing:
        return f"--generated: the summary needs every policy; --policy lacks {', '.join(missing)}"
    return None


def run_generated_study(
    args: argparse.Namespace,
    policies: Sequence[str],
    sim_seeds: Sequence[int],
    config: SchedulerConfig | None,
) -> str:
    """The table and summary text of `--generated`, each run once per simulator seed."""
    size = size_of(args)
    began = time.perf_counter()
    outcomes = {}
    for seed in range(args.generated_seed, args.generated_seed + args.generated):
        label, runs = run_generated(
            seed, policies, size, sim_seeds, config=config, history=args.generated_history
        )
        outcomes[label] = runs
        if sys.stderr.isatty():
            sys.stderr.write(f"{label}: done\n")
    elapsed = time.perf_counter() - began
    head = (
        f"{args.generated} generated workloads (seeds {args.generated_seed}.."
        f"{args.generated_seed + args.generated - 1}; {size_text(size)}), "
        f"{len(policies)} policies, simulator seeds {','.join(str(s) for s in sim_seeds)}, "
        f"known in advance: {KNOWN[args.generated_history]}, {elapsed:.0f} s\n\n"
    )
    return head + format_rows(outcomes) + "\n" + format_summary(summarise(outcomes))
