"""Nodes as columns for the cheap bound: a slot per node and, per slot, what is free there.

The victim search's bound compares, for every node at once, what is free plus what eligible
victims would free against what U asks; numpy does that for thousands of nodes in microseconds
where a Python loop takes milliseconds. Free milli-GPU, cpu and memory per slot are refreshed
from the snapshot's change tracking (`Snapshot.changed_since`): only nodes changed since the
last look are read again. A removed node keeps its slot with nothing free.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from scheduler.placement import NodeState, Snapshot
from scheduler.placement.request import CPU, MEMORY

__all__ = ["BoolArray", "IntArray", "NodeColumns"]

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
_GONE = -(1 << 60)  # free on a slot whose node is gone: nothing ever fits


class NodeColumns:
    """Slots for node names (never reused) and free milli-GPU, cpu, memory per slot."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.slot: dict[str, int] = {}
        self.names: list[str] = []
        self.free: IntArray = np.zeros((3, 64), dtype=np.int64)
        self._seen = -1
        self._rank: IntArray | None = None

    @property
    def capacity(self) -> int:
        return int(self.free.shape[1])

    def slot_of(self, name: str) -> int:
        """The slot of `name`, given one (and room for it) on first sight."""
        found = self.slot.get(name)
        if found is not None:
            return found
        found = self.slot[name] = len(self.names)
        self.names.append(name)
        self._rank = None
        if found >= self.capacity:
            self.free = grown(self.free, 2 * found)
        node = self.snapshot.nodes.get(name)
        self.free[:, found] = _GONE if node is None else _free(node)
        return found

    def refresh(self) -> IntArray:
        """Free milli-GPU, cpu and memory per slot, up to date with the snapshot."""
        snapshot = self.snapshot
        changed = snapshot.changed_since(self._seen) if self._seen >= 0 else None
        self._seen = snapshot.generation
        if changed is None:  # too far behind: every slot again (a removed node frees nothing)
            self.free[:] = _GONE
        names = snapshot.names() if changed is None else changed
        nodes = snapshot.nodes
        for name in names:
            node = nodes.get(name)
            slot = self.slot_of(name)
            self.free[:, slot] = _GONE if node is None else _free(node)
        return self.free

    def rank(self) -> IntArray:
        """Each slot's position in name order (ties broken by name as the search wants)."""
        if self._rank is None or len(self._rank) < self.capacity:
            order = sorted(range(len(self.names)), key=self.names.__getitem__)
            rank = np.full(self.capacity, len(order), dtype=np.int64)
            rank[np.asarray(order, dtype=np.int64)] = np.arange(len(order), dtype=np.int64)
            self._rank = rank
        return self._rank


def _free(node: NodeState) -> tuple[int, int, int]:
    milli = node.gpu_capacity_milli() - node.used_milli
    return milli, node.free(CPU), node.free(MEMORY)


def grown(array: IntArray, columns: int) -> IntArray:
    """`array` with at least `columns` columns (new ones zero)."""
    if array.shape[1] >= columns:
        return array
    out = np.zeros((array.shape[0], columns), dtype=np.int64)
    out[:, : array.shape[1]] = array
    return out
