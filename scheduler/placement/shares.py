"""GPU shares as placement sees them (DESIGN §12): which share containers a pod places on a node,
which GPU each one gets, and why none fits.

A node's GPU is *shared* when its replica slots (`NodeState.gpu_slots`) are above 0: it then
serves only replicas of the node's `share_resource`, each share charged memory, compute and
slots; its free milli-GPU (the fragmentation score's currency) is what is left of its most used
dimension. An unshared GPU serves whole-GPU pods and, as in the published simulator, the
simulator's `gpu_milli` pods (which the runtime never makes: its share pods ask by memory).

What a pod places (`share_asks`): its `gpu_milli` share (the simulator's), else its explicit share
containers (`PodRequest.shares`: a shared replica, `gpu-memory` or `gpu-compute`), else, on a node
whose `nvidia.com/gpu` replicas are shared, the equal-split reading of its plain GPU request
(`PodRequest.split`), as NVIDIA's time-slicing hands replicas out. Inside a node the fullest GPU
that fits takes each container in spec order (pack); the node is chosen by the scores.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agent.model import MILLI_PER_GPU
from agent.resource_names import GPU_RESOURCE
from agent.shares import ContainerShare, share_milli

from .gpushare import GpuShare
from .node import Assignment, NodeState
from .request import PodRequest

__all__ = [
    "REASON_NO_REPLICA",
    "format_bytes",
    "legacy_share",
    "no_shared_gpu",
    "place_shares",
    "placed_milli",
    "share_asks",
    "share_reason",
    "size_on",
]

REASON_NO_REPLICA = "node(s) had no shared GPU with a free replica"
_NO_NRT = "node(s) had no NodeResourceTopology saying which GPUs are shared"


def no_shared_gpu(resource: str) -> str:
    """The reason for a node without GPUs shared as `resource`."""
    return f"node(s) had no GPU shared as {resource}"


class _Room:
    """What each GPU has free, copied so one pod's containers see each other's charges."""

    def __init__(self, node: NodeState, *, copy: bool) -> None:
        """`copy` False: the node's own lists, for a pod of one share container (never taken)."""
        self.slots = list(node.slots_free) if copy else node.slots_free
        self.memory = list(node.memory_free) if copy else node.memory_free
        self.compute = list(node.compute_free) if copy else node.compute_free
        self.milli = list(node.gpu_free) if copy else node.gpu_free

    def take(self, share: GpuShare) -> None:
        g = share.gpu
        self.slots[g] -= share.slots
        self.memory[g] -= share.memory
        self.compute[g] -= share.compute
        self.milli[g] -= share.milli


def placed_milli(pod: PodRequest, assignment: Assignment) -> int:
    """The milli-GPU `pod` takes with `assignment`: its shares' milli where it places shares
    (a runtime share's depends on the GPU), else its whole GPUs and `gpu_milli`."""
    return assignment.share_milli if assignment.shares else pod.gpu_milli_total


def share_asks(pod: PodRequest, node: NodeState) -> tuple[ContainerShare, ...]:
    """The share containers `pod` places on `node` (empty for the simulator's `gpu_milli` pod,
    which `legacy_share` places, and for a pod that places none there)."""
    if pod.shares:
        return pod.shares
    if pod.gpus and node.share_resource == GPU_RESOURCE:
        return pod.split
    return ()


