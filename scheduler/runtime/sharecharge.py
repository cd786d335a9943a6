"""Which GPU each share of a bound pod is on (DESIGN §12), so the per-GPU view is rebuilt from
pods alone and a restart loses nothing.

In order: the shares this scheduler assigned (an assumed pod), else the pod's `gputopo.io/gpus`
annotation (container -> GPU UUID, sized as the pod asks, a replica an init container hands on
charged once), else, for a pod another scheduler placed, equal splits where the kubelet would
hand its replicas out (the fullest shared GPU with a free replica). A container whose annotated
GPU is unknown or not shared here counts as such an equal split too, so its replica is never
forgotten.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from agent.shares import ContainerShare
from scheduler.placement import Assignment, GpuShare, NodeState, PodRequest
from scheduler.placement.shares import place_shares, share_asks, shares_on
from scheduler.runtime.podinfo import PodInfo

__all__ = ["pod_shares_on"]


def pod_shares_on(state: NodeState, pod: PodInfo, uuids: Mapping[str, int]) -> Assignment:
    """The assignment charging `pod`'s shares on `state` (before `state.add_pod`)."""
    if pod.assignment is not None and pod.assignment.shares:
        return pod.assignment
    asks = share_asks(pod.request, state)
    gpus = [uuids.get(pod.share_gpus.get(ask.container, ""), -1) for ask in asks]
    placed, unknown = shares_on(pod.request, state, gpus)
    if unknown:
        splits = tuple(
            dataclasses.replace(ask, memory_bytes=None, compute_percent=None) for ask in unknown
        )
        placed += _equal_splits(state, pod.request, splits, placed)
    return Assignment(node=state.name, shares=placed)


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
