"""Each node's last verdict per claim shape, kept while nothing it read has changed.

A verdict (`Fit`: the picks and the node's rank, or `NO_FIT`) reads the node's devices and GPUs
(fixed objects: an entry is for one `ClaimNode` object), what `Usage` holds of the node's pools
(`Usage.versions`: a fresh token per change, so copies of a `Usage` never share a token for
different contents), and, to rank, the node's `NodeState` and the learning scores' versions.
A state's change shows as a new `derived` dict (placement drops it on every change and makes a
new one on the next `derive`): the entry keeps the dict it saw. With scores that are not all
shipped, a node with a state is decided afresh each time (what they read is unknown).

`Verdicts.scan` walks the nodes once per pod: a lookup per unchanged node, `compute` for the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scheduler.placement import Scoring

from .decision import ClaimNode
from .search import Pick
from .usage import Usage

__all__ = ["NO_FIT", "Fit", "Verdicts"]

_BOOK_LIMIT = 1_000
_DERIVED = "claims.verdicts"


@dataclass(frozen=True, slots=True)
class Fit:
    """The picks on a node and its rank there: (used node first, score); larger wins."""

    picks: tuple[Pick, ...]
    rank: tuple[bool, float]
    fits: bool = True


NO_FIT = Fit((), (False, 0.0), fits=False)
"""The verdict of a node where the claims do not fit."""


@dataclass(frozen=True, slots=True)
class _Entry:
    node: ClaimNode
    stamp: object  # the state's `derived` dict when decided (None: the node has no state)
    tokens: tuple[object, ...]
    fit: Fit
    key: tuple[bool, float, str]  # (rank..., reversed name): the largest wins


class Verdicts:
    def __init__(self, scoring: Scoring) -> None:
        self._learners = scoring.learners()
        self._shipped = scoring.shipped
        self._books: dict[tuple[object, ...], dict[int, _Entry]] = {}

    def scan(
        self,
        shape: tuple[object, ...],
        nodes: Sequence[ClaimNode],
        usage: Usage,
        compute: Callable[[ClaimNode], Fit],
    ) -> tuple[ClaimNode, Fit] | None:
        """The best node for `shape` among `nodes` (ties to the lowest name), or None."""
        learned = tuple(fn.version for fn in self._learners)
        book = self._book((shape, learned))
        if len(book) > 4 * len(nodes) + 256:
            book.clear()  # entries of node objects long gone
        versions = usage.versions
        best: _Entry | None = None
        for node in nodes:
            entry = book.get(id(node))
            tokens = tuple(map(versions.get, node.devices.pools))
            state = node.state
            if (
                entry is None
                or entry.node is not node
                or entry.tokens != tokens
                or (state is not None and (entry.stamp is not state.derived or not self._shipped))
            ):
                entry = book[id(node)] = self._entry(node, tokens, compute(node))
            if entry.fit.fits and (best is None or entry.key > best.key):
                best = entry
        return None if best is None else (best.node, best.fit)

    def _book(self, key: tuple[object, ...]) -> dict[int, _Entry]:
        book = self._books.get(key)
        if book is None:
            if len(self._books) >= _BOOK_LIMIT:
                self._books.clear()
            book = self._books[key] = {}
        return book

    def _entry(self, node: ClaimNode, tokens: tuple[object, ...], fit: Fit) -> _Entry:
        state = node.state
        stamp = None
        if state is not None:
            state.derive(_DERIVED, _made)  # so that the state has a `derived` dict to watch
            stamp = state.derived
        name_key = "".join(chr(0x10FFFF - ord(ch)) for ch in node.name)
        return _Entry(node, stamp, tokens, fit, (*fit.rank, name_key))


def _made(_state: object) -> bool:
    return True
