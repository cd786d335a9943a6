"""Each node's last verdict per claim shape, kept while nothing it read has changed.

A verdict (`Fit`: the picks and the node's rank, or `NO_FIT`) reads the node's devices and GPUs
(fixed objects: an entry is for one `ClaimNode` object), what `Usage` holds of the node's pools
(`Usage.versions`: a fresh token per change, so copies of a `Usage` never share a token for
different contents), and, to rank, the node's `NodeState` and the learning scores' versions.
A state's change shows as a new `derived` dict (placement drops it on every change and makes a
new one on the next `derive`): the entry keeps the dict it saw. With scores that are not all
shipped, a node with a state is decided afresh each time (what they read is unknown).

`Verdicts.scan` finds what changed for the whole node list at once: per node list and shape (a
`_View`; what it reads of the list alone, its `_Layout`, is made once per list for every shape) it
keeps the pool tokens and state stamps it last saw, side by side, and compares them with the
current ones in a few passes that run in C (`map`, `compress`), so a pod costs a lookup of the
list, those passes, an entry for each changed node (in one loop) and a look at the top of the
view's heap of ranks. Given the
nodes' change log (`NodeChanges`: placement's `Snapshot`), the state stamps are not compared at
all: the view keeps the log's generation it last saw and asks it which nodes changed since (all
compared again when the log is another, or no longer remembers that far back). The log must
report every change of a node's state (placement's contract: `Snapshot.refresh` after changing a
state other than through it).

A changed node whose likeness (`_Likeness`) equals one decided before for the same shape takes
that verdict, its picks moved to its own devices by position: its devices equal the other's
but for their pool names (same driver, device name, attributes, capacity, taints, sharing, same
pool order, same incomplete pools), the same devices are held in `Usage` by position (and the
same capacity consumed), the same GPU map by position and GPU selector (the same object, or
made from equal links and NUMA nodes), and its `NodeState` is in the same class as placement's
verdict memo keys it (`static_shape`, `dynamic_state`, the GPU product label); the part fixed
for the node's life is `ClaimNode.likeness`, made once with the node. Only with
shipped scores (others may read the name).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from heapq import heapify, heappop, heappush
from itertools import compress, count
from operator import attrgetter, is_not
from typing import NamedTuple, Protocol, cast
from weakref import ref

from scheduler.placement import GPU_PRODUCT_LABEL, NodeState, Scoring
from scheduler.placement.node_slots import dynamic_state

from .candidates import Candidate
from .decision import ClaimNode, Hashed
from .model import Device, DeviceId
from .search import Pick
from .usage import Usage

__all__ = ["NO_FIT", "Fit", "NodeChanges", "Verdicts"]

_BOOK_LIMIT = 1_000
_VIEW_LIMIT = 16
_LAST = chr(0x10FFFF)
_LIKE_LIMIT = 4_096
_FIXED_LIMIT = 20_000
_DERIVED = "claims.verdicts"
_STATE_CLASS = "claims.state_class"
_stamp_of = attrgetter("derived")


class NodeChanges(Protocol):
    """Which nodes' states changed (placement's `Snapshot` is one): every change of a node's
    state bumps `generation` and is reported by name."""

    @property
    def generation(self) -> int: ...

    def changed_since(self, generation: int) -> list[str] | None:
        """Names of nodes changed after `generation`; None when that is no longer known."""
        ...


class Fit(NamedTuple):  # made for every decision moved to a like node: a tuple is made fastest
    """The picks on a node and its rank there: (used node first, score); larger wins."""

    picks: tuple[Pick, ...]
    rank: tuple[bool, float]
    fits: bool = True


NO_FIT = Fit((), (False, 0.0), fits=False)
"""The verdict of a node where the claims do not fit."""


class _Entry(NamedTuple):  # made for every changed node and shape: a tuple is made fastest
    node: ClaimNode
    stamp: object  # the state's `derived` dict when decided (None: the node has no state)
    tokens: tuple[object, ...]
    fit: Fit  # decided on this node, or (with `positions`) on a like one
    unused: int  # -1 for a used node first, 0 else; 1 when nothing fits (the smallest wins)
    loss: float  # the score, negated
    positions: Mapping[int, int] | None  # the like node's devices' positions: move `fit` here


class _Like(NamedTuple):
    """A node's likeness and its devices' positions, with what they were made from."""

    node: ClaimNode
    tokens: tuple[object, ...]
    stamp: object
    like: tuple[object, ...]
    positions: Mapping[int, int]


class _NoState:
    """Stands in for a node without a `NodeState`: its `derived` is always None."""

    __slots__ = ()
    derived = None


_NO_STATE = _NoState()


class _Layout(NamedTuple):
    """What every shape's view of one node list reads of the list alone (made once per list):
    its nodes, their pools flattened with the position of the node owning each, a pool's
    positions there, the nodes' states, name ranks and positions by name."""

    nodes: tuple[ClaimNode, ...]
    pools: tuple[tuple[str, str], ...]
    owner: tuple[int, ...]
    places: dict[tuple[str, str], list[int]]
    states: tuple[object, ...]
    ranks: tuple[int, ...]
    at: dict[str, list[int]]


