"""What inter-pod rules cost a decision: 1-GPU pods placed one by one on a busy cluster, each kind
against plain pods in the same run.

Run: `.venv/bin/python bench/interpod_bench.py [--nodes 1000] [--running 4] [--pods 500]
[--repeats 3]`.

The cluster: `--nodes` nodes × 8 GPUs, 10 zones (`topology.kubernetes.io/zone`), each node
labelled with its hostname and running `--running` 1-GPU pods of 50 apps (`app` label). Each
kind then places `--pods` pods through one `Placer` with the shipped scoring, assuming each
where it lands, on a fresh copy of that cluster:

- `plain`: no rules (the baseline; the Placer's memo decides);
- `plain, holders`: no rules, while one running pod in ten carries a required anti-affinity term
  on hostname against another app (the symmetry check reads their terms for every pod);
- `anti-affinity host`: required anti-affinity on hostname against the pod's own app;
- `anti-affinity zone`: the same on zone (3 apps, so few zones are refused);
- `affinity zone`: required affinity on zone with a running app;
- `spread zone`: `DoNotSchedule` spread over zones, max skew 1, over the pod's own app;
- `preferred anti host`, `soft spread zone`: the same as preferences (weight 100;
  `ScheduleAnyway`), which every node's score then carries (the Placer's plain path);
- `preferred node zone`: preferred node affinity for two zones of ten (weight 60; kept between
  decisions while the nodes stay, decided by the memo group by group).

Printed per kind: decisions/s (process CPU), the median and p99 decision time, pods placed, and
the CPU per decision as a ratio to `plain`'s. The best of `--repeats` runs of each kind is kept
(the kinds alternate within a repeat, so a slow spell of a shared machine falls on all).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import replace

from scheduler.placement import Placer, PodRequest, Snapshot, default_scoring
from scheduler.placement.interpod import HOSTNAME
from scheduler.placement.request import (
    InterPodPreferences,
    InterPodRules,
    LabelSelector,
    NodeSelectorRequirement,
    Operator,
    PodTerm,
    PreferredNodeTerm,
    SpreadConstraint,
)
from scheduler.sim.cluster import Cluster, NodeSpec

HOST = HOSTNAME
ZONE = "topology.kubernetes.io/zone"
APPS = 50
NAMESPACE = "default"


def app_is(app: str) -> LabelSelector:
    return LabelSelector(
        requirements=(NodeSelectorRequirement(key="app", operator=Operator.IN, values=(app,)),)
    )


def term(app: str, key: str) -> PodTerm:
    return PodTerm(selector=app_is(app), namespaces=frozenset({NAMESPACE}), topology_key=key)


def one_gpu(
    key: str,
    app: str,
    rules: InterPodRules | None = None,
    preferences: InterPodPreferences | None = None,
) -> PodRequest:
    return PodRequest(
        key=key,
        cpu_milli=1000,
        memory=4 << 30,
        gpus=1,
        namespace=NAMESPACE,
        labels={"app": app},
        inter_pod=rules,
        preferences=preferences,
    )


def build(nodes: int, running: int, holders: bool) -> Snapshot:
    specs = [
        NodeSpec(name=f"node-{i:05d}", labels={HOST: f"node-{i:05d}", ZONE: f"zone-{i % 10}"})
        for i in range(nodes)
    ]
    snapshot = Cluster.from_specs(specs).snapshot
    n = 0
    for i in range(nodes):
        for _ in range(running):
            app = f"app-{n % APPS}"
            rules = None
            if holders and n % 10 == 0:
                rules = InterPodRules(anti_affinity=(term(f"app-{(n + 1) % APPS}", HOST),))
            snapshot.assume_on(one_gpu(f"{NAMESPACE}/run-{n}", app, rules), f"node-{i:05d}")
            n += 1
    return snapshot


Kind = Callable[[int], PodRequest]


def kinds() -> dict[str, tuple[bool, Kind]]:
    """name -> (the cluster has anti-affinity holders, the i-th pod of that kind)."""
    own = "new-app"
    return {
        "plain": (False, lambda i: one_gpu(f"{NAMESPACE}/p-{i}", own)),
        "plain, holders": (True, lambda i: one_gpu(f"{NAMESPACE}/p-{i}", f"app-{i % APPS}")),
        "anti-affinity host": (
            False,
            lambda i: one_gpu(
                f"{NAMESPACE}/p-{i}", own, InterPodRules(anti_affinity=(term(own, HOST),))
            ),
        ),
        "anti-affinity zone": (
            False,
            lambda i: one_gpu(
                f"{NAMESPACE}/p-{i}",
                f"zoned-{i % 3}",
                InterPodRules(anti_affinity=(term(f"zoned-{i % 3}", ZONE),)),
            ),
        ),
        "affinity zone": (
            False,
            lambda i: one_gpu(
                f"{NAMESPACE}/p-{i}", own, InterPodRules(affinity=(term("app-7", ZONE),))
            ),
        ),
        "preferred anti host": (
            False,
            lambda i: one_gpu(
                f"{NAMESPACE}/p-{i}",
                own,
                preferences=InterPodPreferences(anti_affinity=((100, term(own, HOST)),)),
            ),
        ),
        "soft spread zone": (
            False,
            lambda i: one_gpu(
                f"{NAMESPACE}/p-{i}",
                own,
                preferences=InterPodPreferences(
                    spread=(SpreadConstraint(max_skew=1, topology_key=ZONE, selector=app_is(own)),)
                ),
            ),
        ),
        "spread zone": (
            False,
            lambda i: one_gpu(
                f"{NAMESPACE}/p-{i}",
                own,
                InterPodRules(
                    spread=(SpreadConstraint(max_skew=1, topology_key=ZONE, selector=app_is(own)),)
                ),
            ),
        ),
        "preferred node zone": (
            False,
            lambda i: replace(one_gpu(f"{NAMESPACE}/p-{i}", own), preferred_affinity=zones_3_4),
        ),
    }


zones_3_4 = (
    PreferredNodeTerm(
        weight=60,
        expressions=(
            NodeSelectorRequirement(key=ZONE, operator=Operator.IN, values=("zone-3", "zone-4")),
        ),
    ),
)
"""Preferred node affinity for two zones of ten (`preferred node zone`)."""


def run(snapshot: Snapshot, make: Kind, pods: int) -> tuple[list[float], int]:
    placer = Placer(snapshot, default_scoring())
    times: list[float] = []
    placed = 0
    for i in range(pods):
        pod = make(i)
        start = time.process_time()
        decision = placer.decide(pod)
        times.append(time.process_time() - start)
        if decision.assignment is not None:
            snapshot.assume(pod, decision.assignment)
            placed += 1
    return times, placed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--running", type=int, default=4)
    parser.add_argument("--pods", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    bases = {h: build(args.nodes, args.running, h) for h in (False, True)}
    best: dict[str, tuple[float, list[float], int]] = {}
    for _ in range(args.repeats):
        for name, (holders, make) in kinds().items():
            times, placed = run(bases[holders].copy(), make, args.pods)
            total = sum(times)
            if name not in best or total < best[name][0]:
                best[name] = (total, times, placed)
    base = best["plain"][0]
    print(
        f"{args.nodes} nodes x 8 GPUs, {args.running} running pods each, "
        f"{args.pods} pods per kind, best of {args.repeats}"
    )
    widths = (("kind", -20), ("decisions/s", 12), ("median ms", 10), ("p99 ms", 8))
    widths += (("placed", 7), ("× plain", 8))
    print(" ".join(f"{t:<{-w}}" if w < 0 else f"{t:>{w}}" for t, w in widths))
    for name, (total, times, placed) in best.items():
        ordered = sorted(times)
        p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
        print(
            f"{name:<20} {len(times) / total:>12,.0f} {statistics.median(times) * 1e3:>10.3f} "
            f"{p99 * 1e3:>8.3f} {placed:>7} {total / base:>8.1f}"
        )


if __name__ == "__main__":
    main()
