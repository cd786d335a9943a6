"""`VerdictMemo`'s per pod class view: each node's verdict, and a heap that yields the best node.

A pod class is a request without its key and pod group (`pod_class`): nothing else differs between
two pods as filters and scores see them. Its `Verdicts` keep, per node slot, whether the pod fits,
the used-node tier, the weighted score and a code that keys the full verdict (assignment, reasons)
in `table`. The heap holds entries (not in the used tier, -score, node name, slot), so its
smallest valid entry is `pick`'s choice: used tier first (when the scoring prefers used nodes
and the pod wants a GPU), then the highest score, then the lowest name. A rebuild puts in the
best `top` feasible slots only and remembers the last one's rank (`threshold`); every slot
that changes later is pushed again. So any feasible slot without a valid entry ranks below the
threshold, and a top entry at or above it is the best; otherwise the heap is rebuilt. Entries
left behind by later changes are dropped when they reach the top. After a bulk update the
rebuild waits for the next `best` (`defer_rebuild`): a decision among a few slots (a topology
domain's, vectorised over them) never needs the heap.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .node import GPU_PRODUCT_LABEL, Assignment
from .node_slots import BoolArray, FloatArray, IntArray
from .request import MEMORY, PodRequest

__all__ = ["HEAP_TOP", "ClassKey", "Verdict", "Verdicts", "label_keys", "pod_class"]

ClassKey = tuple[object, ...]
Verdict = tuple[bool, bool, float, Assignment | None, tuple[str, ...]]
"""(feasible, GPUs already in use, weighted score, assignment, reasons when not feasible)."""
_Entry = tuple[bool, float, str, int]
HEAP_TOP = 256
"""Feasible slots a rebuild puts in the heap (the rest rank below the last of them)."""
_INCOMPLETE = -1
_UNBUILT: tuple[bool, float, str] = (False, -math.inf, "")  # every entry ranks after it


def pod_class(pod: PodRequest, *, shares: bool = True, memory: bool = True) -> ClassKey:
    """Everything in a request that filters and scores read: all but its key and pod group.
    `shares` False: the share containers only by their count (what scores read of them);
    `memory` False: without the memory it asks."""
    return (
        pod.vector if memory else tuple((n, 0 if n == MEMORY else q) for n, q in pod.vector),
        pod.gpu_milli,
        tuple(sorted(pod.mig.items())),
        tuple(sorted(pod.node_selector.items())),
        pod.affinity,
        pod.tolerations,
        tuple(sorted(pod.gpu_models)),
        pod.priority,
        pod.guaranteed,
        pod.unsupported,
        pod.shares if shares else len(pod.shares),
        pod.share_reuse,
        pod.split,
    )


def label_keys(pod: PodRequest) -> tuple[str, ...]:
    """The node labels filters read for `pod` besides the GPU product label (which the GPU model
    filter and fragmentation read, and every state id includes): its selector's and affinity's
    keys. Filters and scores read no other label."""
    keys = set(pod.node_selector)
    keys.update(r.key for term in pod.affinity for r in term.match_expressions)
    keys.discard(GPU_PRODUCT_LABEL)
    return tuple(sorted(keys))


@dataclass(slots=True)
class Verdicts:
    """One pod class's view of every slot, valid up to log position `seen`.

    `code[i]` keys slot i's verdict in `table`: its state id, or for a class that reads more
    labels than the GPU product (`labels`), a code for (state id, those labels' values) from
    `combos`; -1 where the pre-check rejected the node without filtering it (or no node).
    `tiered`: the used-node tier ranks first for this class.
    """

    feasible: BoolArray
    tier: BoolArray
    score: FloatArray
    code: IntArray
    labels: tuple[str, ...]
    tiered: bool
    seen: int
    top: int = HEAP_TOP
    table: dict[int, Verdict] = field(default_factory=dict)
    shared_table: bool = False  # `table` is shared with classes that differ only in memory
    table_key: ClassKey | None = None  # the shared table's key (the class without its memory)
    stale: dict[int, Verdict] | None = None  # the verdicts before a refit, until re-evaluated
    rescore: bool = False  # a refit left every score stale, not the rest (`VerdictMemo`)
    combos: dict[tuple[int, tuple[str | None, ...]], int] = field(default_factory=dict)
    heap: list[_Entry] = field(default_factory=list)
    threshold: tuple[bool, float, str] | None = None
    next_code: int = 0

    @classmethod
    def empty(
        cls, size: int, labels: tuple[str, ...], tiered: bool, seen: int, top: int = HEAP_TOP
    ) -> Verdicts:
        return cls(
            feasible=np.zeros(size, dtype=np.bool_),
            tier=np.zeros(size, dtype=np.bool_),
            score=np.zeros(size, dtype=np.float64),
            code=np.full(size, -1, dtype=np.int64),
            labels=labels,
            tiered=tiered,
            seen=seen,
            top=top,
        )

    def prune(self) -> None:
        """Drop the verdicts of states no slot is in when they far outnumber the slots."""
        limit = 2 * len(self.code) + 256
        if len(self.table) <= limit and len(self.combos) <= limit:
            return
        live = set(self.code[self.code >= 0].tolist())
        for code in [c for c in self.table if c not in live]:  # in place: it may be shared
            del self.table[code]
        self.combos = {k: c for k, c in self.combos.items() if c in live}

    def combo(self, state: int, values: tuple[str | None, ...]) -> int:
        """The code of (state id, label values)."""
        code = self.combos.get((state, values))
        if code is None:
            code = self.combos[(state, values)] = self.next_code
            self.next_code += 1
        return code

    def put(
        self,
        slots: Sequence[int],
        codes: Sequence[int],
        made: Sequence[Verdict],
        names: Sequence[str],
    ) -> None:
        """Record the verdict `made[k]` under `codes[k]` for each slot `slots[k]` (its node is
        named in `names`, read at those slots only), in one loop. An entry ranked after
        `threshold` stays out of the heap: `best` would only ever take it for a sign to rebuild,
        and a heap short of it says so too (its valid entries run out, or rank after
        `threshold`)."""
        feasible, tier, score, code_of = self.feasible, self.tier, self.score, self.code
        heap, threshold, tiered = self.heap, self.threshold, self.tiered
        for slot, code, verdict in zip(slots, codes, made, strict=True):
            fits, used, value = verdict[0], verdict[1], verdict[2]
            feasible[slot], tier[slot], score[slot], code_of[slot] = fits, used, value, code
            if fits:
                entry = (tiered and not used, -value, names[slot], slot)
                if threshold is None or entry[:3] <= threshold:  # (else `best` rebuilds first)
                    heapq.heappush(heap, entry)

    def reject(self, slots: Iterable[int]) -> None:
        """Slots `slots` certainly do not fit (the pre-check), or hold no node."""
        feasible, code = self.feasible, self.code
        for slot in slots:
            feasible[slot] = False
            code[slot] = -1

    def defer_rebuild(self) -> None:
        """Leave the heap to be rebuilt at the next `best` (after a bulk update): an empty heap
        whose threshold every entry ranks after, so `best` finds it incomplete."""
        self.heap = []
        self.threshold = _UNBUILT

    def rebuild(
        self, names: Sequence[str | None], ranks: IntArray, best: IntArray | None = None
    ) -> None:
        """The heap afresh from the arrays: the best `top` feasible slots (by `ranks`, the
        slots' name order), after a bulk update or when it grew long. `best`: those slots when
        the caller found them already (`VerdictMemo._evaluate_states`)."""
        slots = np.flatnonzero(self.feasible) if best is None else best
        self.threshold = None
        if len(slots) > self.top:
            slots = self._best_slots(slots, ranks)
        tiers, scores = self.tier[slots].tolist(), self.score[slots].tolist()
        self.heap = [
            (self.tiered and not tier, -score, str(names[slot]), slot)
            for slot, tier, score in zip(slots.tolist(), tiers, scores, strict=True)
        ]
        if len(self.heap) == self.top:
            self.threshold = max(self.heap)[:3]
        heapq.heapify(self.heap)

    def _best_slots(self, slots: IntArray, ranks: IntArray) -> IntArray:
        """The best `top` of `slots` by (used tier, score, rank), in no order: partial
        selections (O(slots)), not a sort."""
        if self.tiered:
            used = slots[self.tier[slots]]
            if len(used) >= self.top:
                return _best_scored(used, self.score, ranks, self.top)
            rest = _best_scored(slots[~self.tier[slots]], self.score, ranks, self.top - len(used))
            return np.concatenate((used, rest))
        return _best_scored(slots, self.score, ranks, self.top)

    def best(
        self,
        names: Sequence[str | None],
        ranks: Callable[[], IntArray],
        choose: Callable[[Verdicts], IntArray | None] | None = None,
    ) -> int | None:
        """The slot `pick` would choose among all nodes; None when none fits. `choose`: finds a
        rebuild's best `top` slots (None: no more than `top` are feasible) faster than
        `rebuild` itself can (`VerdictMemo._top_slots`)."""
        rebuilds = 0
        if len(self.heap) > 2 * len(self.feasible) + 4 * self.top:  # mostly left-behind entries
            rebuilds = 1
        found = None if rebuilds else self._top(names)
        while rebuilds < 2 and (rebuilds == 1 or found is _INCOMPLETE):
            self.rebuild(names, ranks(), None if choose is None else choose(self))
            found, rebuilds = self._top(names), 2

        return None if found is _INCOMPLETE else found

    def _top(self, names: Sequence[str | None]) -> int | None:
        """The smallest valid entry's slot, or `_INCOMPLETE` when a slot left out of the heap
        (one ranked below `threshold` when it was built) may be better."""
        heap = self.heap
        while heap:
            untiered, negative, name, slot = heap[0]
            if (
                self.feasible[slot]
                and self.score[slot] == -negative
                and (self.tiered and not self.tier[slot]) == untiered
                and names[slot] == name
            ):
                if self.threshold is not None and heap[0][:3] > self.threshold:
                    return _INCOMPLETE
                return slot
            heapq.heappop(heap)
        return None if self.threshold is None else _INCOMPLETE


def _best_scored(slots: IntArray, score: FloatArray, ranks: IntArray, count: int) -> IntArray:
    """The `count` slots of `slots` with the highest score, the lowest rank first among equals."""
    if len(slots) <= count:
        return slots
    negative = -score[slots]
    cut = np.partition(negative, count - 1)[count - 1]
    better, ties = slots[negative < cut], slots[negative == cut]
    need = count - len(better)
    if len(ties) > need:
        ties = ties[np.argpartition(ranks[ties], need - 1)[:need]]
    return np.concatenate((better, ties))