_Item = tuple[int, float, int, int]
"""A node's place in a view's heap: (unused, -score, name rank, position); the smallest wins."""


@dataclass(slots=True)
class _View:
    """One node list (laid out in `layout`) as last scanned for one shape, aligned with its
    nodes: what each verdict read (the pool tokens, in the layout's flattened pools, and the
    state stamps), each node's entry and heap item, and the heap (items no longer a node's are
    skipped when they come to the top)."""

    layout: _Layout
    usage: Callable[[], Usage | None]  # the `Usage` last scanned with (not kept alive by it)
    seen: int  # how many of its changes were seen
    log: Callable[[], NodeChanges | None]  # the change log last scanned with (not kept alive)
    generation: int  # the log's generation then
    tokens: list[object]
    stamps: list[object]
    entries: list[_Entry | None]
    items: list[_Item | None]
    heap: list[_Item]

    def best(self, *, rebuild: bool) -> _Entry | None:
        """The entry with the largest key (ties: the first position), None when none fits;
        `rebuild`: many items changed, make the heap again from the current ones."""
        heap, items = self.heap, self.items
        if rebuild or len(heap) > 2 * len(items) + 16:
            heap[:] = [item for item in items if item is not None]
            heapify(heap)
        while heap and items[heap[0][3]] is not heap[0]:
            heappop(heap)
        if not heap or heap[0][0] > 0:
            return None
        return self.entries[heap[0][3]]


class _Book:
    """One shape's entries per node object, the node lists it was scanned with, and the verdicts
    per likeness (with the positions of the devices of the node each was decided on)."""

    __slots__ = ("entries", "likes", "views")

    def __init__(self) -> None:
        self.entries: dict[int, _Entry] = {}
        self.views: dict[int, _View] = {}
        self.likes: dict[tuple[object, ...], tuple[Mapping[int, int], Fit]] = {}

    def view(self, listed: int, layout: _Layout) -> _View:
        """The view of the node list numbered `listed` by `Verdicts.list_number` (laid out as
        `layout`)."""
        found = self.views.get(listed)
        if found is not None:
            return found
        if len(self.views) >= _VIEW_LIMIT:
            self.views.clear()
        if len(self.entries) > 4 * len(layout.nodes) + 256:
            self.entries.clear()  # entries of node objects long gone
        unseen = object()  # a token and stamp nothing holds: every node is checked at first
        nodes = len(layout.nodes)
        found = self.views[listed] = _View(
            layout=layout,
            usage=_nothing,
            seen=0,
            log=_nothing,
            generation=0,
            tokens=[unseen] * len(layout.pools),
            stamps=[unseen] * nodes,
            entries=[None] * nodes,
            items=[None] * nodes,
            heap=[],
        )
        return found


