"""`VerdictMemo`'s bookkeeping: the snapshot's nodes in numbered slots, and their states.

`NodeSlots` follows a `Snapshot` through its change counter (`Snapshot.changed_since`): a node
keeps its slot while it exists (a removed node's slot is reused), its cpu / memory / pod-slot /
idle-GPU / largest-share headroom sits in arrays for the vectorised pre-check, and every change is
appended to a log of slots, so a pod class decided at log position `p` recomputes only the slots
logged after `p`. A second log holds only the changes of slots whose node has shared GPUs (or had,
before the change): a GPU share pod fits no other node (the pre-check rejects it there: it asks a
free replica), so its classes follow that log and never look at the other nodes' changes. A third
holds those of slots whose node can give whole GPUs (one neither shared nor MIG-enabled, or
`nvidia.com/gpu` replicas, which plain GPU requests take as equal splits), before or after: the
only nodes a pod asking for whole GPUs may fit.

Each slot also carries a *state id*: equal ids mean equal static shape, GPU product label and load
(`static_shape`, `dynamic_state`), so one verdict serves them all; ids are interned once per node
change, not once per pod class, and never reused for another state (`Interner`). `members`
indexes the slots in each state (`StateMembers`), so a pod class is evaluated one state at a
time (`VerdictMemo._evaluate_states`). Ties between equal scores go to the lowest node name
(`first_by_name`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import cast

import numpy as np
import numpy.typing as npt

from agent.resource_names import GPU_RESOURCE

from .load import busy_key
from .node import GPU_PRODUCT_LABEL, NodeState, TopologyPolicy
from .request import CPU, MEMORY, PODS, PodRequest
from .slot_records import ChangeLog, Interner, StateMembers
from .snapshot import Snapshot

__all__ = [
    "BoolArray",
    "FloatArray",
    "IntArray",
    "NodeSlots",
    "dynamic_state",
    "static_shape",
]

IntArray = npt.NDArray[np.int64]
StateKey = tuple[int, str | None, tuple[object, ...]]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
_LOG_KEPT = 1 << 16  # log entries kept at least (older classes are recomputed in full)
_IDLE_STATES = 4096  # states no node is in, kept with their ids (a node may come back to one)
_IDLE_SHAPES = 64
_Room = tuple[int, int, int, int, int, int, int, int]
_FEW_SLOTS = 32  # changed slots up to which headroom is written column by column
_ANY = -(1 << 62)  # the need of a resource a pod does not ask (`sift`)


def static_shape(node: NodeState) -> tuple[object, ...]:
    """What a node keeps for life and filters or scores read, but its name and labels."""
    return (
        node.taints,
        node.unschedulable,
        tuple(sorted(node.allocatable.items())),
        node.gpu_numa,
        node.gpu_mig,
        node.links,
        node.topology_policy,
        node.gpu_slots,
        node.gpu_memory,
        node.share_resource,
    )


def dynamic_state(node: NodeState) -> tuple[object, ...]:
    """The node's load: free share per GPU, requested resources, MIG devices (free, in use and the
    profiles pods hold, which binpack counts) and NUMA-zone headroom where the policy reads it."""
    mig: tuple[object, ...] = ()
    if True in node.gpu_mig or any(node.mig_in_use):
        held = sorted(p for _pod, a in node.pods.values() for _g, p in a.mig)
        mig = (
            tuple(tuple(sorted(m.items())) for m in node.mig_free),
            tuple(node.mig_in_use),
            tuple(held),
        )
    zones: tuple[object, ...] = ()
    if node.topology_policy is TopologyPolicy.SINGLE_NUMA_NODE and node.numa_free is not None:
        zones = tuple((k, tuple(sorted(v.items()))) for k, v in sorted(node.numa_free.items()))
    shared: tuple[object, ...] = ()
    if node.share_resource is not None:
        shared = (
            tuple(node.slots_free),
            tuple(node.memory_free),
            tuple(node.compute_free),
            busy_key(node),
        )
    return (tuple(node.gpu_free), tuple(sorted(node.requested.items())), mig, zones, shared)


class NodeSlots:
    """The nodes of `snapshot` in stable slots, kept up to date by `sync`."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        self._generation = 0
        self.capacity = 0
        self.epoch = 0  # bumped whenever a node takes or leaves a slot
        self._names: list[str | None] = []
        self._nodes: list[NodeState | None] = []
        self._index: dict[str, int] = {}
        self._free: list[int] = []
        self._shapes: Interner[tuple[object, ...]] = Interner(_IDLE_SHAPES)
        self._shape: list[int] = []
        self._shape_keys: list[tuple[object, ...] | None] = []
        self._states: Interner[StateKey] = Interner(_IDLE_STATES)
        self._state_keys: list[StateKey | None] = []
        self.states: IntArray = np.zeros(0, dtype=np.int64)  # state id per slot, -1: no node
        self.state_ids: list[int] = []  # the same as a list (read slot by slot)
        self.members = StateMembers(self._names)  # the slots in each state, by name (`rows`:
        # a dense row per state)
        # cpu, mem, pods, idle, share; of shared GPUs with a free replica: replicas, the most
        # memory and the most compute one has free
        self._headroom: IntArray = np.zeros((8, 0), dtype=np.int64)
        self._room: list[_Room | None] = []  # the same, per slot
        self._rank: IntArray = np.zeros(0, dtype=np.int64)
        self._ranked = True
        self._in_order = True
        self._shared: list[bool] = []  # the slot's node has shared GPUs
        self._whole: list[bool] = []  # the slot's node can give whole GPUs (`_gives_whole`)
        self._gives: list[bool] = []  # the same, of the node object in the slot now
        self.changes = ChangeLog()  # every slot's changes
        self.shared_changes = ChangeLog()  # changes of slots with shared GPUs before or after
        self.whole_changes = ChangeLog()  # changes of slots that give whole GPUs before or after
        self.sync()

    # -- following the snapshot ------------------------------------------------------------------
    def sync(self) -> bool:
        """Take in the snapshot's changes. True when slots were added: per-slot arrays made
        before are too short."""
        snapshot = self._snapshot
        if snapshot.generation == self._generation:
            return False
        changed: Iterable[str] | None = snapshot.changed_since(self._generation)
        if changed is None:  # too far behind: look at every node
            changed = set(self._index) | set(snapshot.nodes)
        self._generation = snapshot.generation
        names = sorted(changed)
        capacity = self.capacity
        self._reserve(sum(1 for n in names if n not in self._index and n in snapshot.nodes))
        updated: list[int] = []
        for name in names:
            self._update(name, updated)
        self._fill_headroom(updated)
        kept = max(_LOG_KEPT, 4 * self.capacity)
        for log in (self.changes, self.shared_changes, self.whole_changes):
            log.trim(kept)
        return self.capacity != capacity

    def _update(self, name: str, updated: list[int]) -> None:
        """Take in node `name`'s change; `updated` collects the slots whose node is there."""
        node = self._snapshot.nodes.get(name)
        slot = self._index.get(name)
        if node is None:
            if slot is not None:
                self._release(name, slot)
            return
        if slot is None:
            slot = self._allocate(name)
        load, room = cast("tuple[tuple[object, ...], _Room]", node.derive("slots", _load))
        if self._nodes[slot] is not node:  # a new node object: its static shape may differ
            self._nodes[slot] = node
            shape = cast("tuple[object, ...]", node.derive("shape", static_shape))
            self._shape[slot] = self._shapes.take(shape, self._shape_keys[slot])
            self._shape_keys[slot] = shape
            self._gives[slot] = _gives_whole(node)  # static: the node object's for life
        key = (self._shape[slot], node.labels.get(GPU_PRODUCT_LABEL), load)
        state = self._states.take(key, self._state_keys[slot])
        self.members.move(slot, self.state_ids[slot], state)
        self.states[slot] = self.state_ids[slot] = state
        self._state_keys[slot] = key
        self._room[slot] = room
        updated.append(slot)
        self._logged(slot, node.share_resource is not None, self._gives[slot])

    def _fill_headroom(self, slots: list[int]) -> None:
        """Copy the headroom of `slots` (just logged) into the pre-check's array: one numpy call
        for many (the first sync), plain column writes for a few."""
        rooms = self._room
        if len(slots) <= _FEW_SLOTS:
            for slot in slots:
                room = rooms[slot]
                if room is not None:
                    self._headroom[:, slot] = room
            return
        live = [slot for slot in slots if rooms[slot] is not None]
        if live:
            self._headroom[:, live] = np.array([rooms[slot] for slot in live], dtype=np.int64).T

    def _reserve(self, count: int) -> None:
        """Make room for `count` more nodes (at least doubling, so growth stays rare)."""
        if count <= len(self._free):
            return
        grown = max(16, 2 * self.capacity, len(self._index) + count)
        extra = grown - self.capacity
        self._free = list(range(grown - 1, self.capacity - 1, -1)) + self._free
        self._names.extend([None] * extra)
        self._nodes.extend([None] * extra)
        self._shape.extend([-1] * extra)
        self._shape_keys.extend([None] * extra)
        self._state_keys.extend([None] * extra)
        self._room.extend([None] * extra)
        self._shared.extend([False] * extra)
        self._whole.extend([False] * extra)
        self._gives.extend([False] * extra)
        self.states = np.concatenate((self.states, np.full(extra, -1, dtype=np.int64)))
        self.state_ids.extend([-1] * extra)
        self.members.grow(grown)
        absent = np.full((8, extra), -1, dtype=np.int64)
        self._headroom = np.concatenate((self._headroom, absent), axis=1)
        self.capacity = grown

    def _allocate(self, name: str) -> int:
        slot = self._free.pop()
        self._index[name] = slot
        self._names[slot] = name
        self.epoch += 1
        self._ranked = False
        return slot

    def _release(self, name: str, slot: int) -> None:
        self.members.move(slot, self.state_ids[slot], -1)  # (while the slot holds its name)
        self.states[slot] = self.state_ids[slot] = -1
        del self._index[name]
        self._names[slot] = None
        self._nodes[slot] = None
        self._shapes.take(None, self._shape_keys[slot])
        self._states.take(None, self._state_keys[slot])
        self._shape[slot] = -1
        self._shape_keys[slot] = None
        self._state_keys[slot] = None
        self._headroom[:, slot] = -1
        self._room[slot] = None
        self._free.append(slot)
        self.epoch += 1
        self._ranked = False
        self._logged(slot, False, False)

    def _logged(self, slot: int, shared: bool, whole: bool) -> None:
        """Log a change of `slot`, whose node now has shared GPUs or not, and can give whole
        GPUs or not."""
        self.changes.append(slot)
        if shared or self._shared[slot]:
            self.shared_changes.append(slot)
        if whole or self._whole[slot]:
            self.whole_changes.append(slot)
        self._shared[slot], self._whole[slot] = shared, whole

    # -- reading ---------------------------------------------------------------------------------
    def log_for(self, pod: PodRequest) -> ChangeLog:
        """The changes `pod`'s class must look at: a share pod's only those of slots with shared
        GPUs (it fits no other node: it asks a free replica, which the pre-check wants), a pod
        asking for whole GPUs only those of slots that can give them (the pre-check wants idle
        GPUs, which no other node ever has)."""
        if pod.share_need[0] >= 1:
            return self.shared_changes
        return self.whole_changes if pod.gpus else self.changes

    def slot(self, name: str) -> int:
        try:
            return self._index[name]
        except KeyError:
            raise KeyError(f"no node {name} in the memo's snapshot") from None

    @property
    def names(self) -> Sequence[str | None]:
        """Node name per slot (None: free slot)."""
        return self._names

    def state(self, slot: int) -> int:
        """The slot's state id (-1: no node)."""
        return self.state_ids[slot]

    def shape(self, slot: int) -> int:
        """The id of the slot's static shape (`static_shape`; -1: no node)."""
        return self._shape[slot]

    def name(self, slot: int) -> str:
        name = self._names[slot]
        if name is None:
            raise KeyError(f"slot {slot} holds no node")
        return name

    def node(self, slot: int) -> NodeState:
        node = self._nodes[slot]
        if node is None:
            raise KeyError(f"slot {slot} holds no node")
        return node

    def mask(self, names: Iterable[str]) -> BoolArray:
        """The slots of `names` (unknown names left out)."""
        mask = np.zeros(self.capacity, dtype=np.bool_)
        mask[[self._index[n] for n in names if n in self._index]] = True
        return mask

    def slots_of(self, names: Iterable[str]) -> IntArray:
        """The slots of `names` (unknown names left out), ascending."""
        index = self._index
        found = np.array([index[n] for n in names if n in index], dtype=np.int64)
        found.sort()
        return found

    def maybe_fits(self, pod: PodRequest, slots: IntArray) -> BoolArray:
        """Slots among `slots` with the headroom `filter_node` needs at least (a necessary test:
        like the filter, only what the pod asks for is checked, so an overcommitted node still
        takes a pod that asks for none of it)."""
        cpu, memory, pods, idle, share, replicas, gpu_memory, compute = self._headroom[:, slots]
        ok: BoolArray = pods >= 1
        if pod.shares:
            need = pod.share_need
            ok &= (replicas >= need[0]) & (gpu_memory >= need[1]) & (compute >= need[2])
        if pod.cpu_milli:
            ok &= cpu >= pod.cpu_milli
        if pod.memory:
            ok &= memory >= pod.memory
        if pod.gpus:
            ok &= idle >= pod.gpus
        if pod.gpu_milli:
            ok &= share >= pod.gpu_milli
        return ok

    def sift(self, pod: PodRequest, slots: Iterable[int]) -> tuple[list[int], list[int]]:
        """`slots` split into those with the headroom `maybe_fits` wants and the rest, each in
        order: plain Python (numpy calls may hand the GIL away), the pod's needs read once."""
        share = pod.share_need
        needs = (  # a need the pod does not ask is one no headroom fails (none goes that low)
            pod.cpu_milli or _ANY,
            pod.memory or _ANY,
            1,
            pod.gpus or _ANY,
            pod.gpu_milli or _ANY,
            *share,
        )
        cpu, memory, pods, idle, milli, replicas, gpu_memory, compute = needs
        rooms = self._room
        passed: list[int] = []
        failed: list[int] = []
        for slot in slots:
            room = rooms[slot]
            if (
                room is not None
                and room[3] >= idle
                and room[0] >= cpu
                and room[1] >= memory
                and room[2] >= pods
                and room[4] >= milli
                and room[5] >= replicas
                and room[6] >= gpu_memory
                and room[7] >= compute
            ):
                passed.append(slot)
            else:
                failed.append(slot)
        return passed, failed

    def first_by_name(self, slots: IntArray) -> int:
        """The slot among `slots` whose node name sorts first."""
        return int(slots[np.argmin(self.ranks()[slots])])

    def by_name(self, mask: BoolArray) -> list[int]:
        """The slots set in `mask`, in node-name order."""
        slots = np.flatnonzero(mask)
        ranks = self.ranks()
        if not self._in_order:
            slots = slots[np.argsort(ranks[slots], kind="stable")]
        found: list[int] = slots.tolist()
        return found

    def ranks(self) -> IntArray:
        """Each slot's position in node-name order (free slots last)."""
        if not self._ranked:
            rank = np.full(self.capacity, self.capacity, dtype=np.int64)
            for position, name in enumerate(sorted(self._index)):
                rank[self._index[name]] = position
            self._rank, self._ranked = rank, True
            self._in_order = bool(np.all(rank[:-1] <= rank[1:]))  # slots already in name order
        return self._rank


