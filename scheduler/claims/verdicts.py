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

A changed node whose likeness (`_Likeness`) equals one decided before for the same shape takes
that verdict, its picks moved to its own devices by position: its devices equal the other's
but for their pool names (same driver, device name, attributes, capacity, taints, sharing, same
pool order, same incomplete pools), the same devices are held in `Usage` by position (and the
same capacity consumed), the same GPU map by position and GPU selector (the same object, or
made from equal links and NUMA nodes), and its `NodeState` is in the same class as placement's
verdict memo keys it (`static_shape`, `dynamic_state`, the GPU product label). Only with
shipped scores (others may read the name).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import compress, count
from operator import attrgetter, is_, is_not
from typing import cast

from agent.model import LinkMatrix
from scheduler.placement import GPU_PRODUCT_LABEL, NodeState, Scoring
from scheduler.placement.node_slots import dynamic_state, static_shape

from .candidates import Candidate
from .decision import ClaimNode
from .model import Capacity, Device, DeviceId
from .search import Pick
from .usage import Usage

__all__ = ["NO_FIT", "Fit", "Verdicts"]

_BOOK_LIMIT = 1_000
_VIEW_LIMIT = 16
_NAMES_LIMIT = 100_000
_LIKE_LIMIT = 4_096
_FIXED_LIMIT = 20_000
_DERIVED = "claims.verdicts"
_STATE_CLASS = "claims.state_class"
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
    """One shape's entries per node object, the node lists it was scanned with, and the verdicts
    per likeness (with the positions of the devices of the node each was decided on)."""

    __slots__ = ("entries", "likes", "views")

    def __init__(self) -> None:
        self.entries: dict[int, _Entry] = {}
        self.views: dict[int, _View] = {}
        self.likes: dict[tuple[object, ...], tuple[dict[int, int], Fit]] = {}

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
        self._likeness = _Likeness()

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
            entry = book.entries[id(node)] = self._entry(
                node, tokens, self._fit(book, node, usage, compute)
            )
        return entry

    def _fit(
        self, book: _Book, node: ClaimNode, usage: Usage, compute: Callable[[ClaimNode], Fit]
    ) -> Fit:
        """The verdict of a node like it decided before (moved to its devices), else `compute`."""
        if not self._shipped:
            return compute(node)
        like, positions = self._likeness.of(node, usage)
        found = book.likes.get(like)
        if found is not None:
            return _moved(found[1], found[0], node.devices.devices)
        fit = compute(node)
        if len(book.likes) >= _LIKE_LIMIT:
            book.likes.clear()
        book.likes[like] = (positions, fit)
        return fit

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


class _Hashed:
    """A value with its hash computed once (a likeness is looked up once per changed node)."""

    __slots__ = ("_hash", "value")

    def __init__(self, value: tuple[object, ...]) -> None:
        self.value = value
        self._hash = hash(value)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, _Hashed) and other._hash == self._hash and other.value == self.value
        )


class _Likeness:
    """What a verdict reads of a node, up to its pool names: nodes of equal likeness decide alike
    (their picks at the same device positions). The part fixed for a node object (its devices
    and GPU map) is numbered once per object, the state's class once per state change; equal
    contents get the same number (never one given to other contents), so a likeness is small."""

    def __init__(self) -> None:
        self._fixed: dict[int, tuple[ClaimNode, int, dict[int, int], tuple[DeviceId, ...]]] = {}
        self._numbers: dict[object, int] = {}  # contents -> number (holds the GPU selectors)
        self._known: dict[int, tuple[_Hashed, int]] = {}  # a state class's number by its id
        self._next = count()

    def of(self, node: ClaimNode, usage: Usage) -> tuple[tuple[object, ...], dict[int, int]]:
        """(the node's likeness, its devices' positions by object id)."""
        fixed, positions, ids = self._fixed_part(node)
        exclusive, consumed = usage.exclusive, usage.consumed
        held = tuple(compress(count(), map(exclusive.__contains__, ids)))
        shares: tuple[object, ...] = ()
        if consumed:
            shares = tuple(
                (i, tuple(sorted(consumed[ids[i]].items())))
                for i in compress(count(), map(consumed.__contains__, ids))
            )
        state = node.state
        if state is None:
            return (fixed, held, shares, -1, None), positions
        label = state.labels.get(GPU_PRODUCT_LABEL)
        found = cast(_Hashed, state.derive(_STATE_CLASS, _state_class))
        known = self._known.get(id(found))
        number = known[1] if known is not None and known[0] is found else self._state(found)
        return (fixed, held, shares, number, label), positions

    def _number(self, contents: object) -> int:
        if len(self._numbers) >= _FIXED_LIMIT:
            self._numbers.clear()
            self._known.clear()
        number = self._numbers.get(contents)
        if number is None:
            number = self._numbers[contents] = next(self._next)
        return number

    def _state(self, found: _Hashed) -> int:
        number = self._number(found)
        if len(self._known) >= _FIXED_LIMIT:
            self._known.clear()
        self._known[id(found)] = (found, number)
        return number

    def _fixed_part(self, node: ClaimNode) -> tuple[int, dict[int, int], tuple[DeviceId, ...]]:
        """(the number of the node's fixed part, its devices' positions, their ids)."""
        found = self._fixed.get(id(node))
        if found is None or found[0] is not node:
            if len(self._fixed) >= _FIXED_LIMIT:
                self._fixed.clear()
            devices = node.devices.devices
            positions = {id(d): i for i, d in enumerate(devices)}
            number = self._number(_fixed_likeness(node))
            found = self._fixed[id(node)] = (node, number, positions, tuple(d.id for d in devices))
        return found[1], found[2], found[3]


