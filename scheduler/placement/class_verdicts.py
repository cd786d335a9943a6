"""`VerdictMemo`'s per pod class view: each node's verdict, and the entries that yield the best
node.

A pod class is a request without its key and pod group (`pod_class`): nothing else differs between
two pods as filters and scores see them. Its `Verdicts` keep, per node slot, whether the pod fits,
the used-node tier, the weighted score and a code that keys the full verdict (assignment, reasons)
in `table`. Entries (not in the used tier, -score, node name, slot) rank slots so that the
smallest valid one is `pick`'s choice: used tier first (when the scoring prefers used nodes
and the pod wants a GPU), then the highest score, then the lowest name. A rebuild puts the best
`top` feasible slots, sorted, in a run (`run`, read from `at` on) and remembers the last one's
rank (`threshold`); every slot that changes later and ranks at or above it is pushed on a heap
(`heap`). So any feasible slot without a valid entry ranks below the threshold, and the smaller
of the two valid fronts, at or above it, is the best; otherwise the run is rebuilt. Entries left
behind by later changes are skipped when they reach a front: in the run by moving `at` on (no
heap operation: most entries that go stale are a rebuild's, whose slots other classes' pods
then take), on the heap by a pop. After a bulk update the rebuild waits for the next `best`
(`defer_rebuild`): a decision among a few slots (a topology domain's, vectorised over them)
never needs either.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .node import GPU_PRODUCT_LABEL, Assignment
from .node_slots import BoolArray, FloatArray, IntArray
from .request import MEMORY, NODE_NAME_KEY, PodRequest

__all__ = ["HEAP_TOP", "ClassKey", "Verdict", "Verdicts", "label_keys", "pod_class"]

ClassKey = tuple[object, ...]
Verdict = tuple[bool, bool, float, Assignment | None, tuple[str, ...]]
"""(feasible, GPUs already in use, weighted score, assignment, reasons when not feasible)."""
_Entry = tuple[bool, float, str, int]
HEAP_TOP = 256
"""Feasible slots a rebuild puts in the run (the rest rank below the last of them)."""
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
        pod.shares if shares else len(pod.shares),
        pod.share_reuse,
        pod.split,
    )


def label_keys(pod: PodRequest) -> tuple[str, ...]:
    """The node labels filters read for `pod` besides the GPU product label (which the GPU model
    filter and fragmentation read, and every state id includes): its selector's and affinity's
    keys, and `NODE_NAME_KEY` when its affinity reads the node's name (`matchFields`). Filters
    and scores read no other label."""
    keys = set(pod.node_selector)
    keys.update(r.key for term in pod.affinity for r in term.match_expressions)
    if any(term.match_fields for term in pod.affinity):
        keys.add(NODE_NAME_KEY)
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
    run: list[_Entry] = field(default_factory=list)  # the last rebuild's entries, sorted
    at: int = 0  # `run`'s entries before this one are stale
    heap: list[_Entry] = field(default_factory=list)  # entries pushed since (`put`)
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
        and the run and heap short of it say so too (their valid entries run out, or rank after
        `threshold`)."""
        feasible, tier, score, code_of = self.feasible, self.tier, self.score, self.code
        heap, tiered, push = self.heap, self.tiered, heapq.heappush
        # an entry below `limit` ranks at or above `threshold` (no slot reaches infinity)
        limit = None if self.threshold is None else (*self.threshold, math.inf)
        for slot, code, verdict in zip(slots, codes, made, strict=True):
            fits, used, value = verdict[0], verdict[1], verdict[2]
            feasible[slot], tier[slot], score[slot], code_of[slot] = fits, used, value, code
            if fits:
                entry = (tiered and not used, -value, names[slot], slot)
                if limit is None or entry < limit:  # (else `best` rebuilds first)
                    push(heap, entry)

    def reject(self, slots: Iterable[int]) -> None:
        """Slots `slots` certainly do not fit (the pre-check), or hold no node."""
        feasible, code = self.feasible, self.code
        for slot in slots:
            feasible[slot] = False
            code[slot] = -1

    def defer_rebuild(self) -> None:
        """Leave the run to be rebuilt at the next `best` (after a bulk update): an empty run
        and heap whose threshold every entry ranks after, so `best` finds them incomplete."""
        self.run, self.at, self.heap = [], 0, []
        self.threshold = _UNBUILT

    def rebuild(
        self, names: Sequence[str | None], ranks: IntArray, best: IntArray | None = None
    ) -> None:
        """The run afresh from the arrays, and an empty heap: the best `top` feasible slots (by
        `ranks`, the slots' name order), sorted by one `lexsort`, after a bulk update, when the
        run ran out or the heap grew long. `best`: those slots when the caller found them
        already (`VerdictMemo._top_slots`)."""
        slots = np.flatnonzero(self.feasible) if best is None else best
        self.threshold = None
        if len(slots) > self.top:
            slots = self._best_slots(slots, ranks)
        tier, negative = self.tier[slots], -self.score[slots]
        untiered = ~tier if self.tiered else np.zeros(len(slots), dtype=np.bool_)
        order = np.lexsort((ranks[slots], negative, untiered))
        slots, untiered, negative = slots[order], untiered[order], negative[order]
        self.run = [
            (bool(first), value, str(names[slot]), slot)
            for first, value, slot in zip(
                untiered.tolist(), negative.tolist(), slots.tolist(), strict=True
            )
        ]
        self.at, self.heap = 0, []
        if len(self.run) == self.top:
            self.threshold = self.run[-1][:3]

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
        """The smallest valid entry's slot (of the run's and the heap's fronts, stale entries
        dropped on the way), or `_INCOMPLETE` when a slot left out of both (one ranked below
        `threshold` at the rebuild) may be better."""
        valid = self._valid
        run, at = self.run, self.at
        while at < len(run) and not valid(run[at], names):
            at += 1
        self.at = at
        heap = self.heap
        while heap and not valid(heap[0], names):
            heapq.heappop(heap)
        found = run[at] if at < len(run) else None
        if heap and (found is None or heap[0] < found):
            found = heap[0]
        if found is None:
            return None if self.threshold is None else _INCOMPLETE
        if self.threshold is not None and found[:3] > self.threshold:
            return _INCOMPLETE
        return found[3]

    def _valid(self, entry: _Entry, names: Sequence[str | None]) -> bool:
        """`entry` still ranks its slot as the arrays say (the slot holds the same node)."""
        untiered, negative, name, slot = entry
        return bool(
            self.feasible[slot]
            and self.score[slot] == -negative
            and (self.tiered and not self.tier[slot]) == untiered
            and names[slot] == name
        )


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