class Verdicts:
    def __init__(self, scoring: Scoring) -> None:
        self._learners = scoring.learners()
        self._shipped = scoring.shipped
        self._books: dict[tuple[object, ...], _Book] = {}
        self._last: list[ClaimNode] = []
        self._last_number = -1
        self._numbers: dict[tuple[int, ...], tuple[int, tuple[ClaimNode, ...]]] = {}
        self._next_number = 0
        self._likeness = _Likeness()
        self._likes: dict[int, _Like] = {}  # per node object, for every shape
        self._layouts: dict[int, _Layout] = {}  # per node list, by its number

    def list_number(self, nodes: Sequence[ClaimNode]) -> int:
        """A number for the node list (the same objects in the same order: the same number while
        it is kept; never one of another list). The same list as last time costs one comparison in
        C (of object identities: `ClaimNode` equals only itself)."""
        same = nodes == self._last if isinstance(nodes, list) else list(nodes) == self._last
        if same:  # `ClaimNode` equals only itself
            return self._last_number
        last = tuple(nodes)
        ids = tuple(map(id, last))
        found = self._numbers.get(ids)  # it holds its nodes, so these ids are still theirs
        if found is None:
            if len(self._numbers) >= _VIEW_LIMIT:
                self._numbers.clear()
            found = self._numbers[ids] = (self._next_number, last)
            self._next_number += 1
        self._last, self._last_number = list(last), found[0]
        return found[0]

    def scan(
        self,
        shape: tuple[object, ...],
        nodes: Sequence[ClaimNode],
        usage: Usage,
        compute: Callable[[ClaimNode], Fit],
        *,
        listed: int | None = None,
        changes: NodeChanges | None = None,
    ) -> tuple[ClaimNode, Fit] | None:
        """The best node for `shape` among `nodes` (ties to the lowest name), or None. `listed`:
        the list's `list_number`, when the caller has it; `changes`: the log of the nodes'
        state changes, when the caller has it."""
        learned = tuple(fn.version for fn in self._learners) if self._learners else ()
        book = self._book((shape, learned))
        if listed is None:
            listed = self.list_number(nodes)
        view = book.view(listed, self._layout(listed, nodes))
        stale = _changed_pools(view, usage)
        stale.update(_changed_states(view, changes))
        if not self._shipped:
            stale.update(i for i, s in enumerate(view.layout.states) if s is not _NO_STATE)
        rebuild = len(stale) > len(view.items) // 4
        if stale:
            self._refresh(book, view, sorted(stale), usage, compute, push=not rebuild)
        found = view.best(rebuild=rebuild)
        if found is None:
            return None
        if found.positions is None:
            return found.node, found.fit
        return found.node, _moved(found.fit, found.positions, found.node.devices.devices)

    def _layout(self, listed: int, nodes: Sequence[ClaimNode]) -> _Layout:
        """The layout of `nodes`, numbered `listed`: the one made for the list before, if any."""
        found = self._layouts.get(listed)
        if found is not None:
            return found
        if len(self._layouts) >= _VIEW_LIMIT:
            self._layouts.clear()
        flat = [(p, i) for i, n in enumerate(nodes) for p in n.devices.pools]
        places: dict[tuple[str, str], list[int]] = {}
        for k, (pool, _i) in enumerate(flat):
            places.setdefault(pool, []).append(k)
        found = self._layouts[listed] = _Layout(
            nodes=tuple(nodes),
            pools=tuple(p for p, _i in flat),
            owner=tuple(i for _p, i in flat),
            places=places,
            states=tuple(_NO_STATE if n.state is None else n.state for n in nodes),
            ranks=self._ranks(nodes),
            at=_positions(nodes),
        )
        return found

    def _ranks(self, nodes: Sequence[ClaimNode]) -> tuple[int, ...]:
        """Each node's rank (equal names: equal ranks; the lowest wins a tie): by name, but a name
        after the longer names that start with it (the order of the names with the highest
        character appended; before, of the names with each character reversed, largest first)."""
        keys = [n.name + _LAST for n in nodes]
        rank = {k: r for r, k in enumerate(sorted(set(keys)))}
        return tuple(rank[k] for k in keys)

    def _refresh(
        self,
        book: _Book,
        view: _View,
        positions: Sequence[int],
        usage: Usage,
        compute: Callable[[ClaimNode], Fit],
        *,
        push: bool,
    ) -> None:
        """The entries of the nodes at `positions` in `view` (the kept one while what it read is
        unchanged, else a new one) with their heap items, pushed when `push` (else the heap is
        made again from the items); one loop, as it runs for every node of a new view."""
        entries, nodes, ranks = book.entries, view.layout.nodes, view.layout.ranks
        items, kept, stamps, heap = view.items, view.entries, view.stamps, view.heap
        versions = usage.versions.get
        shipped = self._shipped
        for i in positions:
            node = nodes[i]
            tokens = tuple(map(versions, node.devices.pools))
            state = node.state
            entry = entries.get(id(node))
            if (
                entry is None
                or entry.node is not node
                or entry.tokens != tokens
                or (state is not None and (entry.stamp is not state.derived or not shipped))
            ):
                entry = entries[id(node)] = self._entry(book, node, tokens, usage, compute)
            kept[i], stamps[i] = entry, entry.stamp  # what the entry read: the state's stamp now
            item = items[i] = (entry.unused, entry.loss, ranks[i], i)
            if push:  # the node's older item stays until it comes to the top
                heappush(heap, item)

    def _like(
        self, node: ClaimNode, tokens: tuple[object, ...], usage: Usage
    ) -> tuple[tuple[object, ...], Mapping[int, int]]:
        """The node's likeness, kept for every shape while its pools' tokens and its state's
        `derived` dict are those it was made with."""
        state = node.state
        kept = self._likes.get(id(node))
        if (
            kept is not None
            and kept.node is node
            and kept.tokens == tokens
            and (state is None or kept.stamp is state.derived)
        ):
            return kept.like, kept.positions
        like, positions = self._likeness.of(node, usage)  # derives: `derived` is a dict now
        if len(self._likes) >= _FIXED_LIMIT:
            self._likes.clear()
        stamp = None if state is None else state.derived
        self._likes[id(node)] = _Like(node, tokens, stamp, like, positions)
        return like, positions

    def _book(self, key: tuple[object, ...]) -> _Book:
        book = self._books.get(key)
        if book is None:
            if len(self._books) >= _BOOK_LIMIT:
                self._books.clear()
            book = self._books[key] = _Book()
        return book

    def _entry(
        self,
        book: _Book,
        node: ClaimNode,
        tokens: tuple[object, ...],
        usage: Usage,
        compute: Callable[[ClaimNode], Fit],
    ) -> _Entry:
        """A new entry for the node: the verdict of a node like it decided before (with the
        positions of that node's devices, to move it to this node's), else `compute`'s."""
        positions = None
        if self._shipped:
            like, mine = self._like(node, tokens, usage)
            found = book.likes.get(like)
            if found is None:
                fit = compute(node)
                if len(book.likes) >= _LIKE_LIMIT:
                    book.likes.clear()
                book.likes[like] = (mine, fit)
            else:
                positions, fit = found
        else:
            fit = compute(node)
        state = node.state
        stamp = None
        if state is not None:
            stamp = state.derived
            if stamp is None:  # so that the state has a `derived` dict to watch
                state.derive(_DERIVED, _made)
                stamp = state.derived
        if not fit.fits:
            return _Entry(node, stamp, tokens, fit, 1, -0.0, positions)
        return _Entry(node, stamp, tokens, fit, -int(fit.rank[0]), -fit.rank[1], positions)


