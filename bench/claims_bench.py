"""Allocation cost per pod with DRA claims against the same pods through the device-plugin path
(issue 44; target: claims at most 1.5x), not a test.

One cluster of NODES nodes, each 8 GPUs in two NVLink islands of four (NV12 inside, SYS across),
published twice: as `nvidia.com/gpu` (the device plugin's path: `Placer.decide` on a `Snapshot`,
then `assume`) and as a ResourceSlice of `gpu-<minor>` devices (the claims path: one claim per
pod of `exactly` N GPUs of class gpu.gputopo.io, `ClaimAllocator.place`, then the devices
counted as used and the pod assumed on the node's `NodeState`, which both paths score with the
same `Scoring`). The same seeded pods (1, 2, 4 or 8 GPUs) arrive one by one until PODS were
tried; each path's time is the decision and its bookkeeping, per pod (the fastest of `--repeat`
fresh runs, the paths taking turns). The claims path runs cold (compiling the selectors and
building each device's CEL value during the first pods) and warm (those built before the clock
starts, as in a scheduler that has run a while). Pods that fit nowhere are decided without the
per-node reasons on both paths. Also printed: pods placed, and how many multi-GPU pods got GPUs
of one island.

    .venv/bin/python bench/claims_bench.py [--nodes 64] [--pods 600] [--seed 1] [--repeat 3]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.gpuset import GpuSelector
from scheduler.claims.allocator import CLAIM_WEIGHTS, ClaimAllocator
from scheduler.claims.decision import ClaimNode, PodClaims
from scheduler.claims.order import GpuMap
from scheduler.claims.parse import parse_slice
from scheduler.claims.slices import node_devices
from scheduler.claims.usage import Usage
from scheduler.placement import Assignment, NodeState, Placer, PodRequest, Scoring, Snapshot
from tests.builders.claims import (
    claim,
    classes,
    island_devices,
    pod,
    request,
    slice_obj,
    two_islands,
)

TARGET = 1.5
SIZES = (1, 1, 2, 2, 4, 8)


INVENTORY = two_islands()
SELECTOR = GpuSelector(INVENTORY.links, [g.numa_node for g in INVENTORY.gpus])
"""One GPU-set search for every node of the one shape (both paths), as the scheduler shares it."""


def _state(name: str) -> NodeState:
    alloc = {"cpu": 256_000, "memory": 2 << 40, "pods": 110, "nvidia.com/gpu": 8}
    return NodeState.from_inventory(name, INVENTORY, allocatable=alloc, selector=SELECTOR)


def _scoring() -> Scoring:
    return Scoring.from_weights(CLAIM_WEIGHTS, candidate_limit=0)


def _island(gpus: Sequence[int]) -> bool:
    return len({g // 4 for g in gpus}) == 1


def device_plugin(names: Sequence[str], sizes: Sequence[int]) -> tuple[float, int, int]:
    snapshot = Snapshot([_state(n) for n in names])
    placer = Placer(snapshot, _scoring())
    placed = together = 0
    start = time.perf_counter()
    for i, size in enumerate(sizes):
        want = PodRequest(key=f"ns/p{i}", cpu_milli=100, gpus=size)
        decision = placer.decide(want, explain=False)
        if decision.assignment is not None:
            snapshot.assume(want, decision.assignment)
            placed += 1
            together += size > 1 and _island(decision.assignment.gpus)
    return time.perf_counter() - start, placed, together


def claims(names: Sequence[str], sizes: Sequence[int], warm: bool) -> tuple[float, int, int]:
    """`warm`: each device's CEL value built before the clock starts (a running scheduler
    builds it once per device, when its slice arrives); cold: during the first pods."""
    snapshot = Snapshot([_state(n) for n in names])
    nodes = []
    for n in names:
        found = node_devices([parse_slice(slice_obj(n, island_devices()))], n, {})
        gpus = GpuMap.build(INVENTORY, found.devices, selector=SELECTOR)
        nodes.append(ClaimNode(name=n, devices=found, gpus=gpus, state=snapshot.node(n)))
    allocator = ClaimAllocator(classes(), scoring=_scoring())
    if warm:
        for node in nodes:
            for device in node.devices.devices:
                for expression in allocator.classes["gpu.gputopo.io"].selectors:
                    allocator.selectors.matches(expression, device)
    wanted = [pod(f"ns/p{i}", claim(f"c{i}", request("gpus", s))) for i, s in enumerate(sizes)]
    usage = Usage()
    placed = together = 0
    start = time.perf_counter()
    for want, size in zip(wanted, sizes, strict=True):
        placed_here = _claims_one(allocator, want, size, nodes, usage, snapshot)
        placed += placed_here is not None
        together += placed_here is not None and size > 1 and _island(placed_here)
    return time.perf_counter() - start, placed, together


def _claims_one(
    allocator: ClaimAllocator,
    want: PodClaims,
    size: int,
    nodes: Sequence[ClaimNode],
    usage: Usage,
    snapshot: Snapshot,
) -> tuple[int, ...] | None:
    decision = allocator.place(want, nodes, usage, explain=False)
    if decision.node is None:
        return None
    for made in decision.claims:
        usage.add(made.allocation.devices)
    request_ = PodRequest(key=want.key, cpu_milli=100, gpus=size)
    snapshot.assume(request_, Assignment(node=decision.node, gpus=decision.gpus))
    return decision.gpus


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--pods", type=int, default=600)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3, help="runs per path; the fastest counts")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    sizes = [rng.choice(SIZES) for _ in range(args.pods)]
    names = [f"node-{i:03d}" for i in range(args.nodes)]
    multi = sum(1 for s in sizes if s > 1)
    print(f"{args.nodes} nodes x 8 GPUs (2 NVLink islands), {args.pods} pods, seed {args.seed}")
    dp_runs, cold_runs, warm_runs = [], [], []
    for _ in range(args.repeat):  # interleaved, so that a busy machine slows each path alike
        dp_runs.append(device_plugin(names, sizes))
        cold_runs.append(claims(names, sizes, warm=False))
        warm_runs.append(claims(names, sizes, warm=True))
    print("device plugin runs (s): " + ", ".join(f"{r[0]:.3f}" for r in dp_runs))
    print("claims cold runs (s):   " + ", ".join(f"{r[0]:.3f}" for r in cold_runs))
    print("claims warm runs (s):   " + ", ".join(f"{r[0]:.3f}" for r in warm_runs))
    dp_time = min(dp_runs)[0]
    rows = (
        ("device plugin", min(dp_runs)),
        ("claims, cold", min(cold_runs)),
        ("claims, warm", min(warm_runs)),
    )
    for label, (spent, placed, together) in rows:
        per_pod = 1e6 * spent / len(sizes)
        print(
            f"{label:14s} {per_pod:9.1f} us/pod  total {spent:7.3f} s  placed {placed}/{len(sizes)}"
            f"  multi-GPU pods within one island {together}/{multi}"
        )
    for label, (spent, _placed, _together) in rows[1:]:
        ratio = spent / dp_time
        verdict = "meets" if ratio <= TARGET else "misses"
        print(f"{label} / device plugin: {ratio:.2f}x ({verdict} the {TARGET}x target)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
