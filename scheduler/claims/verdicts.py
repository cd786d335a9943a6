"""Each node's last verdict per claim shape, kept while nothing it read has changed.

A verdict (`Fit`: the picks and the node's rank, or `NO_FIT`) reads the node's devices and GPUs
(fixed objects: an entry is for one `ClaimNode` object), what `Usage` holds of the node's pools
(`Usage.versions`: a fresh token per change, so copies of a `Usage` never share a token for
different contents), and, to rank, the node's `NodeState` and the learning scores' versions.
A state's change shows as a new `derived` dict (placement drops it on every change and makes a
new one on the next `derive`): the entry keeps the dict it saw. With scores that are not all
shipped, a node with a state is decided afresh each time (what they read is unknown).

`Verdicts.scan` finds what changed for the whole node list at once: per node list (a `_View`) it
keeps the pool tokens and state stamps it last saw, side by side, and compares them with the
current ones in a few passes that run in C (`map`, `compress`), so a pod costs a lookup of the
list, those passes, `compute` for each changed node and one `max` over the kept keys.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import compress, count
from operator import attrgetter, is_, is_not

from scheduler.placement import Scoring

from .decision import ClaimNode
from .search import Pick
from .usage import Usage

__all__ = ["NO_FIT", "Fit", "Verdicts"]

_BOOK_LIMIT = 1_000
_VIEW_LIMIT = 16
_NAMES_LIMIT = 100_000
_DERIVED = "claims.verdicts"
_stamp_of = attrgetter("derived")


@dataclass(frozen=True, slots=True)
class Fit:
    """The picks on a node and its rank there: (used node first, score); larger wins."""

    picks: tuple[Pick, ...]
    rank: tuple[bool, float]
    fits: bool = True


NO_FIT = Fit((), (False, 0.0), fits=False)
"""The verdict of a node where the claims do not fit."""

_Key = tuple[int, float, str]
"""(used node first, score, reversed name): the largest wins; -1 first when nothing fits."""


@dataclass(frozen=True, slots=True)
class _Entry:
    node: ClaimNode
    stamp: object  # the state's `derived` dict when decided (None: the node has no state)
    tokens: tuple[object, ...]
    fit: Fit
    key: _Key


class _NoState:
    """Stands in for a node without a `NodeState`: its `derived` is always None."""

    __slots__ = ()
    derived = None


_NO_STATE = _NoState()


@dataclass(slots=True)
class _View:
    """One node list as last scanned for one shape, aligned with its nodes: what each verdict
    read (the pool tokens, flattened with the position of the node owning each, and the state
    stamps) and each node's entry and key."""

    nodes: tuple[ClaimNode, ...]
    pools: tuple[tuple[str, str], ...]
    owner: tuple[int, ...]
    states: tuple[object, ...]
    tokens: list[object]
    stamps: list[object]
    entries: list[_Entry | None]
    keys: list[_Key]


class _Book:
    """One shape's entries per node object, and the node lists it was scanned with."""

    __slots__ = ("entries", "views")

    def __init__(self) -> None:
        self.entries: dict[int, _Entry] = {}
        self.views: dict[int, _View] = {}

    def view(self, listed: int, nodes: Sequence[ClaimNode]) -> _View:
        """The view of `nodes`, numbered `listed` by `Verdicts.list_number`."""
        found = self.views.get(listed)
        if found is not None:
            return found
        if len(self.views) >= _VIEW_LIMIT:
            self.views.clear()
        if len(self.entries) > 4 * len(nodes) + 256:
            self.entries.clear()  # entries of node objects long gone
        pools = [(p, i) for i, n in enumerate(nodes) for p in n.devices.pools]
        unseen = object()  # a token and stamp nothing holds: every node is checked at first
        found = self.views[listed] = _View(
            nodes=tuple(nodes),
            pools=tuple(p for p, _i in pools),
            owner=tuple(i for _p, i in pools),
            states=tuple(_NO_STATE if n.state is None else n.state for n in nodes),
            tokens=[unseen] * len(pools),
            stamps=[unseen] * len(nodes),
            entries=[None] * len(nodes),
            keys=[(-1, 0.0, "")] * len(nodes),
        )
        return found


