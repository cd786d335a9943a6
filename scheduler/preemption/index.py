"""The running units the victim search may choose from, kept incrementally by the caller.

The runtime and the simulator add a unit when it starts (a pod bound or assumed; a gang's bound
members: remove and add it again when its members change) and remove it when it ends or starts
terminating. Only this scheduler's pods that are not terminating belong here (DESIGN §11).

Where each pod runs and what it asks are read from the snapshot when the unit is added (assume
its pods first) and kept, so `remove` works after the snapshot has forgotten them. Besides the
units by key, the index keeps, per leaf queue and priority, what the units of that class would
free on each node (milli-GPU, cpu, memory, pods), and the same per priority over every leaf as
columns (`NodeColumns`): the search's cheap bound reads those sums instead of walking every
node. `add` and `remove` cost O(the unit's pods), never a scan.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from scheduler.placement import GpuShare, PodRequest, Snapshot

from .columns import IntArray, NodeColumns, grown
from .model import Running

__all__ = ["Freed", "PodPlace", "RunningIndex"]

_T = TypeVar("_T")

Freed = list[int]
"""What some units free on one node: [milli-GPU, cpu millicores, memory bytes, pods]."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PodPlace:
    """One pod of a running unit: its node, request and GPU shares there (DESIGN §12: which
    GPU each share is on) when the unit was added."""

    key: str
    node: str
    request: PodRequest
    shares: tuple[GpuShare, ...] = ()

    @property
    def milli(self) -> int:
        """The milli-GPU evicting the pod frees: its shares' where it placed shares (a runtime
        share pod asks no `gpu_milli`), else its whole GPUs and `gpu_milli`."""
        if self.shares:
            return sum(s.milli for s in self.shares)
        return self.request.gpu_milli_total


class RunningIndex:
    """Running units by key, by pod, by node, and per (leaf, priority) their sums per node."""

    def __init__(self, snapshot: Snapshot) -> None:
        """`snapshot`: where the pods of each unit added are read from (node and request)."""
        self._snapshot = snapshot
        self._units: dict[str, Running] = {}
        self._places: dict[str, tuple[PodPlace, ...]] = {}
        self._unit_of_pod: dict[str, str] = {}
        self._on_node: dict[str, dict[str, None]] = {}
        self._by_leaf: dict[str, dict[str, None]] = {}
        self._sums: dict[tuple[str, int], dict[str, Freed]] = {}
        self._priorities: dict[str, dict[int, None]] = {}  # leaf -> priorities with sums
        self.columns = NodeColumns(snapshot)
        self._by_priority: dict[int, IntArray] = {}

    def __len__(self) -> int:
        return len(self._units)

    def __iter__(self) -> Iterator[Running]:
        return iter(list(self._units.values()))

    def __contains__(self, key: object) -> bool:
        return key in self._units

    def add(self, unit: Running) -> None:
        """Add `unit`, replacing the unit of that key; pods the snapshot does not hold are left
        out of the per-node views (they free nothing there)."""
        self.remove(unit.key)
        places = []
        for pod in unit.pods:
            node = self._snapshot.node_of(pod)
            if node is not None:
                request, assignment = self._snapshot.node(node).pods[pod]
                shares = assignment.shares
                places.append(PodPlace(key=pod, node=node, request=request, shares=shares))
        self._units[unit.key] = unit
        self._places[unit.key] = tuple(places)
        self._by_leaf.setdefault(unit.leaf, {})[unit.key] = None
        for pod in unit.pods:
            self._unit_of_pod[pod] = unit.key
        sums = self._sums.setdefault((unit.leaf, unit.priority), {}) if places else {}
        if places:
            self._priorities.setdefault(unit.leaf, {})[unit.priority] = None
        for place in places:
            self._on_node.setdefault(place.node, {})[unit.key] = None
            _charge(sums.setdefault(place.node, [0, 0, 0, 0]), place, 1)
            self._column(unit.priority, place, 1)

    def remove(self, key: str) -> Running | None:
        """Drop the unit `key`; returns it, or None when unknown."""
        unit = self._units.pop(key, None)
        if unit is None:
            return None
        places = self._places.pop(key)
        _discard(self._by_leaf, unit.leaf, key)
        for pod in unit.pods:
            if self._unit_of_pod.get(pod) == key:
                del self._unit_of_pod[pod]
        bucket = (unit.leaf, unit.priority)
        sums = self._sums.get(bucket, {})
        for place in places:
            _discard(self._on_node, place.node, key)
            freed = sums[place.node]
            _charge(freed, place, -1)
            self._column(unit.priority, place, -1)
            if not freed[3]:
                del sums[place.node]
        if not sums and self._sums.pop(bucket, None) is not None:
            _discard(self._priorities, unit.leaf, unit.priority)
        return unit

    def get(self, key: str) -> Running | None:
        return self._units.get(key)

    def unit_of_pod(self, pod: str) -> str | None:
        return self._unit_of_pod.get(pod)

    def on_node(self, node: str) -> Collection[Running]:
        """The units with a pod on `node` (as added)."""
        return [self._units[key] for key in self._on_node.get(node, ())]

    def in_leaf(self, leaf: str) -> Collection[Running]:
        """The units of leaf queue `leaf`."""
        return [self._units[key] for key in self._by_leaf.get(leaf, ())]

    def leaves(self) -> list[str]:
        """The leaf queues with running units, sorted."""
        return sorted(self._by_leaf)

    def places(self, key: str) -> tuple[PodPlace, ...]:
        """Where the pods of unit `key` were when it was added (empty when unknown)."""
        return self._places.get(key, ())

    def leaves_at(self, priority: int) -> list[str]:
        """The leaves with units at `priority`, sorted."""
        return sorted(q for q, p in self._sums if p == priority)

    def priorities(self, leaf: str) -> list[int]:
        """The priorities of `leaf`'s units, ascending."""
        return sorted(self._priorities.get(leaf, ()))

    def freed(self, leaf: str, priority: int) -> Mapping[str, Freed]:
        """Per node, what the units of `leaf` at `priority` would free there (do not change)."""
        return self._sums.get((leaf, priority), {})

    def freed_columns(self, priority: int) -> IntArray:
        """Per slot of `columns`, what every unit at `priority` frees: rows milli-GPU, cpu,
        memory, pods (do not change)."""
        found = self._by_priority.get(priority)
        if found is None:
            return np.zeros((4, self.columns.capacity), dtype=np.int64)
        if found.shape[1] < self.columns.capacity:
            found = self._by_priority[priority] = grown(found, self.columns.capacity)
        return found

    def _column(self, priority: int, place: PodPlace, sign: int) -> None:
        slot = self.columns.slot_of(place.node)
        table = self._by_priority.get(priority)
        if table is None or table.shape[1] <= slot:
            table = np.zeros((4, self.columns.capacity), dtype=np.int64) if table is None else table
            table = self._by_priority[priority] = grown(table, self.columns.capacity)
        request = place.request
        table[0, slot] += sign * place.milli
        table[1, slot] += sign * request.cpu_milli
        table[2, slot] += sign * request.memory
        table[3, slot] += sign


def _charge(freed: Freed, place: PodPlace, sign: int) -> None:
    request = place.request
    freed[0] += sign * place.milli
    freed[1] += sign * request.cpu_milli
    freed[2] += sign * request.memory
    freed[3] += sign


def _discard(table: dict[str, dict[_T, None]], key: str, member: _T) -> None:
    members = table.get(key)
    if members is not None:
        members.pop(member, None)
        if not members:
            del table[key]
