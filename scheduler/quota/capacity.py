"""The root's capacity (DESIGN §10): what nodes give gputopo to schedule, in quota units.

A node gives its allocatable (`allocatable_amounts`), its GPUs also under its model's keys, with
each shared GPU counted as one GPU (DESIGN §12): the kubelet's allocatable counts the replicas of
a time-sliced plain `nvidia.com/gpu` as that many GPUs, and those of a renamed one
(`nvidia.com/gpu.shared`) not at all, while a share is charged the milli of the one GPU it is
on. The runtime keeps the sum per node as nodes come and go and subtracts what other schedulers'
pods use (`scheduler.runtime.cluster.queuebook`); the simulator, with no such pods, sums its
nodes once.
"""

from __future__ import annotations

from collections.abc import Iterable

from agent.model import MILLI_PER_GPU
from agent.resource_names import GPU_RESOURCE
from scheduler.placement import GPU_PRODUCT_LABEL, NodeState
from scheduler.quota.amounts import add_into, allocatable_amounts
from scheduler.quota.models import model_amounts, model_of_product

__all__ = ["nodes_capacity", "shared_gpu_fix"]


def shared_gpu_fix(node: NodeState) -> dict[str, int]:
    """What the node's allocatable miscounts of its shared GPUs, in milli-GPU: each shared GPU
    is one GPU; the kubelet counted its replicas (`nvidia.com/gpu` shared) or nothing (renamed)."""
    replicas = [n for n in node.gpu_slots if n]
    counted = sum(replicas) if node.share_resource == GPU_RESOURCE else 0
    delta = (len(replicas) - counted) * MILLI_PER_GPU
    return {GPU_RESOURCE: delta} if delta else {}


def nodes_capacity(nodes: Iterable[NodeState]) -> dict[str, int]:
    """The root's capacity where no other scheduler's pod runs: every node's allocatable with
    its shared GPUs counted once, and its GPUs again under its model's keys."""
    total: dict[str, int] = {}
    for node in nodes:
        counted = allocatable_amounts(node.allocatable)
        add_into(counted, shared_gpu_fix(node))
        model = model_of_product(node.labels.get(GPU_PRODUCT_LABEL, ""))
        add_into(total, counted)
        add_into(total, model_amounts(counted, model))
    return total
