"""Per-pod cost of a pod with a DRA claim in the scheduler's live cache, against a pod asking
`nvidia.com/gpu` through the same cache, at several cluster sizes; not a test.

One `ClusterCache` of NODES nodes, each 8 GPUs in two NVLink islands of four (as an NRT) and
published as a ResourceSlice of `gpu-<minor>` devices (a `ClaimBook` reads them), each GPU with a
UUID of its own as real GPUs have. Seeded pods of
1, 2, 4 or 8 GPUs, each asking 1 CPU, arrive in pairs: one whose claim asks the GPUs (`exactly` N
of class gpu.gputopo.io), decided and assumed by `ClaimCharges.place` (the nodes placement finds
feasible for the rest of the pod, their claim views, the allocation, the pod assumed with the
GPUs its claims take), and one asking them as `nvidia.com/gpu`, decided by `Placer.decide` and
assumed by `ClusterCache.assume`, as the loop does. Each step is timed on its own, the two kinds
in turn (lock-step), so that a quiet or busy spell falls on both alike; the set-up (nodes,
slices, NRTs, pods read into the cache, the first pod of each kind) is not timed, and what
exists then is frozen out of the collector's full passes (`gc.freeze`), as the scheduler
freezes its warm cache. Printed per size: each kind's mean, median and p99 ms a pod, pods
placed, and the ratios of the means and medians. Then every GPU is taken and pods that fit
nowhere are tried, in lock-step: a claim pod as the loop tries one (its refusal with the nearest
misses, then what a victim search reads: `room` and `claimed`), a plugin pod by `Placer.decide`
with its reasons; the same figures.

    .venv/bin/python bench/claims_runtime_bench.py [--nodes 1000,5000] [--pods 300] [--seed 1]
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduler.placement import Placer, default_scoring
from scheduler.runtime.claims.book import CLAIMS, CLASSES, SLICES, ClaimBook
from scheduler.runtime.claims.placing import ClaimCharges, ClaimRefusal
from scheduler.runtime.cluster.cache import ClusterCache
from scheduler.runtime.cluster.podinfo import PodInfo
from tests.builders.claims import claim_obj, class_obj, own_gpus, request, slice_obj
from tests.builders.nodes import node_obj
from tests.builders.nrt import make_nrt
from tests.builders.pods import container, pod

SIZES = (1, 1, 2, 2, 4, 8)


class Cluster:
    def __init__(self, nodes: int) -> None:
        self.cache = ClusterCache("gputopo-scheduler")
        self.book = ClaimBook()
        self.charges = ClaimCharges(self.book, self.cache)
        self.placer = Placer(self.cache.snapshot, default_scoring())
        self.book.replace(CLASSES, [class_obj()])
        names = [f"node-{i:05d}" for i in range(nodes)]
        slices = []
        for name in names:  # GPU UUIDs of each node's own, as real GPUs have
            devices, inventory = own_gpus(name)
            slices.append(slice_obj(name, devices))
            self.cache.upsert_node(node_obj(name, gpus=8))
            self.cache.upsert_nrt(make_nrt(name, inventory))
        self.book.replace(SLICES, slices)

    def claim_pod(self, name: str, gpus: int) -> PodInfo:
        self.book.apply(CLAIMS, "ADDED", claim_obj(f"{name}-gpus", request("gpus", gpus)))
        body = _pod(name, {"cpu": "1"})
        body["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": f"{name}-gpus"}]
        return self.cache.upsert_pod(body)[1]

    def plugin_pod(self, name: str, gpus: int) -> PodInfo:
        return self.cache.upsert_pod(_pod(name, {"cpu": "1", "nvidia.com/gpu": str(gpus)}))[1]

    def place_claims(self, info: PodInfo) -> bool:
        return not isinstance(self.charges.place(self.placer, info, None), ClaimRefusal)

    def place_plugin(self, info: PodInfo) -> bool:
        found = self.placer.decide(info.request).assignment
        if found is not None:
            self.cache.assume(info.key, found)
        return found is not None


def _pod(name: str, limits: dict[str, str]) -> dict[str, Any]:
    body = pod(name, containers=[container(limits=limits)], schedulerName="gputopo-scheduler")
    body["metadata"].update(uid=f"uid-{name}", namespace="ns")
    return body


def _median(values: Sequence[float]) -> float:
    return sorted(values)[len(values) // 2]


def _p99(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def run(nodes: int, pods: int, seed: int) -> None:
    started = time.perf_counter()
    cluster = Cluster(nodes)
    rng = random.Random(seed)
    sizes = [rng.choice(SIZES) for _ in range(pods + 1)]
    claims = [cluster.claim_pod(f"c{i}", s) for i, s in enumerate(sizes)]
    plugin = [cluster.plugin_pod(f"d{i}", s) for i, s in enumerate(sizes)]
    cluster.place_claims(claims[0])  # the first of each kind untimed: views and memos made
    cluster.place_plugin(plugin[0])
    set_up = time.perf_counter() - started
    spent: dict[str, list[float]] = {"claims": [], "plugin": []}
    placed = dict.fromkeys(spent, 0)
    gc.collect()
    gc.freeze()
    for one, other in zip(claims[1:], plugin[1:], strict=True):
        for kind, info, place in (
            ("claims", one, cluster.place_claims),
            ("plugin", other, cluster.place_plugin),
        ):
            clock = time.perf_counter()
            placed[kind] += place(info)
            spent[kind].append(time.perf_counter() - clock)
    gc.unfreeze()
    print(f"{nodes} nodes x 8 GPUs, {pods} pods of each kind (set-up {set_up:.1f} s):")
    _report(spent, {kind: f"placed {n}/{pods}" for kind, n in placed.items()})
    refused(cluster, rng)


def refused(cluster: Cluster, rng: random.Random, attempts: int = 200) -> None:
    """Every GPU then taken (1-GPU claim pods until one is refused, untimed), and pods asking
    1, 2 or 4 GPUs tried in lock-step: a claim pod as the loop tries one that no node fits
    (`place`, then `room` and `claimed` for the victim search), a plugin pod by `Placer.decide`
    with its reasons."""
    filled = 0
    while cluster.place_claims(cluster.claim_pod(f"full{filled}", 1)):
        filled += 1
    sizes = [rng.choice((1, 2, 4)) for _ in range(attempts)]
    claims = [cluster.claim_pod(f"rc{i}", s) for i, s in enumerate(sizes)]
    plugin = [cluster.plugin_pod(f"rd{i}", s) for i, s in enumerate(sizes)]
    charges, placer = cluster.charges, cluster.placer
    spent: dict[str, list[float]] = {"claims": [], "plugin": []}
    gc.collect()
    gc.freeze()
    for one, other in zip(claims, plugin, strict=True):
        clock = time.perf_counter()
        if isinstance(charges.place(placer, one, None), ClaimRefusal):
            charges.room(one)
            charges.claimed([one])
        spent["claims"].append(time.perf_counter() - clock)
        clock = time.perf_counter()
        placer.decide(other.request)
        spent["plugin"].append(time.perf_counter() - clock)
    gc.unfreeze()
    print(f"  every GPU taken, {attempts} pods of each kind refused:")
    _report(spent, dict.fromkeys(spent, ""))


def _report(spent: dict[str, list[float]], notes: dict[str, str]) -> None:
    """Each kind's mean, median and p99 ms a pod (with its note), and the claims/plugin ratios."""
    mean = {kind: sum(times) / len(times) for kind, times in spent.items()}
    for kind, times in spent.items():
        print(
            f"  {kind:7s} mean {1e3 * mean[kind]:6.3f} ms  median {1e3 * _median(times):6.3f} ms"
            f"  p99 {1e3 * _p99(times):6.3f} ms  {notes[kind]}"
        )
    medians = _median(spent["claims"]) / _median(spent["plugin"])
    print(
        f"  claims / plugin: means {mean['claims'] / mean['plugin']:.2f}x, medians {medians:.2f}x"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="1000,5000", help="cluster sizes, comma-separated")
    parser.add_argument("--pods", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    for nodes in (int(n) for n in args.nodes.split(",")):
        run(nodes, args.pods, args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
