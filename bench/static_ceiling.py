"""Where the static protocol's free GPU capacity goes, and how much better packing could win.

The FGD protocol (`scheduler.sim.protocol`: shuffle, inflate to 130 % of GPU capacity, each pod
tried once, nobody leaves) fills the cluster until the commonest pod, one whole GPU, finds no
room: *saturation*, the first refused pod that asks exactly one whole GPU of any model (a pod
pinned to a model, `gpu_spec`, can be refused while other models have room). From then on only
pods that fit what is left are placed, and the allocation hardly moves. What is free at
saturation is, exactly:

* the **remnants** of the GPUs holding shares: their count × 1,000 − the milli-GPU of the
  shares on them, split into what the same shares would leave packed as tightly as possible
  (the **optimum**: the fewest GPUs that hold them, an exact bin packing, solved as an arc-flow
  integer programme with `scipy.optimize.milp`) and the **packing overhead**, the GPUs the
  policy used beyond that optimum (each of them a whole GPU a 1-GPU pod could have taken);
* **whole GPUs free**: GPUs no pod uses, on nodes whose cpu cannot feed the refused pod.

`ceiling` is the allocation at 130 % plus the packing overhead: what the policy would reach if
it packed the shares it met as an offline optimum does, with every GPU saved taken by a 1-GPU
pod. No policy that places each pod when it arrives can pack like the offline optimum (it does
not know the shares still to come), so a policy that places every pod it can stays below it.
First-fit-decreasing of the same shares (`FFD`) is printed beside the optimum: the best a
packer sorting them first does.

    .venv/bin/python bench/static_ceiling.py [--variants default] [--seeds 42-51]
        [--policies gputopo,fgd,bestfit] [--jobs 2] [--traces DIR]

It needs `scipy` (`pip install -e ".[study]"`); the traces are found as
`bench/placement_quality.py` finds them.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.model import MILLI_PER_GPU
from bench.placement_quality import NODE_LIST, PREFIX, TRACE_DIR, seeds_of, traces_root, variants
from scheduler.placement import Assignment
from scheduler.sim.cluster import Cluster
from scheduler.sim.policies import POLICIES as SIM_POLICIES
from scheduler.sim.policies import canonical_policy
from scheduler.sim.protocol import SimPod, run_protocol
from scheduler.sim.workload import load_cluster, load_workload

POLICIES = ("gputopo", "fgd", "bestfit")


def first_fit_decreasing(sizes: Sequence[int], capacity: int = MILLI_PER_GPU) -> int:
    """GPUs that first-fit-decreasing packs `sizes` (milli-GPU each) into."""
    bins: list[int] = []
    for size in sorted(sizes, reverse=True):
        for i, used in enumerate(bins):
            if used + size <= capacity:
                bins[i] = used + size
                break
        else:
            bins.append(size)
    return len(bins)


def optimal_bins(sizes: Sequence[int], capacity: int = MILLI_PER_GPU) -> int:
    """The fewest GPUs (bins of `capacity`) that hold `sizes`: an exact bin packing.

    Arc-flow (Valério de Carvalho): a bin is a path from 0 to `capacity` over the positions the
    sizes reach, one arc per item (larger items first, so each packing is one path) and a loss
    arc to the end; an integer flow of the fewest paths that carries every item is an optimum.
    Few distinct sizes keep the graph small (the default trace: 20 sizes, a few hundred arcs).
    """
    from collections import Counter

    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    if not sizes:
        return 0
    if max(sizes) > capacity or min(sizes) <= 0:
        raise ValueError(f"bin packing: sizes must lie in 1..{capacity}")
    counts = Counter(sizes)
    step = math.gcd(capacity, *counts)
    end = capacity // step
    arcs: list[tuple[int, int, int]] = []  # (tail, head, size; 0 for the loss arc)
    reached = {0}
    for size in sorted(counts, reverse=True):
        width = size // step
        grown = set(reached)
        frontier = set(reached)
        for _ in range(counts[size]):
            heads = set()
            for tail in frontier:
                if tail + width <= end:
                    arcs.append((tail, tail + width, size))
                    heads.add(tail + width)
            frontier = heads - grown
            grown |= heads
            if not frontier:
                break
        reached = grown
    arcs.extend((tail, end, 0) for tail in sorted(reached) if tail < end)
    arcs = sorted(set(arcs))
    positions = sorted({0, end} | {a for a, _, _ in arcs} | {b for _, b, _ in arcs})
    row_of = {p: i for i, p in enumerate(positions)}
    kinds = sorted(counts)
    kind_row = {s: len(positions) + i for i, s in enumerate(kinds)}
    bins_column = len(arcs)
    rows: list[int] = []
    columns: list[int] = []
    values: list[float] = []
    for column, (tail, head, size) in enumerate(arcs):
        rows += [row_of[tail], row_of[head]]
        columns += [column, column]
        values += [-1.0, 1.0]
        if size:
            rows.append(kind_row[size])
            columns.append(column)
            values.append(1.0)
    rows += [row_of[0], row_of[end]]  # the bins leave 0 and arrive at the end
    columns += [bins_column, bins_column]
    values += [1.0, -1.0]
    shape = (len(positions) + len(kinds), len(arcs) + 1)
    matrix = coo_matrix((values, (rows, columns)), shape=shape).tocsr()
    lower = [0.0] * len(positions) + [float(counts[s]) for s in kinds]
    upper = [0.0] * len(positions) + [math.inf] * len(kinds)
    cost = np.zeros(len(arcs) + 1)
    cost[bins_column] = 1.0
    result = milp(
        cost,
        constraints=LinearConstraint(matrix, lower, upper),
        integrality=np.ones(len(arcs) + 1),
        bounds=Bounds(0, math.inf),
    )
    if not result.success:
        raise RuntimeError(f"bin packing: the solver gave no optimum ({result.message})")
    return round(result.fun)


@dataclass(slots=True)
class Saturation:
    """What a run had placed when the first pod asking one whole GPU of any model was refused."""

    arrived_milli: int
    used_milli: int
    shares: list[int]  # the milli-GPU of every share placed
    share_gpus: int  # GPUs holding them
    whole_gpus_free: int


@dataclass(slots=True)
class Watch:
    """`run_protocol`'s `on_pod`: follows the shares and records the saturation."""

    arrived_milli: int = 0
    used_milli: int = 0
    shares: list[int] = field(default_factory=list)
    share_gpus: set[tuple[str, int]] = field(default_factory=set)
    saturation: Saturation | None = None

    def __call__(self, pod: SimPod, assignment: Assignment | None, cluster: Cluster) -> None:
        spec = pod.spec
        self.arrived_milli += spec.gpu_milli_total
        if assignment is not None:
            self.used_milli += spec.gpu_milli_total
            if spec.gpu_milli:
                self.shares.append(spec.gpu_milli)
                self.share_gpus.update((assignment.node, s.gpu) for s in assignment.shares)
            return
        if (
            self.saturation is None
            and spec.gpus == 1
            and not spec.gpu_milli
            and not spec.gpu_models
        ):
            free = sum(
                1
                for node in cluster.snapshot.nodes.values()
                for g, milli in enumerate(node.gpu_free)
                if not node.gpu_mig[g] and milli == MILLI_PER_GPU
            )
            self.saturation = Saturation(
                arrived_milli=self.arrived_milli,
                used_milli=self.used_milli,
                shares=list(self.shares),
                share_gpus=len(self.share_gpus),
                whole_gpus_free=free,
            )