def _changed_pools(view: _View, usage: Usage) -> set[int]:
    """The nodes of `view` whose pools' tokens in `usage` differ from those it last saw: from
    the pools `usage` changed since, when it is the object last scanned, else all compared."""
    if view.usage() is usage:
        changed = usage.changes[view.seen :]
        view.seen = len(usage.changes)
        stale = set()
        for pool in set(changed):
            token = usage.versions.get(pool)
            for k in view.layout.places.get(pool, ()):
                view.tokens[k] = token
                stale.add(view.layout.owner[k])
        return stale
    tokens = list(map(usage.versions.get, view.layout.pools))
    stale = {view.layout.owner[i] for i in compress(count(), map(is_not, tokens, view.tokens))}
    view.tokens, view.usage, view.seen = tokens, ref(usage), len(usage.changes)
    return stale


def _changed_states(view: _View, changes: NodeChanges | None) -> list[int]:
    """The positions in `view` of nodes whose state changed since it was last scanned: those
    `changes` names since the generation last seen, when it is the log last scanned with and
    remembers that far; else those whose state's stamp differs from the one seen."""
    if changes is not None:
        names = changes.changed_since(view.generation) if view.log() is changes else None
        view.generation = changes.generation
        if names is not None:
            at = view.layout.at
            return [i for name in names if name in at for i in at[name]]
        view.log = ref(changes)
    else:
        view.log = _nothing
    return list(compress(count(), map(is_not, map(_stamp_of, view.layout.states), view.stamps)))


