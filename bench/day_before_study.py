"""Issue 45: does the day before tell which policy wins a workload?

For every workload seed (`--seeds`, default 11-60,101-190: workloads no policy change was tuned
on), `gputopo`, `fgd` and `bestfit` run on the day (day 0, simulator seeds `--sim-seeds`, default
1-6) and on the day before (day -1, `--before-sim-seeds`, default 1-3: the same cluster, job mix
and arrival pattern, other jobs drawn). Each run knows its own day before, as with
`generalise_study.py --history` (whose runs of the day these are: the two studies share the
cache). For each pair of the three and each figure (mean wait over all pods, makespan), the
per-workload difference is taken twice and the two answers are compared: Spearman's rank
correlation over the workloads, and on how many workloads both name the same policy lower.

* *the same day, two halves of the simulator seeds*: how far a workload's winner is a matter of
  the day's own jobs rather than of the node order;
* *the day before against the day*: how far a scheduler that knew the workload's kind (its
  cluster, mix and pattern, and how each policy did on the day before) could tell which policy
  to run.

As a control, how hard the day is (each policy's figure itself, day before against day). Then
`chooser`, a policy that runs on each workload whichever of the three had the lowest mean
wait on its day before, is paired with each of the three on the day (`generalise_study`'s
paired comparison: mean difference, 95 % BCa bootstrap interval over the workloads, sign test),
with how often it picked the day's lowest, and the average of the day's lowest of the three
on each workload (hindsight: what no policy can know in advance). Needs scipy
(`pip install -e ".[study]"`).

    .venv/bin/python bench/day_before_study.py --jobs 2      # 140 workloads x 3 policies x 9
    .venv/bin/python bench/day_before_study.py --seeds 1-2 --sim-seeds 1,2 --before-sim-seeds 1 \\
        --generated-jobs 60 --generated-nodes 5              # a small run

Runtime and results: scheduler/sim/README.md, "Does the day before tell the winner".
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from itertools import combinations
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.generalise_study import (
    FIGURES,
    KNOW_HISTORY,
    RunKey,
    _cache_of,
    add_run_flags,
    finish_runs,
    outcomes_of,
    paired_text,
    start_runs,
)
from bench.placement_quality import seeds_of
from scheduler.cli.simulate_generated import size_of, size_text
from scheduler.sim.generalise import (
    PACKING_PEERS,
    SUBJECT,
    Figure,
    Outcomes,
    WorkloadFigures,
    chosen_by,
    pairs,
)
from scheduler.sim.generate import Size

POLICIES = (SUBJECT, *PACKING_PEERS)
CHOOSER = "chooser"
CHOSEN_ON: Figure = "mean_wait"


def differences(outcomes: Outcomes, first: str, second: str, figure: Figure) -> dict[str, float]:
    """Workload -> `first`'s figure minus `second`'s (each averaged over its runs)."""
    return {p.workload: p.difference for p in pairs(outcomes, second, figure, first)}


def agreement(one: Mapping[str, float], other: Mapping[str, float]) -> tuple[float | None, int]:
    """Two answers to "how much lower is the first policy" on the same workloads: Spearman's
    rank correlation (None where either answer is the same everywhere) and the workloads where
    both have the same sign (a tie agrees only with a tie)."""
    from scipy import stats

    labels = sorted(one.keys() & other.keys())
    xs, ys = [one[w] for w in labels], [other[w] for w in labels]
    same = sum((x > 0) - (x < 0) == (y > 0) - (y < 0) for x, y in zip(xs, ys, strict=True))
    if len(labels) < 2 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return None, same
    return float(stats.spearmanr(xs, ys).statistic), same


def halves(sim_seeds: Sequence[int]) -> tuple[list[int], list[int]]:
    """The simulator seeds split in two (the first half the smaller); ValueError with fewer
    than two."""
    if len(sim_seeds) < 2:
        raise ValueError(f"--sim-seeds {','.join(map(str, sim_seeds))}: two or more to split")
    middle = len(sim_seeds) // 2
    return list(sim_seeds[:middle]), list(sim_seeds[middle:])


def agreement_text(title: str, one: Outcomes, other: Outcomes) -> str:
    lines = [title]
    for figure, name in FIGURES:
        parts = []
        for first, second in combinations(POLICIES, 2):
            rho, same = agreement(
                differences(one, first, second, figure), differences(other, first, second, figure)
            )
            shown = "n/a" if rho is None else f"{rho:+.2f}"
            parts.append(f"{first}-{second} rho {shown}, same {same}/{len(one)}")
        lines.append(f"  {name}: " + "; ".join(parts))
    return "\n".join(lines) + "\n"


def chooser_text(before: Outcomes, today: Outcomes) -> str:
    chosen, picked = chosen_by(before, today, POLICIES, CHOSEN_ON, CHOOSER)
    counts = {p: sum(pick == p for pick in picked.values()) for p in POLICIES}
    lowest = 0
    for runs in chosen.values():
        by_policy = _means(runs, CHOSEN_ON)
        lowest += by_policy[CHOOSER] == min(by_policy[p] for p in POLICIES)
    shown = ", ".join(f"{p} {n}" for p, n in counts.items())
    head = (
        f"{CHOOSER}: each workload's policy the one of {', '.join(POLICIES)} with the lowest "
        f"mean wait on its day before; picked {shown}; the day's lowest on {lowest} of "
        f"{len(chosen)}\n"
    )
    waits = [_means(runs, "mean_wait") for runs in chosen.values()]
    spans = [_means(runs, "makespan") for runs in chosen.values()]
    averages = "  average over the workloads: " + "; ".join(
        f"{p} mean wait {statistics.fmean(w[p] for w in waits):,.0f} s, "
        f"makespan {statistics.fmean(m[p] for m in spans):,.0f} s"
        for p in (CHOOSER, *POLICIES)
    )
    hindsight = (
        f"  the day's lowest of the three on each workload, known only after it: mean wait "
        f"{statistics.fmean(min(w[p] for p in POLICIES) for w in waits):,.0f} s, makespan "
        f"{statistics.fmean(min(m[p] for p in POLICIES) for m in spans):,.0f} s\n"
    )
    return head + averages + "\n" + hindsight + paired_text(chosen, POLICIES, CHOOSER)


def level_text(before: Outcomes, today: Outcomes) -> str:
    """How far the day before tells how hard the day is: per figure and policy, Spearman's
    rank correlation over the workloads of the policy's figure on the day before and on the
    day."""
    lines = ["how hard the day is, the day before against the day (rho: Spearman):"]
    for figure, name in FIGURES:
        parts = []
        for policy in POLICIES:
            rho, _ = agreement(_level(before, policy, figure), _level(today, policy, figure))
            parts.append(f"{policy} rho {'n/a' if rho is None else f'{rho:+.2f}'}")
        lines.append(f"  {name}: " + "; ".join(parts))
    return "\n".join(lines) + "\n"


def _level(outcomes: Outcomes, policy: str, figure: Figure) -> dict[str, float]:
    return {label: _means(runs, figure)[policy] for label, runs in outcomes.items()}


def _means(runs: Sequence[WorkloadFigures], figure: Figure) -> dict[str, float]:
    """Policy -> its figure averaged over its runs."""
    grouped: dict[str, list[float]] = {}
    for run in runs:
        grouped.setdefault(run.policy, []).append(getattr(run, figure))
    return {p: statistics.fmean(v) for p, v in grouped.items()}


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", default="11-60,101-190", help="workload seeds")
    p.add_argument("--sim-seeds", default="1-6", help="the simulator's seeds on the day")
    p.add_argument("--before-sim-seeds", default="1-3", help="... on the day before")
    add_run_flags(p)
    args = p.parse_args(argv)
    try:
        args.seed_list = seeds_of(args.seeds)
        args.sim_seed_list = seeds_of(args.sim_seeds)
        args.before_seed_list = seeds_of(args.before_sim_seeds)
        args.halves = halves(args.sim_seed_list)
        args.size = size_of(args)
    except ValueError as exc:
        p.error(str(exc))
    args.recompute_set = frozenset()
    return args


def main(argv: Sequence[str] | None = None) -> int:
    try:
        import scipy  # noqa: F401
    except ImportError:
        print('needs scipy (pip install -e ".[study]")', file=sys.stderr)
        return 2
    args = _arguments(argv)
    size: Size = args.size
    cache = _cache_of(args)
    began = time.perf_counter()

    def keys(day: int, sim_seeds: Sequence[int]) -> list[RunKey]:
        return [
            RunKey(
                seed=seed,
                size=size,
                policy=policy,
                sim_seed=sim_seed,
                config=args.config,
                history=policy in KNOW_HISTORY,
                day=day,
            )
            for sim_seed in sim_seeds
            for seed in args.seed_list
            for policy in POLICIES
        ]

    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        day_runs = start_runs(pool, cache, keys(0, args.sim_seed_list))
        before_runs = start_runs(pool, cache, keys(-1, args.before_seed_list))
        today = finish_runs(day_runs, cache)
        before = finish_runs(before_runs, cache)
    ran = len(day_runs.pending) + len(before_runs.pending)
    first, second = args.halves
    print(
        f"# {len(args.seed_list)} workloads (seeds {args.seeds}; {size_text(size)}); the day at "
        f"simulator seeds {args.sim_seeds}, the day before at {args.before_sim_seeds}; each "
        "run knows its own day before\n"
    )
    print(
        agreement_text(
            "which policy is lower, the same day at simulator seeds "
            f"{_listed(first)} against {_listed(second)} (rho: Spearman over the workloads; "
            "same: workloads where both name the same policy lower):",
            outcomes_of(f for k, f in today.items() if k.sim_seed in first),
            outcomes_of(f for k, f in today.items() if k.sim_seed in second),
        )
    )
    day_outcomes = outcomes_of(today.values())
    before_outcomes = outcomes_of(before.values())
    print(
        agreement_text(
            "which policy is lower, the day before against the day:",
            before_outcomes,
            day_outcomes,
        )
    )
    print(level_text(before_outcomes, day_outcomes))
    print(chooser_text(before_outcomes, day_outcomes))
    print(
        f"runtime {time.perf_counter() - began:.0f} s on {args.jobs} processes; "
        f"{ran} runs computed, {len(today) + len(before) - ran} from the cache"
    )
    return 0


def _listed(seeds: Sequence[int]) -> str:
    return ",".join(map(str, seeds))


if __name__ == "__main__":
    sys.exit(main())