def _gives_whole(node: NodeState) -> bool:
    """`node` has a GPU that can be idle (neither shared nor MIG-enabled, `NodeState.idle_mask`)
    or GPUs shared as `nvidia.com/gpu` (`_headroom` counts their free replicas as idle)."""
    if node.share_resource == GPU_RESOURCE:
        return True
    return any(
        not slots and not mig for slots, mig in zip(node.gpu_slots, node.gpu_mig, strict=True)
    )


def _load(node: NodeState) -> tuple[tuple[object, ...], _Room]:
    """What `NodeSlots` keeps of a node's load: its `dynamic_state` and its headroom."""
    return dynamic_state(node), _headroom(node)


def _headroom(node: NodeState) -> _Room:
    share = max((f for g, f in enumerate(node.gpu_free) if not node.gpu_mig[g]), default=0)
    idle = node.idle_mask.bit_count()
    replicas = gpu_memory = compute = 0
    if node.share_resource is not None:
        open_gpus = [g for g, n in enumerate(node.slots_free) if n > 0 and node.gpu_slots[g]]
        replicas = sum(node.slots_free[g] for g in open_gpus)
        gpu_memory = max((node.memory_free[g] for g in open_gpus), default=0)
        compute = max((node.compute_free[g] for g in open_gpus), default=0)
    if node.share_resource == GPU_RESOURCE:
        idle += replicas  # a plain GPU request is equal splits there
    room = (node.free(CPU), node.free(MEMORY), node.free(PODS), idle, share)
    return (*room, replicas, gpu_memory, compute)
