"""Queue admission + ordering cost per decision: 5,000 nodes × 8 GPUs, 100 leaf queues in a 3-level
tree (5 orgs × 4 teams × 5 leaves), beside the same run with no queues (one `default` leaf).

Run: `.venv/bin/python bench/quota_bench.py [--nodes 5000] [--pods 10000] [--repeat 3]`.

Every decision is made as the scheduler and the simulator make it: the queue order over the heads
of the leaves with pending work, `queue_problem` and `admission_problem` at the chosen leaf, then
`Placer.decide` (the shipped scoring); a placed pod is charged to the usage. The bench keeps its
heads itself and tells the order only the head that changed (`QueueOrder.choose_changed`: the
leaf it popped); the scheduler and the simulator still hand `QueueOrder.choose` every head, which
compares them with the last ones (about 0.5 µs a leaf here). The same
seeded pods (`scheduler_bench.random_pod`), spread round-robin over the leaves, all pending at the
start; each is offered once (a refused or unplaced unit goes to backoff, outside this bench).
Quotas are generous enough that no unit is refused, so both runs place the same pods and the ratio
is the cost of the queues alone. The same again on a cluster of two GPU models (every other node
an A100) with a tree whose every queue also names a `min` on H100s and a `max` per model: each
decision then also runs the scheduler's model filter (`scheduler.quota.modelfilter`: the models
whose keys the unit would breach are kept out of placement, and those it is not within guarantee
on are tried last) and charges the node's model key.
Reported: decisions/s, mean and p99 µs per decision, the time inside `scheduler.quota` (heads,
order, admission, model filter, charge) and inside placement (with the bind), and the ratios.
Times are the process's CPU time (`--clock wall` for wall time): the machine may be shared.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from scheduler_bench import make_cluster, percentile, random_pod, shipped_scoring

from scheduler.placement import GPU_PRODUCT_LABEL, PodRequest, Scoring
from scheduler.quota import (
    DEFAULT_QUEUE,
    QueueOrder,
    QueueSpec,
    QuotaTree,
    Usage,
    add_into,
    admission_problem,
    allocatable_amounts,
    queue_problem,
    read_queue,
    request_amounts,
)
from scheduler.quota.modelfilter import ModelFilter, ModelNodes, assigned, model_filter
from scheduler.quota.models import model_amounts, model_of_product
from scheduler.sim.cluster import Cluster, NodeSpec

GPU = "nvidia.com/gpu"
CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}
MODELS = ("NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB")


def queue(name: str, parent: str | None, low: int, high: int, models: bool = False) -> QueueSpec:
    """`models`: half the min on H100s and a max per model of 60% of the plain max as well."""
    spec: dict[str, object] = {"parent": parent, "weight": 1 + len(name) % 3}
    spec["min"], spec["max"] = {GPU: low}, {GPU: high}
    if models:
        spec["min"] = {GPU: low, f"{GPU}@{MODELS[0]}": low // 2}
        spec["max"] = {GPU: high} | {f"{GPU}@{m}": high * 6 // 10 for m in MODELS}
    return read_queue({"metadata": {"name": name}, "spec": spec})


def three_levels(
    orgs: int = 5, teams: int = 4, leaves: int = 5, models: bool = False
) -> tuple[QuotaTree, list[str]]:
    """orgs × teams × leaves; mins nest (org 1,600 ⊇ 4 teams × 400 ⊇ 5 leaves × 80 GPUs)."""
    specs, names = [], []
    for o in range(orgs):
        specs.append(queue(f"org{o}", None, 1600, 12_000, models))
        for t in range(teams):
            specs.append(queue(f"org{o}-team{t}", f"org{o}", 400, 4000, models))
            for leaf in range(leaves):
                name = f"org{o}-team{t}-q{leaf}"
                specs.append(queue(name, f"org{o}-team{t}", 80, 1000, models))
                names.append(name)
    tree = QuotaTree.build(specs)
    assert not [p for p in tree.problems.values() if p.fatal], tree.problems
    return tree, names


class Run:
    def __init__(self, cluster: Cluster, tree: QuotaTree, clock: str = "cpu") -> None:
        self.cluster, self.tree, self.usage = cluster, tree, Usage(tree)
        self.clock = CLOCKS[clock]
        self.capacity: dict[str, int] = {}
        self.model_of: dict[str, str] = {}
        for node in cluster.snapshot.nodes.values():
            add_into(self.capacity, allocatable_amounts(node.allocatable))
            self.model_of[node.name] = model_of_product(node.labels.get(GPU_PRODUCT_LABEL, ""))
        self.nodes = ModelNodes(
            {
                m: [n for n, o in self.model_of.items() if o == m]
                for m in set(self.model_of.values())
            }
        )
        self.order = QueueOrder()
        self.changed: dict[str, Hashable | None] | None = None  # heads changed since last asked
        self.samples: list[float] = []
        self.quota_s = self.place_s = 0.0
        self.placed = self.refused = 0

    def decide(self, pending: dict[str, deque[tuple[PodRequest, dict[str, int]]]], scoring) -> None:  # type: ignore[no-untyped-def]
        t0 = self.clock()
        if self.changed is None:  # the first decision: every leaf's head
            self.changed = {leaf: units[0][0].key for leaf, units in pending.items() if units}
        leaf = self.order.choose_changed(
            self.tree, self.usage, self.capacity, self.changed, lambda q: pending[q][0][1]
        )
        pod, demand = pending[leaf].popleft()
        self.changed = {leaf: pending[leaf][0][0].key if pending[leaf] else None}
        ok = (
            queue_problem(self.tree, leaf) is None
            and admission_problem(self.tree, self.usage, leaf, demand) is None
        )
        models = self.model_filter(leaf, pod) if ok else ModelFilter()
        t1 = self.clock()
        placer = self.cluster.placer(scoring)
        decision = (
            models.decide(None, lambda off: placer.decide(pod, excluded=off), assigned)
            if ok
            else None
        )
        t2 = self.clock()
        if decision is not None and decision.assignment is not None:
            self.cluster.bind(pod, decision.assignment)
            t2 = self.clock()
            model = self.model_of[decision.assignment.node] if self.tree.has_models else ""
            self.usage.charge(pod.key, (leaf, demand | model_amounts(demand, model)))
            self.placed += 1
        self.refused += not ok
        t3 = self.clock()
        self.samples.append(t3 - t0)
        self.quota_s += (t1 - t0) + (t3 - t2)
        self.place_s += t2 - t1

    def model_filter(self, leaf: str, pod: PodRequest) -> ModelFilter:
        """The scheduler's model filter for `pod` in `leaf` (none without model keys)."""
        if not self.tree.has_models:
            return ModelFilter()
        return model_filter(self.tree, self.usage, self.nodes, self.cluster.snapshot, leaf, [pod])


