"""Where to look: the cheap bound that keeps the victim search from trying every node.

Victim priorities are taken as thresholds, lowest first. At threshold p, what the eligible units
of priority ≤ p would free on each node is summed, for all nodes at once, from the index's
columns (the units of every leaf at p, less the ineligible leaves' units, or the eligible
leaves' units alone when they are fewer). A node passes when its free milli-GPU, cpu and memory
plus those sums cover what U asks: a necessary condition of a fit, never a sufficient one.
Passing nodes are ranked by the least milli-GPU they must evict at best, then by name, and only
the first `candidate_limit` are fully evaluated (greedy then reprieve), as kube-scheduler
evaluates a limited number of candidate nodes. Only nodes that gained victims at p are
candidates at p (the others were tried with the same victims at a lower threshold).

A gang takes the best-ranked passing nodes (per domain of a required topology label) until their
room covers its total; that node set is evaluated, and widened (doubled, up to
`candidate_limit` nodes) when the placement code cannot place the gang on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from scheduler.placement import PodRequest

from .columns import BoolArray, IntArray, NodeColumns
from .index import RunningIndex

__all__ = ["GANG_SETS", "Bound", "Tally", "gang_sets", "node_candidates"]

GANG_SETS = 4
"""Node sets (one per topology domain at most) fully evaluated per threshold for a gang."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Bound:
    """What some pods ask in all: milli-GPU, cpu, memory."""

    milli: int
    cpu: int
    memory: int

    @classmethod
    def of(cls, pods: Iterable[PodRequest], apart: Mapping[str, int] | None = None) -> Bound:
        """What `pods` ask; `apart`: the milli-GPU their devices decided apart take, by pod key."""
        pods = list(pods)
        more = apart or {}
        return cls(
            milli=sum(p.gpu_milli_total + more.get(p.key, 0) for p in pods),
            cpu=sum(p.cpu_milli for p in pods),
            memory=sum(p.memory for p in pods),
        )

    def covered(self, room: IntArray) -> BoolArray:
        """Per column of `room` (rows milli-GPU, cpu, memory), whether it covers this."""
        ok = np.ones(room.shape[1], dtype=np.bool_)
        for row, need in enumerate((self.milli, self.cpu, self.memory)):
            if need:
                ok &= room[row] >= need
        return ok


class Tally:
    """Per slot, what the eligible units of priority ≤ the current threshold free there."""

    def __init__(self, index: RunningIndex) -> None:
        self.index = index
        self.columns: NodeColumns = index.columns
        self.free: IntArray = self.columns.refresh()
        self.total: IntArray = np.zeros((4, self.columns.capacity), dtype=np.int64)
        self.allowed: BoolArray = np.ones(self.columns.capacity, dtype=np.bool_)

    def keep(self, area: Iterable[str] | None, excluded: Iterable[str]) -> None:
        """Candidates only among `area` (None: every node) less `excluded`."""
        if area is not None:
            self.allowed = self.slots(area)
        self.allowed &= ~self.slots(excluded)

    def add(self, priority: int, eligible: Sequence[str]) -> BoolArray:
        """Count the units of the `eligible` leaves at `priority`; returns the slots that
        gained some."""
        index = self.index
        others = [q for q in index.leaves_at(priority) if q not in set(eligible)]
        mine = sum(len(index.freed(q, priority)) for q in eligible)
        if mine <= sum(len(index.freed(q, priority)) for q in others):
            delta = np.zeros_like(self.total)
            self._merge(delta, eligible, priority, 1)
        else:
            delta = index.freed_columns(priority)[:, : self.total.shape[1]].copy()
            self._merge(delta, others, priority, -1)
        self.total += delta
        touched: BoolArray = (delta[3] > 0) & self.allowed
        return touched

    def _merge(self, into: IntArray, leaves: Iterable[str], priority: int, sign: int) -> None:
        slot = self.columns.slot
        for leaf in leaves:
            sums = self.index.freed(leaf, priority)
            if sums:
                slots = np.fromiter((slot[n] for n in sums), dtype=np.int64, count=len(sums))
                values = np.array(list(sums.values()), dtype=np.int64).T
                into[:, slots] += sign * values

    def room(self) -> IntArray:
        """Free plus freed, per slot: rows milli-GPU, cpu, memory."""
        return self.free + self.total[:3]

    def slots(self, names: Iterable[str]) -> BoolArray:
        mask = np.zeros(self.total.shape[1], dtype=np.bool_)
        for name in names:
            found = self.columns.slot.get(name)
            if found is not None and found < len(mask):
                mask[found] = True
        return mask

    def ranked(self, mask: BoolArray, bound: Bound) -> IntArray:
        """The slots in `mask`, by the least milli-GPU they must evict for `bound`, then name."""
        slots = np.flatnonzero(mask)
        short = np.maximum(0, bound.milli - self.free[0, slots])
        order = np.lexsort((self.columns.rank()[slots], short))
        ranked: IntArray = slots[order]
        return ranked


