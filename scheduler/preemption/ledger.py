"""Quota during one victim search: usage with the chosen victims taken out, never the shared one.

`Usage` is the scheduler's (or the simulator's) live state; the search only subtracts what the
pieces it has removed so far use, per queue, and asks admission (`admission_problem_of`) and the
reclaim floors against that.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from scheduler.quota import QuotaTree, Usage, add_into, admission_problem_of

from .eligibility import Piece, Rules
from .model import VictimReason

__all__ = ["Ledger", "guaranteed_leaves"]


class Ledger:
    """What each queue uses with the removed pieces taken out."""

    def __init__(self, tree: QuotaTree, usage: Usage, rules: Rules) -> None:
        self._tree = tree
        self._usage = usage
        self._rules = rules
        self._freed: dict[str, dict[str, int]] = {}

    def used(self, queue: str) -> Mapping[str, int]:
        freed = self._freed.get(queue)
        if not freed:
            return self._usage.used(queue)
        out = dict(self._usage.used(queue))
        add_into(out, freed, -1)
        return out

    def admission(self) -> str | None:
        """Why U's demand breaks a max with the removed pieces gone (None: it does not)."""
        rules = self._rules
        leaf = rules.preemptor.leaf
        if leaf not in self._tree.paths:
            return None
        return admission_problem_of(self._tree, self.used, leaf, rules.demand)

    def keeps_floors(self, pieces: Iterable[Piece]) -> bool:
        """Would removing `pieces` too leave every reclaim victim's queues at their floor?"""
        floors, paths = self._rules.floors, self._rules.floor_paths
        taken: dict[str, dict[str, int]] = {}
        for piece in pieces:
            if piece.reason is VictimReason.RECLAIM:
                for queue in paths.get(piece.unit.leaf, ()):
                    add_into(taken.setdefault(queue, {}), piece.amounts)
        if floors is None:
            return not taken
        for queue, amounts in taken.items():
            floor = floors.get(queue, {})
            used = self.used(queue)
            for resource, low in floor.items():
                if used.get(resource, 0) - amounts.get(resource, 0) < low and amounts.get(resource):
                    return False
        return True

    def remove(self, piece: Piece) -> None:
        self._apply(piece, 1)

    def restore(self, piece: Piece) -> None:
        self._apply(piece, -1)

    def _apply(self, piece: Piece, sign: int) -> None:
        for queue in self._tree.paths.get(piece.unit.leaf, ()):
            add_into(self._freed.setdefault(queue, {}), piece.amounts, sign)

    def helps(self, piece: Piece) -> bool:
        """Does removing `piece` lower a queue where U's demand breaks a max?"""
        leaf = self._rules.preemptor.leaf
        if leaf not in self._tree.paths:
            return False
        victim_path = set(self._tree.paths.get(piece.unit.leaf, ()))
        for queue in self._tree.paths[leaf]:
            limits = self._tree.specs[queue].max
            if queue not in victim_path or not limits:
                continue
            used = self.used(queue)
            for resource, asked in self._rules.demand.items():
                limit = limits.get(resource)
                over = limit is not None and used.get(resource, 0) + asked > limit
                if over and piece.amounts.get(resource):
                    return True
        return False


def guaranteed_leaves(tree: QuotaTree, usage: Usage, leaves: Iterable[str]) -> frozenset[str]:
    """The leaves whose running units are all within their guarantee: some queue on the path
    names a min, and no queue on it uses more than its min of a resource that min names."""
    out = set()
    for leaf in leaves:
        path = tree.paths.get(leaf)
        if not path or not any(tree.specs[q].min for q in path):
            continue
        if all(
            usage.used(q).get(r, 0) <= low for q in path for r, low in tree.specs[q].min.items()
        ):
            out.add(leaf)
    return frozenset(out)
