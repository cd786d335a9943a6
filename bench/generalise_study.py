"""Issue 45's study: placement judged on generated workloads it was not tuned on.

Two seed ranges of generated workloads (`scheduler.sim.generate`): `--tuning` (the workloads a
change to the policy may be tuned on) and `--judging` (those it is judged on); they must not
share a seed. Every policy runs on each workload in event mode; per range the study prints the
per-workload table (mean wait over all pods, makespan, each class's median wait) and the summary
of `scheduler.sim.generalise` (the issue's "Verified when"). Beside them, as
`bench/living_cluster.py` runs them: the built-in workload and the four check mixes
(`--beside-seeds`, default 1-3). It ends with its runtime.

    .venv/bin/python bench/generalise_study.py --tuning 1-10 --judging 101-130 --jobs 2
    .venv/bin/python bench/generalise_study.py --tuning 1-2 --judging 3-4 \\
        --generated-jobs 60 --generated-nodes 5 --beside none  # a small run

Runtime: scheduler/sim/README.md, "Generated workloads".
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.living_cluster import (
    WAIT_COLUMNS,
    add_config_flag,
    one_run,
    seeds_of,
    study_names,
    table,
)
from scheduler.cli.simulate_generated import generated_size, size_text
from scheduler.config import load_config
from scheduler.sim.generalise import format_rows, format_summary, run_generated, summarise
from scheduler.sim.generate import Size
from scheduler.sim.policies import POLICIES
from scheduler.sim.protocol import RunResult


def seed_ranges(tuning: str, judging: str) -> tuple[list[int], list[int]]:
    """The tuning and judging seeds (`1-10` or `1,2,3`); ValueError when they share one."""
    tune, judge = seeds_of(tuning), seeds_of(judging)
    shared = sorted(set(tune) & set(judge))
    if shared:
        listed = ", ".join(str(s) for s in shared[:5]) + (", ..." if len(shared) > 5 else "")
        raise ValueError(
            f"--tuning {tuning} and --judging {judging} share seeds ({listed}): a policy must "
            "be judged on workloads it was not tuned on"
        )
    if not tune or not judge:
        raise ValueError("--tuning and --judging each need at least one seed")
    return tune, judge


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tuning", default="1-10", help="seeds of the tuning workloads")
    p.add_argument("--judging", default="101-130", help="seeds of the judging workloads")
    p.add_argument("--generated-jobs", type=int, help="jobs per workload (default: 300)")
    p.add_argument("--generated-nodes", type=int, help="GPU nodes per cluster (default: 12)")
    p.add_argument(
        "--beside",
        default="builtin,mixes",
        help="studies of bench/living_cluster.py reported beside (none: no study)",
    )
    p.add_argument("--beside-seeds", default="1-3")
    p.add_argument("--jobs", type=int, default=2, help="processes")
    add_config_flag(p)
    args = p.parse_args(argv)
    try:
        args.tuning_seeds, args.judging_seeds = seed_ranges(args.tuning, args.judging)
        args.beside = [] if args.beside == "none" else study_names(args.beside)
    except ValueError as exc:
        p.error(str(exc))
    return args


def _generated(
    pool: ProcessPoolExecutor, seeds: Sequence[int], size: Size, config: str | None
) -> str:
    scheduler_config = load_config(config) if config else None
    futures = [
        pool.submit(run_generated, seed, POLICIES, size, True, scheduler_config) for seed in seeds
    ]
    outcomes = dict(future.result() for future in futures)
    return format_rows(outcomes) + "\n" + format_summary(summarise(outcomes))


def _beside(pool: ProcessPoolExecutor, args: argparse.Namespace) -> str:
    seeds = seeds_of(args.beside_seeds)
    work = [(s, p, seed) for s in args.beside for p in POLICIES for seed in seeds]
    futures = [pool.submit(one_run, s, p, seed, True, args.config) for s, p, seed in work]
    results: dict[str, list[RunResult]] = {s: [] for s in args.beside}
    for future in futures:
        study, run = future.result()
        results[study].append(run)
    return "".join(
        f"\n## {study} (seeds {args.beside_seeds})\n"
        + table(runs)
        + "\n"
        + table(runs, WAIT_COLUMNS)
        for study, runs in results.items()
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _arguments(argv)
    size = generated_size(args.generated_jobs, args.generated_nodes)
    began = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for name, seeds, text in (
            ("tuning", args.tuning_seeds, args.tuning),
            ("judging", args.judging_seeds, args.judging),
        ):
            body = _generated(pool, seeds, size, args.config)
            sys.stdout.write(f"## {name} workloads (seeds {text}; {size_text(size)})\n{body}\n")
            sys.stdout.flush()
        sys.stdout.write(_beside(pool, args))
    elapsed = time.perf_counter() - began
    sys.stdout.write(f"\n{elapsed:.0f} s on {args.jobs} processes\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