def _size(ask: ContainerShare, slots: int, total: int) -> tuple[int, int, int]:
    """(milli, memory, compute) of `ask` on a GPU of `slots` replicas and `total` bytes."""
    n = ask.replicas
    if ask.memory_bytes is None:
        return min(MILLI_PER_GPU, MILLI_PER_GPU * n // slots), n * (total // slots), 0
    milli = share_milli(
        memory_bytes=ask.memory_bytes, compute_percent=ask.compute_percent, gpu_memory_bytes=total
    )
    return milli, ask.memory_bytes, ask.compute_percent or 0


def size_on(ask: ContainerShare, node: NodeState, g: int) -> GpuShare:
    """`ask` sized on shared GPU `g`: an equal split takes its replicas' part of the memory."""
    milli, memory, compute = _size(ask, node.gpu_slots[g], node.gpu_memory[g])
    return GpuShare(
        gpu=g,
        milli=milli,
        memory=memory,
        compute=compute,
        slots=ask.replicas,
        container=ask.container,
    )


def _shared_gpus(node: NodeState, resource: str) -> tuple[int, ...]:
    return node.shared_gpus if node.share_resource == resource else ()


def _best_gpu(ask: ContainerShare, node: NodeState, room: _Room) -> int | None:
    """The fullest shared GPU with room for `ask` (lowest index on ties), or None. Only the
    memory and compute a GPU must have free are computed here (the milli: for the one chosen)."""
    best: int | None = None
    n, compute = ask.replicas, ask.compute_percent or 0
    sized = ask.memory_bytes
    for g in _shared_gpus(node, ask.resource):
        memory = sized if sized is not None else n * (node.gpu_memory[g] // node.gpu_slots[g])
        if (
            room.slots[g] >= n
            and room.memory[g] >= memory
            and room.compute[g] >= compute
            and (best is None or room.milli[g] < room.milli[best])
        ):
            best = g
    return best


def place_shares(pod: PodRequest, node: NodeState) -> tuple[GpuShare, ...] | None:
    """A GPU for each of `pod`'s share containers on `node` (the fullest that fits, lowest index
    on ties; containers in spec order), or None when one does not fit."""
    asks = share_asks(pod, node)
    room = _Room(node, copy=len(asks) > 1)
    out: list[GpuShare] = []
    for ask in asks:
        g = _best_gpu(ask, node, room)
        if g is None:
            return None
        share = size_on(ask, node, g)
        if len(asks) > 1:
            room.take(share)
        out.append(share)
    return tuple(out)


def legacy_share(
    node: NodeState, milli: int, on_numa: Callable[[int], bool], gpus: Sequence[int] | None = None
) -> GpuShare | None:
    """The simulator's `gpu_milli` share: the fitting GPU with the least free milli (pack),
    lowest index on ties, among `gpus` (default all). On a shared GPU it also takes a replica
    and its fraction of the memory."""
    best: GpuShare | None = None
    for g in range(len(node.gpu_free)) if gpus is None else gpus:
        free = node.gpu_free[g]
        if node.gpu_mig[g] or free < milli or not on_numa(g):
            continue
        share = _legacy_on(node, g, milli)
        if share is None:
            continue
        if best is None or free < node.gpu_free[best.gpu]:
            best = share
    return best


def _legacy_on(node: NodeState, g: int, milli: int) -> GpuShare | None:
    if not node.gpu_slots[g]:
        return GpuShare(gpu=g, milli=milli)
    memory = milli * node.gpu_memory[g] // MILLI_PER_GPU
    if node.slots_free[g] < 1 or node.memory_free[g] < memory:
        return None
    return GpuShare(gpu=g, milli=milli, memory=memory, slots=1)


def format_bytes(amount: int) -> str:
    """Bytes as a Kubernetes quantity: `20Gi`, `512Mi`, else plain bytes."""
    for unit, suffix in ((1 << 40, "Ti"), (1 << 30, "Gi"), (1 << 20, "Mi"), (1 << 10, "Ki")):
        if amount and amount % unit == 0:
            return f"{amount // unit}{suffix}"
    if amount >= 1 << 30:
        return f"{amount / (1 << 30):.1f}Gi"
    return str(amount)


def share_reason(pod: PodRequest, node: NodeState) -> str:
    """Why `pod`'s shares do not fit on `node` (node-independent words, numbers from its state)."""
    asks = share_asks(pod, node)
    resource = asks[0].resource if asks else GPU_RESOURCE
    gpus = _shared_gpus(node, resource)
    if not gpus:
        return _NO_NRT if node.links is None else no_shared_gpu(resource)
    for ask in asks:
        sizes = [size_on(ask, node, g) for g in gpus]
        reason = _ask_reason(ask, sizes, node)
        if reason:
            return reason
    return REASON_NO_REPLICA


def _ask_reason(ask: ContainerShare, sizes: Sequence[GpuShare], node: NodeState) -> str | None:
    with_slot = [s for s in sizes if node.slots_free[s.gpu] >= s.slots]
    if not with_slot:
        return REASON_NO_REPLICA
    memory = max(s.memory for s in sizes)
    largest = max(node.memory_free[s.gpu] for s in with_slot)
    if all(s.memory > node.gpu_memory[s.gpu] for s in sizes):
        biggest = max(node.gpu_memory[s.gpu] for s in sizes)
        return (
            f"a share of {format_bytes(memory)} is more than any shared GPU's memory "
            f"({format_bytes(biggest)})"
        )
    if all(node.memory_free[s.gpu] < s.memory for s in with_slot):
        return (
            f"no shared GPU had {format_bytes(memory)} free for a share "
            f"(largest free {format_bytes(largest)})"
        )
    if ask.compute_percent:
        most = max(node.compute_free[s.gpu] for s in with_slot)
        return (
            f"no shared GPU had {ask.compute_percent}% compute free for a share (most free {most}%)"
        )
    return None
