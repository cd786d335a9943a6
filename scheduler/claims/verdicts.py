"""Each node's last verdict per claim shape, kept while nothing it read has changed.

A verdict (`Fit`: the picks and the node's rank, or `NO_FIT`) reads the node's devices
and GPUs (fixed objects: a hit must be for the same `ClaimNode`), what `Usage` holds of the
node's pools (`Usage.versions`: a fresh token per change, so copies of a `Usage` never share a
token for different contents), and, to rank, the node's `NodeState` and the learning scores'
versions. Verdicts live in the `NodeState`'s derived values, which placement drops whenever the
state changes (`NodeState.derive`); the key holds the rest. With scores that are not all shipped
verdicts are not kept; a node without a state keeps its verdicts here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from scheduler.placement import Scoring

from .decision import ClaimNode
from .search import Pick
from .usage import Usage

__all__ = ["NO_FIT", "Fit", "Verdicts"]

_MEMO_LIMIT = 100_000
_DERIVED = "claims.verdicts"


@dataclass(frozen=True, slots=True)
class Fit:
    """The picks on a node and its rank there: (used node first, score); larger wins."""

    picks: tuple[Pick, ...]
    rank: tuple[bool, float]
    fits: bool = True
    node: ClaimNode | None = None  # the node it was found on (a kept verdict holds it alive)


NO_FIT = Fit((), (False, 0.0), fits=False)
"""The verdict of a node where the claims do not fit."""


class Verdicts:
    """The kept verdicts: in the node's `NodeState` (`derive`: dropped when it changes), or
    here for a node without one."""

    def __init__(self, scoring: Scoring) -> None:
        self._learners = scoring.learners()
        self._shipped = scoring.shipped
        self._memo: dict[tuple[object, ...], Fit] = {}

    def _table(self, node: ClaimNode) -> dict[tuple[object, ...], Fit] | None:
        state = node.state
        if state is None:
            if len(self._memo) >= _MEMO_LIMIT:
                self._memo.clear()
            return self._memo
        if not self._shipped:
            return None
        derived = state.derived
        found = None if derived is None else derived.get(_DERIVED)
        if found is None:
            found = state.derive(_DERIVED, _new_table)
        return found  # type: ignore[return-value]

    def _key(self, node: ClaimNode, shape: tuple[str, ...], usage: Usage) -> tuple[object, ...]:
        learned = tuple(fn.version for fn in self._learners) if self._learners else ()
        return id(node), shape, tuple(map(usage.versions.get, node.devices.pools)), learned

    def get(self, node: ClaimNode, shape: tuple[str, ...], usage: Usage) -> Fit | None:
        """The kept verdict, or None when there is none."""
        table = self._table(node)
        if table is None:
            return None
        hit = table.get(self._key(node, shape, usage))
        return hit if hit is not None and hit.node is node else None

    def put(self, node: ClaimNode, shape: tuple[str, ...], usage: Usage, fit: Fit) -> None:
        table = self._table(node)
        if table is not None:
            table[self._key(node, shape, usage)] = replace(fit, node=node)


def _new_table(_state: object) -> dict[tuple[object, ...], Fit]:
    return {}
