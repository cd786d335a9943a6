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
from typing import cast

from agent.model import MILLI_PER_GPU
from agent.resource_names import GPU_RESOURCE
from agent.shares import ContainerShare, share_milli

from .gpushare import MAX_COMPUTE_PERCENT, GpuShare
from .load import busy_key, load_key, measured_reason
from .node import Assignment, NodeState
from .request import PodRequest

__all__ = [
    "REASON_NO_REPLICA",
    "format_bytes",
    "group_on",
    "legacy_rooms",
    "legacy_share",
    "no_shared_gpu",
    "place_shares",
    "placed_milli",
    "share_asks",
    "share_gpu",
    "share_groups",
    "share_reason",
    "shared_room",
    "shares_on",
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


def shared_room(node: NodeState) -> tuple[tuple[int, ...], ...]:
    """All `place_shares` reads of a node besides its static shape: what each GPU has free
    (replicas, memory, compute, milli-GPU) and, with measured use, how busy each is."""
    return (
        tuple(node.slots_free),
        tuple(node.memory_free),
        tuple(node.compute_free),
        tuple(node.gpu_free),
        busy_key(node),
    )


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
    """(milli, memory, compute) of `ask` on a GPU of `slots` replicas and `total` bytes; an
    equal split with a compute limit takes that compute too (as the agent counts it), and its
    milli is the larger of its replicas' part and its compute (as `share_milli`)."""
    n = ask.replicas
    if ask.memory_bytes is None:
        compute = ask.compute_percent or 0
        split = min(MILLI_PER_GPU, MILLI_PER_GPU * n // slots)
        milli = max(split, compute * MILLI_PER_GPU // MAX_COMPUTE_PERCENT)
        return milli, n * (total // slots), compute
    milli = share_milli(
        memory_bytes=ask.memory_bytes, compute_percent=ask.compute_percent, gpu_memory_bytes=total
    )
    return milli, ask.memory_bytes, ask.compute_percent or 0


def size_on(ask: ContainerShare, node: NodeState, g: int) -> GpuShare:
    """`ask` sized on shared GPU `g`: an equal split takes its replicas' part of the memory."""
    return group_on((ask,), node, g)[0]


def _shared_gpus(node: NodeState, resource: str) -> tuple[int, ...]:
    return node.shared_gpus if node.share_resource == resource else ()


def share_groups(pod: PodRequest, asks: Sequence[ContainerShare]) -> list[tuple[int, ...]]:
    """`asks` (indices) by the replica they run on, first holder first: the kubelet hands an
    init container's replica again to later init containers and to the first app container of
    that resource (`PodRequest.share_reuse`), so they share one GPU (the agent gives a reused
    replica its first holder's GPU); every other container holds its own."""
    if len(asks) == 1:
        return [(0,)]
    reuse = pod.share_reuse if asks is pod.shares and pod.share_reuse else range(len(asks))
    groups: dict[int, list[int]] = {}
    for i, first in enumerate(reuse):
        groups.setdefault(first, []).append(i)
    return [tuple(members) for members in groups.values()]


def _group_size(group: Sequence[ContainerShare], slots: int, total: int) -> tuple[int, int, int]:
    """(milli, memory, compute) of a replica group: the most any member asks (they never run
    at once: an init container ends before the next container starts)."""
    sizes = [_size(ask, slots, total) for ask in group]
    if len(sizes) == 1:
        return sizes[0]
    return max(s[0] for s in sizes), max(s[1] for s in sizes), max(s[2] for s in sizes)


def group_on(group: Sequence[ContainerShare], node: NodeState, g: int) -> list[GpuShare]:
    """A replica group on shared GPU `g`: its first holder charged the group's size, the
    others nothing more (the same replica)."""
    out = [_first_holder(group, node, g)]
    out.extend(GpuShare(gpu=g, milli=0, container=ask.container) for ask in group[1:])
    return out


def _first_holder(group: Sequence[ContainerShare], node: NodeState, g: int) -> GpuShare:
    """The share of a replica group's first holder on shared GPU `g`: the group's size."""
    milli, memory, compute = _group_size(group, node.gpu_slots[g], node.gpu_memory[g])
    first = group[0]
    return GpuShare(
        gpu=g,
        milli=milli,
        memory=memory,
        compute=compute,
        slots=first.replicas,
        container=first.container,
    )


def _best_gpu(
    group: Sequence[ContainerShare], node: NodeState, room: _Room, *, in_order: bool = False
) -> int | None:
    """The fullest shared GPU with room for `group` (lowest index on ties), or None. Only the
    memory and compute a GPU must have free are computed here (the milli: for the one chosen).
    `in_order`: `room` is the node's own, whose shared GPUs `_fullest_first` orders, so the
    first with room is the one."""
    best: int | None = None
    n = group[0].replicas
    compute = max(ask.compute_percent or 0 for ask in group)
    sized = [ask.memory_bytes for ask in group if ask.memory_bytes is not None]
    most = max(sized, default=0)
    split = len(sized) < len(group)
    gpus = _shared_gpus(node, group[0].resource)
    if in_order and gpus:
        gpus = cast("tuple[int, ...]", node.derive("shared GPUs, fullest first", _fullest_first))
    for g in gpus:
        memory = max(most, n * (node.gpu_memory[g] // node.gpu_slots[g])) if split else most
        if room.slots[g] >= n and room.memory[g] >= memory and room.compute[g] >= compute:
            if in_order:
                return g
            if best is None or _before(node, room, g, best):
                best = g
    return best


def _fullest_first(node: NodeState) -> tuple[int, ...]:
    """The node's shared GPUs in `_before`'s order (ties by index): the first of them with room
    for a share is `_best_gpu`'s choice."""
    gpus = node.shared_gpus  # ascending: a stable sort leaves ties by index
    if not node.gpu_load:
        return tuple(sorted(gpus, key=node.gpu_free.__getitem__))
    return tuple(sorted(gpus, key=lambda g: load_key(node, g, node.gpu_free[g])))


def _before(node: NodeState, room: _Room, g: int, best: int) -> bool:
    """GPU `g` is preferred to `best`: the fuller (less milli free) without measured use; with
    it, `load.load_key` (memory in tenths, then SM, then power)."""
    if not node.gpu_load:
        return room.milli[g] < room.milli[best]
    return load_key(node, g, room.milli[g]) < load_key(node, best, room.milli[best])


def share_gpu(asks: Sequence[ContainerShare], node: NodeState) -> int | None:
    """The GPU `place_shares` gives a pod whose only share container is `asks[0]` (None: none
    fits). What it places there depends on nothing else of the node's load (`size_on`)."""
    return _best_gpu(asks, node, _Room(node, copy=False), in_order=True)


def place_shares(pod: PodRequest, node: NodeState) -> tuple[GpuShare, ...] | None:
    """A GPU for each of `pod`'s share containers on `node` (per replica group, the fullest
    that fits, lowest index on ties, in spec order), or None when one does not fit."""
    asks = share_asks(pod, node)
    if len(asks) == 1:  # most pods: one group of one, nothing to copy or take between groups
        g = share_gpu(asks, node)
        return None if g is None else (_first_holder(asks, node, g),)
    groups = share_groups(pod, asks)
    room = _Room(node, copy=len(groups) > 1)
    placed: list[GpuShare | None] = [None] * len(asks)
    for members in groups:
        group = [asks[i] for i in members]
        g = _best_gpu(group, node, room)
        if g is None:
            return None
        shares = group_on(group, node, g)
        if len(groups) > 1:
            room.take(shares[0])
        for i, share in zip(members, shares, strict=True):
            placed[i] = share
    return tuple(s for s in placed if s is not None)


def shares_on(
    pod: PodRequest, node: NodeState, gpus: Sequence[int]
) -> tuple[tuple[GpuShare, ...], tuple[ContainerShare, ...]]:
    """`pod`'s shares with each replica group on the GPU `gpus` (per share container, -1:
    unknown) names for its first member with a usable one (shared, on this node); the groups
    without one come back as their first holder's ask instead (the caller decides where)."""
    asks = share_asks(pod, node)
    placed: list[GpuShare] = []
    unknown: list[ContainerShare] = []
    for members in share_groups(pod, asks):
        usable = [gpus[i] for i in members if 0 <= gpus[i] < node.gpu_count]
        usable = [g for g in usable if node.gpu_slots[g]]
        if usable:
            placed.extend(group_on([asks[i] for i in members], node, usable[0]))
        else:
            unknown.append(asks[members[0]])
    return tuple(placed), tuple(unknown)


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
    if not _legacy_room(node, g, milli):
        return None
    return GpuShare(gpu=g, milli=milli, memory=_legacy_memory(node, g, milli), slots=1)


def _legacy_memory(node: NodeState, g: int, milli: int) -> int:
    """The memory a `gpu_milli` share of `milli` takes on shared GPU `g`: its fraction."""
    return milli * node.gpu_memory[g] // MILLI_PER_GPU


def _legacy_room(node: NodeState, g: int, milli: int) -> bool:
    """Shared GPU `g` has a replica and the memory a `gpu_milli` share of `milli` takes."""
    return node.slots_free[g] >= 1 and node.memory_free[g] >= _legacy_memory(node, g, milli)


def legacy_rooms(node: NodeState, milli: int) -> tuple[bool, ...]:
    """Per shared GPU of `node`, whether a `gpu_milli` share of `milli` finds its replica and
    memory there: all `legacy_share` reads of the replicas and memory the shares left (besides
    that, each GPU's free milli-GPU and the node's static shape)."""
    return tuple(_legacy_room(node, g, milli) for g, slots in enumerate(node.gpu_slots) if slots)


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


def _what(ask: ContainerShare) -> str:
    return "replica" if ask.memory_bytes is None else "share"


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
        roomiest = max(with_slot, key=lambda s: node.memory_free[s.gpu])
        measured = measured_reason(node, roomiest.gpu, roomiest.memory, _what(ask))
        if measured is not None:
            return measured
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