def _fixed_likeness(node: ClaimNode) -> tuple[object, ...]:
    """The node's devices and GPU map with each pool by its position among the node's pools
    (`pools` is sorted: pools in the same order compare alike), and its state's static shape;
    the GPU selector by the layout it was made from, or when it was given, itself (compared as
    the same object, and kept alive while the key is)."""
    place = {pool: i for i, pool in enumerate(node.devices.pools)}
    devices = tuple(
        _device_likeness(d, place[(d.id.driver, d.id.pool)]) for d in node.devices.devices
    )
    incomplete = tuple(sorted(place[p] for p in node.devices.incomplete_pools if p in place))
    state = node.state
    shape = None
    if state is not None:
        shape = tuple(_Links(v) if isinstance(v, LinkMatrix) else v for v in static_shape(state))
    gpus = node.gpus
    if gpus is None:
        return (devices, incomplete, shape, None)
    devs = node.devices.devices
    whole = tuple(gpus.whole.get(d.id, -1) for d in devs)
    parent = tuple(gpus.parent.get(d.id, -1) for d in devs)
    made = gpus.selector if gpus.layout is None else (_Links(gpus.layout[0]), gpus.layout[1])
    return (devices, incomplete, shape, (made, whole, parent))


def _device_likeness(device: Device, pool: int) -> tuple[object, ...]:
    """A device's content but its pool's name (values with their types: True is not 1 to CEL)."""
    return (
        device.id.driver,
        pool,
        device.id.device,
        tuple(sorted((k, type(v).__name__, v) for k, v in device.attributes.items())),
        tuple(sorted(_capacity_likeness(k, c) for k, c in device.capacity.items())),
        device.taints,
        device.allow_multiple_allocations,
    )


def _capacity_likeness(name: str, capacity: Capacity) -> tuple[object, ...]:
    """A capacity as plain ints (a `Fraction` hashes slowly), with its request policy if any."""
    value = capacity.value
    return (name, value.numerator, value.denominator, capacity.policy)


class _Links:
    """A link matrix compared by identity first, then by value, and hashed by its size only:
    hashing one costs more than a verdict, and nodes of one shape often share the object."""

    __slots__ = ("value",)

    def __init__(self, value: LinkMatrix) -> None:
        self.value = value

    def __hash__(self) -> int:
        return self.value.size

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Links) and (
            other.value is self.value or other.value == self.value
        )


def _state_class(state: NodeState) -> _Hashed:
    """What placement's scores read of a state's load (with `static_shape`, which a state keeps
    for life, its verdict memo's class of states)."""
    return _Hashed(dynamic_state(state))


def _moved(fit: Fit, positions: dict[int, int], devices: tuple[Device, ...]) -> Fit:
    """`fit`, decided on a node whose devices' positions are `positions`, on `devices`."""
    if not fit.fits:
        return fit
    picks = tuple(
        Pick(
            p.claim,
            p.alternative,
            Candidate(devices[positions[id(p.candidate.device)]], p.candidate.consumed),
        )
        for p in fit.picks
    )
    return Fit(picks, fit.rank)
