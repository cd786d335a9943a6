"""Allocation cost per pod with DRA claims against the same pods through the device-plugin path
(issue 44; target: claims at most 1.5x), not a test.

One cluster of NODES nodes, each 8 GPUs in two NVLink islands of four (NV12 inside, SYS across),
published twice: as `nvidia.com/gpu` (the device plugin's path: `Placer.decide` on a `Snapshot`,
then `assume`) and as a ResourceSlice of `gpu-<minor>` devices, each with a UUID of its own as
real GPUs have (so no two nodes publish equal devices; the claims path: one claim per pod
of `exactly` N GPUs of class gpu.gputopo.io, `ClaimAllocator.place` given the snapshot as its nodes'
change log, then the devices counted as used and the pod assumed on the node's `NodeState`, which
both paths score with the same `Scoring`). The same seeded pods (1, 2, 4 or 8 GPUs) arrive one by
one until PODS were tried; each path's time is the decision and its bookkeeping, per pod, in wall
time and in this process's CPU time (the steadier of the two on a busy machine).

Each of `--repeat` rounds runs every path once on fresh objects, in turns whose order alternates
(plugin first, then claims first), so that a quiet or busy spell and the caches the paths share
(the GPU-set search) fall on both alike. A timed loop starts after a full garbage collection with
what exists then frozen (`gc.freeze`): the set-up's objects (parsed pods and slices, earlier runs)
are neither collected nor traversed on the loop's time, while every collection the loop's own
allocations cause is (printed per generation). Printed per path: every run, the fastest and the
median, and the claims/plugin ratios of both. Then `--lockstep` rounds run the three paths pod by
pod in turn, each step timed on its own, so that the machine's spells fall on all three alike:
each path's time per pod and the claims/plugin ratios of those.

The claims path runs cold (compiling the selectors, building each device's CEL value and putting
each node in its class of like nodes during the first pods) and warm (those done before the clock
starts, as in a scheduler that has run a while: a 3-GPU pod, a size no timed pod asks, decided
and not applied). The plugin's path puts every node in its class of states when its `Placer` is
made, in its set-up (15 ms at 1,000 nodes), so warm is the like-for-like comparison; both are
printed. Pods that fit nowhere are decided without the per-node reasons on both paths. Also
printed: pods placed, how many multi-GPU pods got GPUs of one island, and a digest of every
decision (pod, node, GPUs; for claims also the devices), so that a faster decision can be checked
to be the same decision.

    .venv/bin/python bench/claims_bench.py [--nodes 64] [--pods 600] [--seed 1] [--repeat 3]
        [--lockstep 1]
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import random
import sys
import time
from collections.abc import Generator, Sequence
from itertools import islice
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.gpuset import GpuSelector
from scheduler.claims.allocator import CLAIM_WEIGHTS, ClaimAllocator
from scheduler.claims.decision import ClaimNode, PodClaims, PodDecision
from scheduler.claims.order import GpuMap
from scheduler.claims.parse import parse_slice
from scheduler.claims.selectors import Selectors
from scheduler.claims.slices import node_devices
from scheduler.claims.usage import Usage
from scheduler.placement import Assignment, NodeState, Placer, PodRequest, Scoring, Snapshot
from tests.builders.claims import (
    claim,
    classes,
    own_gpus,
    pod,
    request,
    slice_obj,
    two_islands,
)

TARGET = 1.5
SIZES = (1, 1, 2, 2, 4, 8)
_UNASKED = pod("ns/warm-up", claim("warm-up", request("gpus", 3)))
"""A size no timed pod asks: deciding it (not applied) classes every node, and builds the view of
no shape the timed pods use."""


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
    one island, digest of the decisions, garbage collections per generation during the loop."""

    wall: float
    cpu: float
    placed: int
    together: int
    digest: str
    collections: tuple[int, ...]

    def seconds(self, clock: str) -> float:
        return self.wall if clock == "wall" else self.cpu


Started = tuple[float, float, tuple[int, ...]]
"""The clocks and the collector's counts per generation at the start of a timed loop."""


def _start() -> Started:
    """The clocks at the start of a timed loop, after a full collection, with every object
    that exists then frozen: the set-up's garbage is not collected, nor its live objects
    traversed by a full collection, on the loop's time (by chance, a full collection there costs
    tens of ms, more for the path whose set-up is larger); the loop's own garbage is."""
    gc.collect()
    gc.freeze()
    return time.perf_counter(), time.process_time(), _collections()


def _collections() -> tuple[int, ...]:
    return tuple(g["collections"] for g in gc.get_stats())