def node_candidates(tally: Tally, touched: BoolArray, bound: Bound, limit: int) -> list[str]:
    """The nodes that gained victims and pass the bound, best first, at most `limit`."""
    ranked = tally.ranked(touched & bound.covered(tally.room()), bound)
    names = tally.columns.names
    return [names[int(s)] for s in ranked[: max(1, limit)]]


def gang_sets(
    tally: Tally,
    extra: Iterable[str],
    pods: Sequence[PodRequest],
    label: str | None,
    limit: int,
    apart: Mapping[str, int] | None = None,
    across: str | None = None,
) -> list[tuple[list[str], int]]:
    """Ranked node lists, one per domain of `label` (one in all when None), each best first,
    with how many of its first nodes cover the gang (callers widen a set that fails).
    `apart`: the milli-GPU each pod's devices decided apart take, by pod key. `across`: with no
    `label`, a node label whose domains the one list takes its nodes from in turn (the best of
    each domain, then the second best, ...), for members that must be apart over it."""
    more = apart or {}
    size = sorted(
        pods, key=lambda p: (p.gpu_milli_total + more.get(p.key, 0), p.cpu_milli, p.memory)
    )
    total = Bound.of(pods, more)
    room = tally.room()
    mask = ((tally.total[3] > 0) | tally.slots(extra)) & Bound.of(size[:1], more).covered(room)
    mask &= tally.allowed
    largest = Bound.of(size[-1:], more)
    ranked = tally.ranked(mask, largest)
    groups: dict[str, list[int]] = {}
    if label is None and across is not None:
        groups[""] = _in_turn(tally, ranked, across)[: max(1, limit)]
    elif label is None:
        groups[""] = [int(s) for s in ranked[: max(1, limit)]]
    else:
        nodes, names = tally.columns.snapshot.nodes, tally.columns.names
        for slot in ranked:
            value = nodes[names[int(slot)]].labels.get(label)
            if value is not None and len(groups.setdefault(value, [])) < max(1, limit):
                groups[value].append(int(slot))
    out = []
    for members in groups.values():
        cut = _covering(room, members, total)
        if cut:
            short = int(np.maximum(0, largest.milli - tally.free[0, members[:cut]]).sum())
            out.append((short, [tally.columns.names[s] for s in members], cut))
    out.sort(key=lambda item: (item[0], item[1][: item[2]]))
    return [(names, cut) for _short, names, cut in out[:GANG_SETS]]


def _in_turn(tally: Tally, ranked: IntArray, label: str) -> list[int]:
    """`ranked` reordered to take the best slot of each domain of `label` in turn (in the order
    the domains' best slots rank), then each one's second best, and so on."""
    nodes, names = tally.columns.snapshot.nodes, tally.columns.names
    domains: dict[str, list[int]] = {}
    for slot in ranked:
        domains.setdefault(nodes[names[int(slot)]].labels.get(label, ""), []).append(int(slot))
    lists = list(domains.values())
    return [
        column[depth]
        for depth in range(max((len(c) for c in lists), default=0))
        for column in lists
        if depth < len(column)
    ]


def _covering(room: IntArray, members: Sequence[int], total: Bound) -> int:
    """How many of `members` (in order) it takes for their room to cover `total`; 0: never."""
    if not members:
        return 0
    sums = np.cumsum(room[:, members], axis=1)
    ok = np.flatnonzero(total.covered(sums))
    return int(ok[0]) + 1 if len(ok) else 0
