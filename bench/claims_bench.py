"""Allocation cost per pod with DRA claims against the same pods through the device-plugin path
(issue 44; target: claims at most 1.5x), not a test.

One cluster of NODES nodes, each 8 GPUs in two NVLink islands of four (NV12 inside, SYS across),
published twice: as `nvidia.com/gpu` (the device plugin's path: `Placer.decide` on a `Snapshot`,
then `assume`) and as a ResourceSlice of `gpu-<minor>` devices (the claims path: one claim per pod
of `exactly` N GPUs of class gpu.gputopo.io, `ClaimAllocator.place` given the snapshot as its nodes'
change log, then the devices counted as used and the pod assumed on the node's `NodeState`, which
both paths score with the same `Scoring`). The same seeded pods (1, 2, 4 or 8 GPUs) arrive one by
one until PODS were tried; each path's time is the decision and its bookkeeping, per pod (the
fastest of `--repeat` fresh runs, the paths taking turns), after a full garbage collection (the
setup's garbage is not timed; what a path's own allocations cost the collector is), in wall time and
in this process's CPU time (the steadier of the two on a busy machine). The claims path runs cold
(compiling the selectors and building each device's CEL value during the first pods) and warm (those
built before the clock starts, as in a scheduler that has run a while). Pods that fit nowhere are
decided without the per-node reasons on both paths. Also printed: pods placed, how many multi-GPU
pods got GPUs of one island, and a digest of every decision (pod, node, GPUs; for claims also the
devices), so that a faster decision can be checked to be the same decision.

    .venv/bin/python bench/claims_bench.py [--nodes 64] [--pods 600] [--seed 1] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.gpuset import GpuSelector
from scheduler.claims.allocator import CLAIM_WEIGHTS, ClaimAllocator
from scheduler.claims.decision import ClaimNode, PodClaims, PodDecision
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


class Run(NamedTuple):
    """One path's run: seconds (wall, this process's CPU), pods placed, multi-GPU pods within
    one island, digest of the decisions."""

    wall: float
    cpu: float
    placed: int
    together: int
    digest: str

    def seconds(self, clock: str) -> float:
        return self.wall if clock == "wall" else self.cpu


def _start() -> tuple[float, float]:
    """The clocks at the start of a timed loop, after a full collection: the garbage of the
    setup (parsed pods and slices, earlier runs) is not collected on the loop's time, as it would
    be by chance (a full collection there costs tens of ms); the loop's own garbage is."""
    gc.collect()
    return _clocks()


def _clocks() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _run(started: tuple[float, float], placed: int, together: int, made: list[str]) -> Run:
    wall, cpu = _clocks()
    return Run(wall - started[0], cpu - started[1], placed, together, _digest(made))


def _digest(decisions: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(decisions).encode()).hexdigest()[:16]


def device_plugin(names: Sequence[str], sizes: Sequence[int]) -> Run:
    snapshot = Snapshot([_state(n) for n in names])
    placer = Placer(snapshot, _scoring())
    placed = together = 0
    made: list[str] = []
    started = _start()
    for i, size in enumerate(sizes):
        want = PodRequest(key=f"ns/p{i}", cpu_milli=100, gpus=size)
        decision = placer.decide(want, explain=False)
        if decision.assignment is not None:
            snapshot.assume(want, decision.assignment)
            placed += 1
            together += size > 1 and _island(decision.assignment.gpus)
            made.append(f"{want.key} {decision.assignment.node} {decision.assignment.gpus}")
    return _run(started, placed, together, made)


def claims(names: Sequence[str], sizes: Sequence[int], warm: bool) -> Run:
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
    made: list[str] = []
    started = _start()
    for want, size in zip(wanted, sizes, strict=True):
        decision = _claims_one(allocator, want, size, nodes, usage, snapshot)
        if decision.node is not None:
            placed += 1
            together += size > 1 and _island(decision.gpus)
            made.append(f"{want.key} {decision.node} {decision.gpus} {_devices(decision)}")
    return _run(started, placed, together, made)


def _devices(decision: PodDecision) -> list[str]:
    return [d.id.device for made in decision.claims for d in made.allocation.devices]


def _claims_one(
    allocator: ClaimAllocator,
    want: PodClaims,
    size: int,
    nodes: Sequence[ClaimNode],
    usage: Usage,
    snapshot: Snapshot,
) -> PodDecision:
    decision = allocator.place(want, nodes, usage, explain=False, changes=snapshot)
    if decision.node is None:
        return decision
    for made in decision.claims:
        usage.add(made.allocation.devices)
    request_ = PodRequest(key=want.key, cpu_milli=100, gpus=size)
    snapshot.assume(request_, Assignment(node=decision.node, gpus=decision.gpus))
    return decision


LABELS = ("device plugin", "claims, cold", "claims, warm")


def _report(clock: str, runs: Sequence[Sequence[Run]], sizes: Sequence[int]) -> None:
    """The fastest run of each path by `clock` ("wall" or "CPU") and the ratios to the plugin."""
    multi = sum(1 for s in sizes if s > 1)
    fastest = [min(path, key=lambda r: r.seconds(clock)) for path in runs]
    print(f"fastest by {clock} time:")
    for label, run in zip(LABELS, fastest, strict=True):
        spent = run.seconds(clock)
        per_pod = 1e6 * spent / len(sizes)
        print(
            f"{label:14s} {per_pod:9.1f} us/pod  total {spent:7.3f} s"
            f"  placed {run.placed}/{len(sizes)}"
            f"  multi-GPU pods within one island {run.together}/{multi}  decisions {run.digest}"
        )
    for label, run in zip(LABELS[1:], fastest[1:], strict=True):
        ratio = run.seconds(clock) / fastest[0].seconds(clock)
        verdict = "meets" if ratio <= TARGET else "misses"
        print(f"{label} / device plugin ({clock}): {ratio:.2f}x ({verdict} the {TARGET}x target)")


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
    print(f"{args.nodes} nodes x 8 GPUs (2 NVLink islands), {args.pods} pods, seed {args.seed}")
    dp_runs: list[Run] = []
    cold_runs: list[Run] = []
    warm_runs: list[Run] = []
    for _ in range(args.repeat):  # interleaved, so that a busy machine slows each path alike
        dp_runs.append(device_plugin(names, sizes))
        cold_runs.append(claims(names, sizes, warm=False))
        warm_runs.append(claims(names, sizes, warm=True))
    for label, runs in zip(LABELS, (dp_runs, cold_runs, warm_runs), strict=True):
        walls = ", ".join(f"{r.wall:.3f}" for r in runs)
        print(
            f"{label + ' runs (s):':24s}{walls}   CPU: " + ", ".join(f"{r.cpu:.3f}" for r in runs)
        )
    for clock in ("wall", "CPU"):
        _report(clock, (dp_runs, cold_runs, warm_runs), sizes)
    digests = {
        label: {r.digest for r in runs}
        for label, runs in zip(LABELS, (dp_runs, cold_runs, warm_runs), strict=True)
    }
    if any(len(found) > 1 for found in digests.values()):
        print(f"decisions differ between runs of one path: {digests}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