def _run(started: Started, made: Sequence[Made]) -> Run:
    wall, cpu, collections = time.perf_counter(), time.process_time(), _collections()
    gc.unfreeze()
    spent = tuple(n - m for n, m in zip(collections, started[2], strict=True))
    return _summed(wall - started[0], cpu - started[1], made, spent)


def _summed(wall: float, cpu: float, made: Sequence[Made], collections: tuple[int, ...]) -> Run:
    together = sum(size > 1 and _island(gpus) for _line, gpus, size in made)
    digest = _digest([line for line, _gpus, _size in made])
    return Run(wall, cpu, len(made), together, digest, collections)


def _digest(decisions: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(decisions).encode()).hexdigest()[:16]


Made = tuple[str, tuple[int, ...], int]
"""A pod placed: its decision as digested (pod, node, GPUs; for claims also the devices), the
GPUs and the pod's size."""


def _timed(steps: Generator[Made | None], pods: int) -> Run:
    """A path's run: its set-up (the first step) untimed, then every pod; the set-up's objects
    are let go after the clock stops (ending the steps on its time would count their tear-down:
    the claims path's 4 ms at 256 nodes and 15 at 1,000, the plugin's 0.5 and 2)."""
    next(steps)
    started = _start()
    made = [step for step in islice(steps, pods) if step is not None]
    done = _run(started, made)
    steps.close()
    return done


def device_plugin(names: Sequence[str], sizes: Sequence[int]) -> Run:
    return _timed(_plugin_steps(names, sizes), len(sizes))


def claims(names: Sequence[str], sizes: Sequence[int], warm: bool) -> Run:
    return _timed(_claims_steps(names, sizes, warm), len(sizes))


def _plugin_steps(names: Sequence[str], sizes: Sequence[int]) -> Generator[Made | None]:
    """The plugin's path: the set-up, then one pod a step (None: it fits nowhere)."""
    snapshot = Snapshot([_state(n) for n in names])
    placer = Placer(snapshot, _scoring())
    yield None
    for i, size in enumerate(sizes):
        want = PodRequest(key=f"ns/p{i}", cpu_milli=100, gpus=size)
        found = placer.decide(want, explain=False).assignment
        if found is not None:
            snapshot.assume(want, found)
        yield None if found is None else (f"{want.key} {found.node} {found.gpus}", found.gpus, size)


def _claims_steps(names: Sequence[str], sizes: Sequence[int], warm: bool) -> Generator[Made | None]:
    """The claims path: the set-up, then one pod a step (None: it fits nowhere). `warm`: each
    device's CEL value built in the set-up (a running scheduler builds it once per device, when
    its slice arrives); cold: during the first pods."""
    snapshot = Snapshot([_state(n) for n in names])
    nodes = []
    for n in names:
        devices, inventory = own_gpus(n)
        found = node_devices([parse_slice(slice_obj(n, devices))], n, {})
        gpus = GpuMap.build(inventory, found.devices, selector=SELECTOR)
        nodes.append(ClaimNode(name=n, devices=found, gpus=gpus, state=snapshot.node(n)))
    allocator = ClaimAllocator(classes(), scoring=_scoring())
    if warm:
        for node in nodes:
            for device in node.devices.devices:
                for expression in allocator.classes["gpu.gputopo.io"].selectors:
                    allocator.selectors.matches(expression, device)
    wanted = [pod(f"ns/p{i}", claim(f"c{i}", request("gpus", s))) for i, s in enumerate(sizes)]
    usage = Usage()
    if warm:  # every node classed, as the Placer's set-up puts every node in a state class
        allocator.place(_UNASKED, nodes, usage, explain=False, changes=snapshot)
    yield None
    for want, size in zip(wanted, sizes, strict=True):
        decision = _claims_one(allocator, want, size, nodes, usage, snapshot)
        if decision.node is None:
            yield None
            continue
        line = f"{want.key} {decision.node} {decision.gpus} {_devices(decision)}"
        yield line, decision.gpus, size