def mixed_cluster(nodes: int) -> Cluster:
    """`make_cluster`'s racks, every other node an A100 (the rest H100s)."""
    per_rack = max(1, nodes // 50)
    return Cluster.from_specs(
        NodeSpec(
            name=f"node-{i:05d}",
            labels={"gputopo.io/rack": f"rack-{i // per_rack:03d}"},
            model=MODELS[i % 2].replace("-", " ", 1),
        )
        for i in range(nodes)
    )


Pending = dict[str, deque[tuple[PodRequest, dict[str, int]]]]


def prepared(
    cluster: Cluster, pods: int, seed: int, tree: QuotaTree, leaves: Sequence[str], clock: str
) -> tuple[Run, Pending, Scoring]:
    """A run on `cluster` with its seeded pods pending, spread round-robin over `leaves`."""
    scoring = shipped_scoring(len(cluster.snapshot.nodes), plain=False)  # one per run: it learns
    cluster.placer(scoring)  # built before the clock starts, as the scheduler builds it at start
    rng = random.Random(seed)
    pending: Pending = {q: deque() for q in leaves}
    for i in range(pods):
        pod = random_pod(rng, f"default/pod-{i}")
        pending[leaves[i % len(leaves)]].append((pod, request_amounts(pod)))
    return Run(cluster, tree, clock), pending, scoring


def bench(
    cluster: Cluster,
    pods: int,
    seed: int,
    tree: QuotaTree,
    leaves: Sequence[str],
    clock: str = "cpu",
) -> Run:
    return paired([(cluster, tree, leaves)], pods, seed, clock)[0]


def paired(
    setups: Sequence[tuple[Cluster, QuotaTree, Sequence[str]]], pods: int, seed: int, clock: str
) -> list[Run]:
    """One run per (cluster, tree, leaves), the same pods in each, decided in lockstep: decision
    i of every run, then i + 1, so that the load of a shared machine, which moves by more than
    the difference measured, falls on the runs compared alike."""
    runs = [prepared(cluster, pods, seed, tree, leaves, clock) for cluster, tree, leaves in setups]
    for _ in range(pods):
        for run, pending, scoring in runs:
            run.decide(pending, scoring)
    return [run for run, _, _ in runs]


def row(run: Run) -> dict[str, float]:
    count = len(run.samples)
    return {
        "decisions/s": count / sum(run.samples),
        "mean µs": 1e6 * sum(run.samples) / count,
        "p99 µs": 1e6 * percentile(run.samples, 0.99),
        "quota µs": 1e6 * run.quota_s / count,
        "placement µs": 1e6 * run.place_s / count,
        "placed": run.placed,
        "refused": run.refused,
    }


RATIOS = {  # what each ratio compares: (the run without queues, the run with them)
    "100 queues / no queues": ("no queues", "100 queues"),
    "mixed models, model keys / no queues": ("mixed, no queues", "mixed, model keys"),
}


Setup = tuple[Callable[[int], Cluster], QuotaTree, Sequence[str]]


def measure(
    runs: dict[str, Setup], args: argparse.Namespace
) -> tuple[dict[str, dict[str, float]], dict[str, list[float]]]:
    """Each pair of `RATIOS` decided in lockstep, `args.repeat` times: each run's best row, and
    each ratio of the pair's mean times."""
    best: dict[str, dict[str, float]] = {}
    ratios: dict[str, list[float]] = {name: [] for name in RATIOS}
    for _ in range(args.repeat):
        for name, pair in RATIOS.items():
            setups = [(runs[r][0](args.nodes), runs[r][1], runs[r][2]) for r in pair]
            done = [row(run) for run in paired(setups, args.pods, args.seed, args.clock)]
            for run_name, r in zip(pair, done, strict=True):
                if run_name not in best or r["mean µs"] < best[run_name]["mean µs"]:
                    best[run_name] = r
            ratios[name].append(done[1]["mean µs"] / done[0]["mean µs"])
    return best, ratios


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--repeat", type=int, default=3, help="paired runs of each; best kept")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu")
    args = parser.parse_args(argv)
    tree, leaves = three_levels()
    per_model, _ = three_levels(models=True)
    plain = QuotaTree.build([])
    uniform: Callable[[int], Cluster] = lambda n: make_cluster(n, 50)  # noqa: E731
    runs: dict[str, Setup] = {
        "no queues": (uniform, plain, [DEFAULT_QUEUE]),
        "100 queues": (uniform, tree, leaves),
        "mixed, no queues": (mixed_cluster, plain, [DEFAULT_QUEUE]),
        "mixed, model keys": (mixed_cluster, per_model, leaves),
    }
    best, ratios = measure(runs, args)
    print(
        f"{args.nodes} nodes × 8 GPUs, {args.pods} pods; best of {args.repeat} runs, each pair"
        f" compared decided in lockstep ({args.clock} time)"
    )
    columns = ("decisions/s", "mean µs", "p99 µs", "quota µs", "placement µs", "placed", "refused")
    print(f"{'run':<18}" + "".join(f"{c:>14}" for c in columns))
    for name, r in best.items():
        print(f"{name:<18}" + "".join(f"{r[c]:>14.1f}" for c in columns))
    for name, (first, second) in RATIOS.items():
        each = ratios[name]
        print(
            f"time per decision, {name}: median {statistics.median(each):.3f}× of the"
            f" {len(each)} paired runs ({', '.join(f'{r:.3f}' for r in each)}); best / best"
            f" {best[second]['mean µs'] / best[first]['mean µs']:.3f}× (target ≤ 1.2×)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
