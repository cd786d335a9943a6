"""Queue admission + ordering cost per decision: 5,000 nodes × 8 GPUs, 100 leaf queues in a 3-level
tree (5 orgs × 4 teams × 5 leaves), beside the same run with no queues (one `default` leaf).

Run: `.venv/bin/python bench/quota_bench.py [--nodes 5000] [--pods 10000] [--repeat 3]`.

Every decision is made as the scheduler and the simulator make it: the heads of the leaves with
pending work, `QueueOrder.choose` over them, `queue_problem` and `admission_problem` at the chosen
leaf, then `Placer.decide` (the shipped scoring); a placed pod is charged to the usage. The same
seeded pods (`scheduler_bench.random_pod`), spread round-robin over the leaves, all pending at the
start; each is offered once (a refused or unplaced unit goes to backoff, outside this bench).
Quotas are generous enough that no unit is refused, so both runs place the same pods and the ratio
is the cost of the queues alone. Reported: decisions/s, mean and p99 µs per decision, the time
inside `scheduler.quota` (heads, order, admission, charge) and inside placement, and the ratio.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from scheduler_bench import make_cluster, percentile, random_pod, shipped_scoring

from scheduler.placement import PodRequest
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
from scheduler.sim.cluster import Cluster

GPU = "nvidia.com/gpu"


def queue(name: str, parent: str | None, low: int, high: int) -> QueueSpec:
    spec = {"parent": parent, "min": {GPU: low}, "max": {GPU: high}, "weight": 1 + len(name) % 3}
    return read_queue({"metadata": {"name": name}, "spec": spec})


def three_levels(orgs: int = 5, teams: int = 4, leaves: int = 5) -> tuple[QuotaTree, list[str]]:
    """orgs × teams × leaves; mins nest (org 1,600 ⊇ 4 teams × 400 ⊇ 5 leaves × 80 GPUs)."""
    specs, names = [], []
    for o in range(orgs):
        specs.append(queue(f"org{o}", None, 1600, 12_000))
        for t in range(teams):
            specs.append(queue(f"org{o}-team{t}", f"org{o}", 400, 4000))
            for leaf in range(leaves):
                name = f"org{o}-team{t}-q{leaf}"
                specs.append(queue(name, f"org{o}-team{t}", 80, 1000))
                names.append(name)
    tree = QuotaTree.build(specs)
    assert not [p for p in tree.problems.values() if p.fatal], tree.problems
    return tree, names


class Run:
    def __init__(self, cluster: Cluster, tree: QuotaTree) -> None:
        self.cluster, self.tree, self.usage = cluster, tree, Usage(tree)
        self.capacity: dict[str, int] = {}
        for node in cluster.snapshot.nodes.values():
            add_into(self.capacity, allocatable_amounts(node.allocatable))
        self.order = QueueOrder()
        self.samples: list[float] = []
        self.quota_s = self.place_s = 0.0
        self.placed = self.refused = 0

    def decide(self, pending: dict[str, deque[tuple[PodRequest, dict[str, int]]]], scoring) -> None:  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        heads = {leaf: units[0][0].key for leaf, units in pending.items() if units}
        leaf = self.order.choose(
            self.tree, self.usage, self.capacity, heads, lambda q: pending[q][0][1]
        )
        pod, demand = pending[leaf].popleft()
        ok = (
            queue_problem(self.tree, leaf) is None
            and admission_problem(self.tree, self.usage, leaf, demand) is None
        )
        t1 = time.perf_counter()
        decision = self.cluster.place(pod, scoring) if ok else None
        t2 = time.perf_counter()
        if decision is not None and decision.assignment is not None:
            self.usage.charge(pod.key, (leaf, demand))
            self.placed += 1
        self.refused += not ok
        t3 = time.perf_counter()
        self.samples.append(t3 - t0)
        self.quota_s += (t1 - t0) + (t3 - t2)
        self.place_s += t2 - t1


def bench(nodes: int, pods: int, seed: int, tree: QuotaTree, leaves: Sequence[str]) -> Run:
    cluster = make_cluster(nodes, 50)
    scoring = shipped_scoring(nodes, plain=False)
    cluster.placer(scoring)  # built before the clock starts, as the scheduler builds it at start
    rng = random.Random(seed)
    pending: dict[str, deque[tuple[PodRequest, dict[str, int]]]] = {q: deque() for q in leaves}
    for i in range(pods):
        pod = random_pod(rng, f"default/pod-{i}")
        pending[leaves[i % len(leaves)]].append((pod, request_amounts(pod)))
    run = Run(cluster, tree)
    for _ in range(pods):
        run.decide(pending, scoring)
    return run


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--repeat", type=int, default=3, help="alternating runs of each; best kept")
    args = parser.parse_args(argv)
    tree, leaves = three_levels()
    plain = QuotaTree.build([])
    best: dict[str, dict[str, float]] = {}
    for _ in range(args.repeat):
        for name, (t, ls) in (
            ("no queues", (plain, [DEFAULT_QUEUE])),
            ("100 queues", (tree, leaves)),
        ):
            r = row(bench(args.nodes, args.pods, args.seed, t, ls))
            if name not in best or r["mean µs"] < best[name]["mean µs"]:
                best[name] = r
    print(f"{args.nodes} nodes × 8 GPUs, {args.pods} pods; best of {args.repeat} alternating runs")
    columns = ("decisions/s", "mean µs", "p99 µs", "quota µs", "placement µs", "placed", "refused")
    print(f"{'run':<12}" + "".join(f"{c:>14}" for c in columns))
    for name, r in best.items():
        print(f"{name:<12}" + "".join(f"{r[c]:>14.1f}" for c in columns))
    ratio = best["100 queues"]["mean µs"] / best["no queues"]["mean µs"]
    print(f"time per decision, 100 queues / no queues: {ratio:.3f}× (target ≤ 1.2×)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
