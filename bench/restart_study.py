"""What a scheduler restart costs the learned typical pods, on generated workloads.

The shipped `gputopo` policy runs each generated workload (`--seeds`, default the judging ones,
101-130) at each simulator seed (`--sim-seeds`, default 1-6) three ways, in event mode:

* `none`: no restart;
* `prior`: the scheduler restarts halfway through the arrivals and its learner starts again
  from the prior, as it did before it was shown the running pods;
* `running`: the same restart, the learner shown the pods running then (`Scoring.seen`), as the
  runtime's intake shows it the bound pods of `gputopo-scheduler` (the shipped behaviour).

Per way it prints the average over the workloads of the mean wait over all pods and of the
makespan (each workload's averaged over its runs), and, against `none` and `running` against
`prior`, the runs with a lower / equal / higher mean wait and the two-sided sign test over the
runs that differ. Every run is computed afresh (about a second each at 300 jobs).

    .venv/bin/python bench/restart_study.py [--seeds 101-130] [--sim-seeds 1-6] [--jobs 2]
    .venv/bin/python bench/restart_study.py --seeds 1-2 --sim-seeds 1 --generated-jobs 40 \\
        --generated-nodes 3  # a small run
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.living_cluster import seeds_of
from scheduler.cli.simulate_generated import add_size_flags, size_of, size_text
from scheduler.sim.events import run_events
from scheduler.sim.generalise import SUBJECT, figures_of, label_of
from scheduler.sim.generate import Size, generate

WAYS = ("none", "prior", "running")


def halfway(seed: int, size: Size) -> float:
    """Halfway between the first and the last arrival of the workload of `seed`."""
    jobs = generate(seed, size).workload.jobs
    return (jobs[0].arrival + jobs[-1].arrival) / 2 if jobs else 0.0


def one_run(seed: int, size: Size, sim_seed: int, way: str) -> tuple[float, float]:
    """(mean wait over all pods, makespan) of one run."""
    made = generate(seed, size)
    restart_at = None if way == "none" else halfway(seed, size)
    run = run_events(
        made.cluster,
        made.workload,
        SUBJECT,
        sim_seed,
        shuffle_nodes=True,
        restart_at=restart_at,
        relearn=way == "running",
    )
    figures = figures_of(label_of(made), run)
    return figures.mean_wait, figures.makespan


def sign_test(lower: int, higher: int) -> float:
    """Two-sided p of `lower` against `higher` under a fair coin."""
    n, k = lower + higher, min(lower, higher)
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n)


def compare(mine: Sequence[float], base: Sequence[float]) -> str:
    lower = sum(a < b for a, b in zip(mine, base, strict=True))
    equal = sum(a == b for a, b in zip(mine, base, strict=True))
    higher = len(mine) - lower - equal
    return f"{lower} / {equal} / {higher} (p {sign_test(lower, higher):.2g})"


def report(
    figures: dict[str, dict[tuple[int, int], tuple[float, float]]], seeds: Sequence[int]
) -> str:
    keys = sorted(figures["none"])
    lines = ["way      mean wait s  makespan s  runs' mean wait lower / equal / higher"]
    for way in WAYS:
        runs = figures[way]
        wait = statistics.fmean(
            statistics.fmean(w for (s, _), (w, _m) in runs.items() if s == seed) for seed in seeds
        )
        span = statistics.fmean(
            statistics.fmean(m for (s, _), (_w, m) in runs.items() if s == seed) for seed in seeds
        )
        against = ""
        if way != "none":
            mine = [runs[k][0] for k in keys]
            against = "than none: " + compare(mine, [figures["none"][k][0] for k in keys])
            if way == "running":
                prior = [figures["prior"][k][0] for k in keys]
                against += "; than prior: " + compare(mine, prior)
        lines.append(f"{way:<8} {wait:>11,.0f}  {span:>10,.0f}  {against}".rstrip())
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", default="101-130", help="generated workloads' seeds")
    p.add_argument("--sim-seeds", default="1-6", help="the simulator's seeds, per workload")
    add_size_flags(p)
    p.add_argument("--jobs", type=int, default=2, help="processes")
    args = p.parse_args(argv)
    try:
        seeds, sim_seeds, size = seeds_of(args.seeds), seeds_of(args.sim_seeds), size_of(args)
    except ValueError as exc:
        p.error(str(exc))
    began = time.perf_counter()
    work = [(seed, sim, way) for seed in seeds for sim in sim_seeds for way in WAYS]
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(one_run, seed, size, sim, way) for seed, sim, way in work]
        figures: dict[str, dict[tuple[int, int], tuple[float, float]]] = {w: {} for w in WAYS}
        for (seed, sim, way), future in zip(work, futures, strict=True):
            figures[way][seed, sim] = future.result()
    sys.stdout.write(
        f"gputopo, a restart halfway through the arrivals; workloads {args.seeds} "
        f"({size_text(size)}), simulator seeds {args.sim_seeds}\n"
        + report(figures, seeds)
        + f"{len(work)} runs, {time.perf_counter() - began:.0f} s on {args.jobs} processes\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
