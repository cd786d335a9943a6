"""Which GPU each share of a bound pod is on (DESIGN §12), so the per-GPU view is rebuilt after a
restart; and the floor the NRT puts under it (`hold_nrt_use`).

In order: the shares this scheduler assigned (an assumed pod), else what the node's NRT says the
pod's share containers use (`sharePods`: the agent counts them from its own record of what it
gave, which no pod author writes; a running pod is named there), else, for a pod of this scheduler
not counted yet (bound, not yet allocated, or the NRT not yet republished),
its `gputopo.io/gpus` annotation (container -> GPU UUID, sized as the pod asks, a replica an init
container hands on charged once); a share container of this scheduler's pod that the annotation
does not place is charged its size where the kubelet would put it. A pod of another scheduler is
given an equal split on its replica's GPU whatever it asks or its annotations say, and is charged
that: equal splits where the kubelet would hand its replicas out (the fullest shared GPU with a
free replica).

The pod's author can edit or delete its annotation. So each shared GPU is also charged at least
what the node's NRT says its shares use (the agent counts that from its own record of what it
gave, which no tenant writes): `hold_nrt_use` charges the difference where the NRT's count is the
larger, so an edited annotation can move or shrink a share only toward more charged, never less.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping, Sequence

from agent.nrt import DecodedTopology
from agent.share_pods import PodShare
from agent.shares import GPU_COMPUTE, GPU_MEMORY, ContainerShare, share_milli
from scheduler.placement import Assignment, GpuShare, NodeState, PodRequest
from scheduler.placement.shares import place_shares, share_asks, shares_on
from scheduler.runtime.cluster.podinfo import PodInfo

__all__ = ["Counted", "hold_nrt_use", "nrt_shares", "pod_shares_on"]


Counted = Sequence[tuple[int, PodShare]]
"""What the node's NRT says one pod's share containers use: (GPU index, use) per container."""


def nrt_shares(nrt: DecodedTopology) -> dict[str, Counted]:
    """Per pod UID, what the NRT's `sharePods` say its share containers use (entries without a
    UID are left out: a name may be the last pod's)."""
    found: dict[str, list[tuple[int, PodShare]]] = defaultdict(list)
    for zone in nrt.availability.gpus:
        for use in zone.share_pods:
            if use.uid:
                found[use.uid].append((zone.index, use))
    return dict(found)


def pod_shares_on(
    state: NodeState, pod: PodInfo, uuids: Mapping[str, int], counted: Counted = ()
) -> Assignment:
    """The assignment charging `pod`'s shares on `state` (before `state.add_pod`); `counted`:
    what the node's NRT says they use (the agent's count, which no pod author writes)."""
    if pod.assignment is not None and pod.assignment.shares:
        return pod.assignment
    usable = [(g, use) for g, use in counted if g < state.gpu_count and state.gpu_slots[g]]
    if usable:
        return Assignment(node=state.name, shares=tuple(_counted(state, g, u) for g, u in usable))
    asks = share_asks(pod.request, state)
    annotated = pod.share_gpus if pod.ours else {}
    gpus = [uuids.get(annotated.get(ask.container, ""), -1) for ask in asks]
    placed, unknown = shares_on(pod.request, state, gpus)
    if unknown:
        splits = unknown
        if not pod.ours:
            splits = tuple(
                dataclasses.replace(ask, memory_bytes=None, compute_percent=None) for ask in unknown
            )
        placed += _equal_splits(state, pod.request, splits, placed)
    return Assignment(node=state.name, shares=placed)


def _counted(state: NodeState, g: int, use: PodShare) -> GpuShare:
    milli = share_milli(
        memory_bytes=use.memory_bytes,
        compute_percent=use.compute_percent,
        gpu_memory_bytes=state.gpu_memory[g] or 1,
    )
    return GpuShare(
        gpu=g,
        milli=milli,
        memory=use.memory_bytes,
        compute=use.compute_percent or 0,
        slots=use.replicas,
        container=use.container,
    )


def hold_nrt_use(state: NodeState, nrt: DecodedTopology) -> None:
    """Charge each shared GPU of `state` (its pods charged) up to what `nrt` says its shares
    use, where that is more."""
    for g in state.shared_gpus:
        counts = nrt.gpu_counts(g) if g < len(nrt.availability.gpus) else {}
        memory, compute = counts.get(GPU_MEMORY), counts.get(GPU_COMPUTE)
        more_memory = state.memory_free[g] - memory.available if memory is not None else 0
        more_compute = state.compute_free[g] - compute.available if compute is not None else 0
        if more_memory > 0 or more_compute > 0:
            state.hold_share_room(g, memory=max(0, more_memory), compute=max(0, more_compute))


def _equal_splits(
    state: NodeState,
    request: PodRequest,
    asks: tuple[ContainerShare, ...],
    placed: tuple[GpuShare, ...],
) -> tuple[GpuShare, ...]:
    """Equal splits for `asks` where the kubelet would put them, with `placed` already taken
    (none when no shared GPU has a replica left: the pod is then counted by its resources)."""
    probe = state.clone()
    probe.add_pod(request, Assignment(node=state.name, shares=placed))
    asking = dataclasses.replace(
        request, shares=asks, share_reuse=(), gpus=0, gpu_milli=0, split=()
    )
    return place_shares(asking, probe) or ()