@dataclass(frozen=True, slots=True)
class CeilingRun:
    """One policy on one seed: percentages of the cluster's GPU capacity."""

    variant: str
    policy: str
    seed: int
    alloc_130: float | None  # None: no pod arrived near 130 % (a tiny workload)
    saturated: bool
    arrived: float = 0.0
    allocated: float = 0.0
    share_gpus: int = 0
    optimum: int = 0
    ffd: int = 0
    remnants_at_optimum: float = 0.0
    packing_overhead: float = 0.0
    whole_free: float = 0.0

    @property
    def free(self) -> float:
        return self.remnants_at_optimum + self.packing_overhead + self.whole_free

    @property
    def ceiling(self) -> float | None:
        return None if self.alloc_130 is None else self.alloc_130 + self.packing_overhead


def one_run(root: str, variant: str, policy: str, seed: int) -> CeilingRun:
    base = Path(root) / TRACE_DIR
    spec = load_cluster(str(base / NODE_LIST))
    workload = load_workload(str(base / f"{PREFIX}{variant}.csv"))
    watch = Watch()
    result = run_protocol(spec, workload, policy, seed, on_pod=watch)
    alloc = result.allocation.get(130)
    seen = watch.saturation
    if seen is None:
        return CeilingRun(variant, policy, seed, alloc, saturated=False)
    capacity = spec.gpu_count * MILLI_PER_GPU
    optimum = optimal_bins(seen.shares)

    def percent(milli: int) -> float:
        return 100.0 * milli / capacity

    return CeilingRun(
        variant,
        policy,
        seed,
        alloc,
        saturated=True,
        arrived=percent(seen.arrived_milli),
        allocated=percent(seen.used_milli),
        share_gpus=seen.share_gpus,
        optimum=optimum,
        ffd=first_fit_decreasing(seen.shares),
        remnants_at_optimum=percent(optimum * MILLI_PER_GPU - sum(seen.shares)),
        packing_overhead=percent((seen.share_gpus - optimum) * MILLI_PER_GPU),
        whole_free=percent(seen.whole_gpus_free * MILLI_PER_GPU),
    )


