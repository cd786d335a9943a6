"""Pod classes that fit nowhere, and why, remembered while the snapshot stands.

Under a queue most offers fit nowhere, and the same pod class is offered again and again (every
waiting pod of one job, at every pass) while no node changes. Whether a pod fits a node reads only
its class (`pod_class`) and the node (no filter reads a score, so what learning scores learn
meanwhile cannot make a node fit), so a class refused on every node but some held ones stays
refused until the snapshot's `generation` moves: any add, remove, assume, forget or refresh; and
why (every node's reason) reads only the class and the nodes too, so a refused pod's decision is
its class's, but for the pod's key.
A gang's trial placement moves it too, and undoes every change it made: the refusals from before
it hold again after it (`Placer.trial`).
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet

from .class_verdicts import ClassKey, pod_class
from .pick import Decision
from .request import PodRequest

__all__ = ["Refusal", "Refusals", "refusal_of"]

Refusal = tuple[ClassKey, frozenset[str]]
"""A pod class and the nodes held from it."""

_NOTHING_HELD: frozenset[str] = frozenset()


def refusal_of(pod: PodRequest, excluded: AbstractSet[str] | None) -> Refusal:
    return pod_class(pod), frozenset(excluded) if excluded else _NOTHING_HELD


class Refusals:
    """The refusals of one snapshot generation (an older generation's are forgotten), with the
    decisions that explained them, and those of a generation `keep` named, back once the
    snapshot is again as it was then (`restored`)."""

    def __init__(self) -> None:
        self._generation = -1
        self._refused: dict[Refusal, dict[bool, Decision]] = {}  # by `explain`; {}: none asked
        self._kept: tuple[int, dict[Refusal, dict[bool, Decision]]] | None = None

    def _at(self, generation: int) -> bool:
        """Whether what is kept is of `generation`; forgotten when not."""
        if generation != self._generation:
            self._generation, self._refused = generation, {}
            return False
        return True

    def refused(self, refusal: Refusal, generation: int) -> bool:
        """Whether `refusal` was added at `generation`, the snapshot's now."""
        return self._at(generation) and refusal in self._refused

    def decision(self, refusal: Refusal, generation: int, explain: bool) -> Decision | None:
        """The decision added for `refusal` at `generation` with `explain`, if any."""
        if not self._at(generation):
            return None
        explained = self._refused.get(refusal)
        return None if explained is None else explained.get(explain)

    def add(self, refusal: Refusal, explained: tuple[bool, Decision] | None = None) -> None:
        """The class fits no node but the held ones at the generation last asked about;
        `explained`: the decision that says why, and whether it counted every node's reason."""
        decisions = self._refused.setdefault(refusal, {})
        if explained is not None:
            decisions[explained[0]] = explained[1]

    def keep(self, generation: int) -> None:
        """Changes that will all be undone begin at `generation`, the snapshot's now (a gang's
        members assumed while the next is placed): keep its refusals for `restored`."""
        self._at(generation)
        self._kept = (generation, self._refused)

    def restored(self, before: int, after: int) -> None:
        """Every change since `before` (`keep`) was undone: the snapshot at `after`, now, is as
        it was then, and so are its refusals."""
        kept, self._kept = self._kept, None
        if kept is not None and kept[0] == before:
            self._generation, self._refused = after, kept[1]