def lockstep(names: Sequence[str], sizes: Sequence[int]) -> list[Run]:
    """The three paths (plugin, cold, warm) one pod at a time in turn, each step timed on its
    own: a quiet or busy spell falls on all three alike (each also pays its timers, well under a
    microsecond a step). Collections are counted for the three together."""
    paths = [
        _plugin_steps(names, sizes),
        _claims_steps(names, sizes, warm=False),
        _claims_steps(names, sizes, warm=True),
    ]
    for steps in paths:
        next(steps)
    walls, cpus = [0.0] * 3, [0.0] * 3
    made: list[list[Made]] = [[] for _ in paths]
    started = _start()
    for _ in sizes:
        for k, steps in enumerate(paths):
            wall, cpu = time.perf_counter(), time.process_time()
            step = next(steps)
            walls[k] += time.perf_counter() - wall
            cpus[k] += time.process_time() - cpu
            if step is not None:
                made[k].append(step)
    together = _run(started, []).collections
    return [_summed(walls[k], cpus[k], made[k], together) for k in range(3)]


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


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _report(clock: str, runs: Sequence[Sequence[Run]], sizes: Sequence[int]) -> None:
    """Each path's fastest and median run by `clock` ("wall" or "CPU"), and both ratios to the
    plugin's."""
    multi = sum(1 for s in sizes if s > 1)
    fastest = [min(path, key=lambda r: r.seconds(clock)) for path in runs]
    medians = [_median([r.seconds(clock) for r in path]) for path in runs]
    print(f"by {clock} time (us/pod: fastest, median):")
    for label, run, median in zip(LABELS, fastest, medians, strict=True):
        spent = run.seconds(clock)
        print(
            f"{label:14s} {1e6 * spent / len(sizes):7.1f} {1e6 * median / len(sizes):7.1f}"
            f"  total {spent:7.3f} s  placed {run.placed}/{len(sizes)}"
            f"  multi-GPU pods within one island {run.together}/{multi}  decisions {run.digest}"
            f"  collections {'/'.join(map(str, run.collections))}"
        )
    for label, run, median in zip(LABELS[1:], fastest[1:], medians[1:], strict=True):
        ratio = run.seconds(clock) / fastest[0].seconds(clock)
        of_medians = median / medians[0]
        print(
            f"{label} / device plugin ({clock}): fastest {ratio:.2f}x ({_verdict(ratio)}),"
            f" medians {of_medians:.2f}x ({_verdict(of_medians)})"
        )


def _report_lockstep(number: int, runs: Sequence[Run], sizes: Sequence[int]) -> None:
    together = "/".join(map(str, runs[0].collections))
    print(f"lock-step round {number} (us/pod: CPU, wall; collections of the three {together}):")
    for label, run in zip(LABELS, runs, strict=True):
        print(
            f"{label:14s} {1e6 * run.cpu / len(sizes):7.1f} {1e6 * run.wall / len(sizes):7.1f}"
            f"  placed {run.placed}/{len(sizes)}  decisions {run.digest}"
        )
    for label, run in zip(LABELS[1:], runs[1:], strict=True):
        ratio = run.cpu / runs[0].cpu
        print(f"{label} / device plugin (lock-step CPU): {ratio:.2f}x ({_verdict(ratio)})")


def _verdict(ratio: float) -> str:
    return f"{'meets' if ratio <= TARGET else 'misses'} the {TARGET}x target"


def _round(names: Sequence[str], sizes: Sequence[int], plugin_first: bool) -> list[Run]:
    """One run of each path (plugin, cold, warm), in turns: the plugin's first or last."""
    turns = [
        lambda: device_plugin(names, sizes),
        lambda: claims(names, sizes, warm=False),
        lambda: claims(names, sizes, warm=True),
    ]
    order = range(3) if plugin_first else range(2, -1, -1)
    done = {i: turns[i]() for i in order}
    return [done[i] for i in range(3)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--pods", type=int, default=600)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3, help="rounds (one run per path each)")
    parser.add_argument("--lockstep", type=int, default=1, help="lock-step rounds (0: none)")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    sizes = [rng.choice(SIZES) for _ in range(args.pods)]
    names = [f"node-{i:03d}" for i in range(args.nodes)]
    print(f"{args.nodes} nodes x 8 GPUs (2 NVLink islands), {args.pods} pods, seed {args.seed}")
    Selectors().program("true")  # the CEL library imported before any run: no run pays for it
    rounds = [_round(names, sizes, plugin_first=r % 2 == 0) for r in range(args.repeat)]
    paths = [[done[i] for done in rounds] for i in range(3)]
    for label, runs in zip(LABELS, paths, strict=True):
        walls = ", ".join(f"{r.wall:.3f}" for r in runs)
        print(
            f"{label + ' runs (s):':24s}{walls}   CPU: " + ", ".join(f"{r.cpu:.3f}" for r in runs)
        )
    for clock in ("wall", "CPU"):
        _report(clock, paths, sizes)
    for r in range(args.lockstep):
        _report_lockstep(r + 1, lockstep(names, sizes), sizes)
    digests = {label: {r.digest for r in runs} for label, runs in zip(LABELS, paths, strict=True)}
    if any(len(found) > 1 for found in digests.values()):
        print(f"decisions differ between runs of one path: {digests}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