HEADER = (
    f"{'policy':<9}{'seed':>6}{'alloc@130':>11}{'sat. arrived':>14}{'allocated':>11}"
    f"{'free':>7}{'share GPUs':>12}{'optimum':>10}{'FFD':>8}"
    f"{'remnants at opt.':>18}{'overhead':>10}{'whole free':>12}{'ceiling':>9}"
)


def _percent(value: float | None, width: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.2f}"


def row(run: CeilingRun) -> str:
    start = f"{run.policy:<9}{run.seed:>6}{_percent(run.alloc_130, 11)}"
    if not run.saturated:
        return f"{start}  never saturated"
    return (
        f"{start}{run.arrived:>14.2f}{run.allocated:>11.2f}{run.free:>7.2f}{run.share_gpus:>12}"
        f"{run.optimum:>10}{run.ffd:>8}{run.remnants_at_optimum:>18.2f}"
        f"{run.packing_overhead:>10.2f}{run.whole_free:>12.2f}{_percent(run.ceiling, 9)}"
    )


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known and len(known) == len(values) else None


def mean_row(policy: str, runs: Sequence[CeilingRun]) -> str:
    """The means over `runs` (a figure some run lacks: `-`)."""
    full = [r for r in runs if r.saturated]
    start = f"{policy:<9}{'mean':>6}{_percent(_mean([r.alloc_130 for r in runs]), 11)}"
    if not full:
        return f"{start}  never saturated"

    def avg(name: str) -> float:
        return statistics.fmean(float(getattr(r, name)) for r in full)

    return (
        f"{start}{avg('arrived'):>14.2f}{avg('allocated'):>11.2f}{avg('free'):>7.2f}"
        f"{avg('share_gpus'):>12.1f}{avg('optimum'):>10.1f}{avg('ffd'):>8.1f}"
        f"{avg('remnants_at_optimum'):>18.2f}{avg('packing_overhead'):>10.2f}"
        f"{avg('whole_free'):>12.2f}{_percent(_mean([r.ceiling for r in full]), 9)}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", help="the traces' folder (default: ../shared/traces)")
    parser.add_argument("--variants", default="default", help="pod lists, comma-separated")
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    if importlib.util.find_spec("scipy") is None:
        print('static_ceiling: the exact packing needs scipy: pip install -e ".[study]"')
        return 2
    root = traces_root(args.traces)
    wanted = variants(root, [v for v in args.variants.split(",") if v])
    policies = [canonical_policy(p) for p in args.policies.split(",") if p]
    unknown = [p for p in policies if p not in SIM_POLICIES]
    if unknown:
        known = ", ".join(SIM_POLICIES)
        print(f"static_ceiling: --policies: unknown policy {unknown[0]!r} (known: {known})")
        return 2
    seeds = seeds_of(args.seeds)
    started = time.perf_counter()
    tasks = [(str(root), v, p, s) for v in wanted for p in policies for s in seeds]
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        runs = list(pool.map(one_run, *zip(*tasks, strict=True)))
    print("free GPU capacity at saturation (the first refused 1-GPU pod), % of GPU capacity")
    for variant in wanted:
        print(f"== {variant}")
        print(HEADER)
        for policy in policies:
            mine = [r for r in runs if r.variant == variant and r.policy == policy]
            for run in mine:
                print(row(run))
            print(mean_row(policy, mine))
    print(f"{len(runs)} runs in {time.perf_counter() - started:.0f} s on {args.jobs} processes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