def _positions(nodes: Sequence[ClaimNode]) -> dict[str, list[int]]:
    at: dict[str, list[int]] = {}
    for i, node in enumerate(nodes):
        at.setdefault(node.name, []).append(i)
    return at


def _nothing() -> None:
    return None


def _made(_state: object) -> bool:
    return True


class _Likeness:
    """What a verdict reads of a node, up to its pool names: nodes of equal likeness decide alike
    (their picks at the same device positions). The part fixed for a node object (its devices,
    GPU map and static state: `ClaimNode.likeness`, made with it) is numbered once per object,
    the state's class once per state change; equal
    contents get the same number (never one given to other contents), so a likeness is small."""

    def __init__(self) -> None:
        self._fixed: dict[int, tuple[ClaimNode, int, Mapping[int, int], tuple[DeviceId, ...]]] = {}
        self._numbers: dict[object, int] = {}  # contents -> number (holds the GPU selectors)
        self._known: dict[int, tuple[Hashed, int]] = {}  # a state class's number by its id
        self._next = count()

    def of(self, node: ClaimNode, usage: Usage) -> tuple[tuple[object, ...], Mapping[int, int]]:
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
        found = cast(Hashed, state.derive(_STATE_CLASS, _state_class))
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

    def _state(self, found: Hashed) -> int:
        number = self._number(found)
        if len(self._known) >= _FIXED_LIMIT:
            self._known.clear()
        self._known[id(found)] = (found, number)
        return number

    def _fixed_part(self, node: ClaimNode) -> tuple[int, Mapping[int, int], tuple[DeviceId, ...]]:
        """(the number of the node's fixed part, its devices' positions, their ids)."""
        found = self._fixed.get(id(node))
        if found is None or found[0] is not node:
            if len(self._fixed) >= _FIXED_LIMIT:
                self._fixed.clear()
            devices = node.devices
            number = self._number(node.likeness)  # hashed once, with the node
            found = self._fixed[id(node)] = (node, number, devices.positions, devices.ids)
        return found[1], found[2], found[3]


def _state_class(state: NodeState) -> Hashed:
    """What placement's scores read of a state's load (with `static_shape`, which a state keeps
    for life, its verdict memo's class of states)."""
    return Hashed(dynamic_state(state))


def _moved(fit: Fit, positions: Mapping[int, int], devices: tuple[Device, ...]) -> Fit:
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