class Verdicts:
    def __init__(self, scoring: Scoring) -> None:
        self._learners = scoring.learners()
        self._shipped = scoring.shipped
        self._books: dict[tuple[object, ...], _Book] = {}
        self._names: dict[str, str] = {}  # node name -> its reversed key (ties to the lowest)
        self._last: tuple[ClaimNode, ...] = ()
        self._last_number = -1
        self._numbers: dict[tuple[int, ...], tuple[int, tuple[ClaimNode, ...]]] = {}
        self._next_number = 0

    def list_number(self, nodes: Sequence[ClaimNode]) -> int:
        """A number for the node list (the same objects in the same order: the same number while
        it is kept; never one of another list). The same list as last time costs one pass in C."""
        if len(nodes) == len(self._last) and all(map(is_, nodes, self._last)):
            return self._last_number
        last = tuple(nodes)
        ids = tuple(map(id, last))
        found = self._numbers.get(ids)  # it holds its nodes, so these ids are still theirs
        if found is None:
            if len(self._numbers) >= _VIEW_LIMIT:
                self._numbers.clear()
            found = self._numbers[ids] = (self._next_number, last)
            self._next_number += 1
        self._last, self._last_number = last, found[0]
        return found[0]

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
        view = book.view(self.list_number(nodes), nodes)
        tokens = list(map(usage.versions.get, view.pools))
        stamps = list(map(_stamp_of, view.states))
        stale = {view.owner[i] for i in compress(count(), map(is_not, tokens, view.tokens))}
        stale.update(compress(count(), map(is_not, stamps, view.stamps)))
        if not self._shipped:
            stale.update(i for i, s in enumerate(view.states) if s is not _NO_STATE)
        view.tokens, view.stamps = tokens, stamps
        for i in sorted(stale):
            entry = self._current(book, view.nodes[i], usage, compute)
            view.entries[i], view.keys[i], stamps[i] = entry, entry.key, entry.stamp
        if not view.keys:
            return None
        best = max(view.keys)
        found = view.entries[view.keys.index(best)]
        if best[0] < 0 or found is None:
            return None
        return found.node, found.fit

    def _current(
        self, book: _Book, node: ClaimNode, usage: Usage, compute: Callable[[ClaimNode], Fit]
    ) -> _Entry:
        """The node's entry: the kept one while what it read is unchanged, else a new one."""
        tokens = tuple(map(usage.versions.get, node.devices.pools))
        state = node.state
        entry = book.entries.get(id(node))
        if (
            entry is None
            or entry.node is not node
            or entry.tokens != tokens
            or (state is not None and (entry.stamp is not state.derived or not self._shipped))
        ):
            entry = book.entries[id(node)] = self._entry(node, tokens, compute(node))
        return entry

    def _book(self, key: tuple[object, ...]) -> _Book:
        book = self._books.get(key)
        if book is None:
            if len(self._books) >= _BOOK_LIMIT:
                self._books.clear()
            book = self._books[key] = _Book()
        return book

    def _entry(self, node: ClaimNode, tokens: tuple[object, ...], fit: Fit) -> _Entry:
        state = node.state
        stamp = None
        if state is not None:
            state.derive(_DERIVED, _made)  # so that the state has a `derived` dict to watch
            stamp = state.derived
        name_key = self._names.get(node.name)
        if name_key is None:
            if len(self._names) >= _NAMES_LIMIT:
                self._names.clear()
            name_key = self._names[node.name] = "".join(chr(0x10FFFF - ord(c)) for c in node.name)
        used, score = (int(fit.rank[0]), fit.rank[1]) if fit.fits else (-1, 0.0)
        return _Entry(node, stamp, tokens, fit, (used, score, name_key))


def _made(_state: object) -> bool:
    return True
