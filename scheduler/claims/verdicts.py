"""The best node for a claim shape, from one verdict per class of like nodes.

A verdict (`Fit`: the picks and the node's rank, or `NO_FIT`) reads the node's devices and GPUs
(fixed objects: a `ClaimNode`), what `Usage` holds of the node's pools (`Usage.versions`: a fresh
token per change, so copies of a `Usage` never share a token for different contents), and, to
rank, the node's `NodeState` and the learning scores' versions. A state's change shows as a new
`derived` dict (placement drops it on every change and makes a new one on the next `derive`).

Nodes of equal likeness (`_Likeness`) decide alike, their picks at the same device positions:
their devices equal but for their pool names (same driver, device name, attributes, capacity,
taints, sharing, same pool order, same incomplete pools), the same devices held in `Usage` by
position (and the same capacity consumed), the same GPU map by position and GPU selector (the
same object, or made from equal links and NUMA nodes), and `NodeState`s in the same class as
placement's verdict memo keys them (`static_shape`, `dynamic_state`, the GPU product label); the
part fixed for the node's life is `ClaimNode.rest` (made with the node) and what the shapes
read of its devices (`NodeDevices.likeness_reading`; all of them, `likeness`, only when an
expression may read any attribute), read once per node and set of attributes read. A likeness is
numbered: the node's class. So a shape is decided once per class (`_Book.verdicts`), on the first
node of it met, and a like node takes that verdict with its picks moved to its own devices.

Per node list (`_Layout`, made once per list for every shape) each node's class is kept and
followed: what changed since is found for the whole list at once (the pool tokens and state
stamps it last saw, side by side, compared with the current ones in a few passes that run in C,
`map` and `compress`; given the nodes' change log, `NodeChanges`: placement's `Snapshot`, the
nodes it names since the generation last seen), and only those nodes are classed again; a node
whose class is another is logged (`_Layout.moved`). The log must report every change of a node's
state (placement's contract: `Snapshot.refresh` after changing a state other than through it).
Per list and shape a view (`_View`) keeps each node's heap item (its class's unused flag and
score, its name rank) and reads the moves logged since its last scan: a pod costs the follow of
the nodes that changed, an item for each node moved, and a look at the top of the heap. A new
view (the first pod of a shape) costs a verdict per class and an item per node.

Only with shipped scores (others may read anything of a node, its name included): else every
node is decided afresh for each pod.
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
from .selectors import AttributeReads
from .usage import Usage

__all__ = ["NO_FIT", "Fit", "NodeChanges", "Verdicts"]

_BOOK_LIMIT = 1_000
_VIEW_LIMIT = 16
_LAST = chr(0x10FFFF)
_LIKE_LIMIT = 4_096
_FIXED_LIMIT = 20_000
_STATE_CLASS = "claims.state_class"
_stamp_of = attrgetter("derived")
_SERIALS = count()


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


class _Verdict(NamedTuple):  # made once per class and shape: a tuple is made fastest
    """A class's verdict for one shape: decided on `node` (whose devices' positions are
    `positions`: move `fit` from them to a like node's), with its heap key's first two parts."""

    node: ClaimNode
    positions: Mapping[int, int]
    fit: Fit
    unused: int  # -1 for a used node first, 0 else; 1 when nothing fits (the smallest wins)
    loss: float  # the score, negated


class _Like(NamedTuple):
    """A node's class (its likeness's number), with what it was made from."""

    node: ClaimNode
    tokens: tuple[object, ...]
    stamp: object
    version: int  # of the attributes read
    number: int


class _NoState:
    """Stands in for a node without a `NodeState`: its `derived` is always None."""

    __slots__ = ()
    derived = None


_NO_STATE = _NoState()


@dataclass(slots=True)
class _Layout:
    """One node list (numbered by `Verdicts.list_number`), and each of its nodes' class as of
    the `Usage` and state changes last followed, for every shape's view of it.

    Made once per list: its nodes, their pools flattened with the position of the node owning
    each, a pool's positions there, the nodes' states, name ranks and positions by name.
    Followed: the `Usage` and change log last followed, with the pool tokens (in the flattened
    pools) and state stamps seen then, each node's class, and the positions whose class changed,
    in order (`moved`; cleared when long, `epoch` then counts on, so that views made before read
    every class again)."""

    nodes: tuple[ClaimNode, ...]
    pools: tuple[tuple[str, str], ...]
    owner: tuple[int, ...]
    places: dict[tuple[str, str], list[int]]
    states: tuple[object, ...]
    ranks: tuple[int, ...]
    at: dict[str, list[int]]
    usage: Callable[[], Usage | None]  # the `Usage` last followed (not kept alive by it)
    seen: int  # how many of its changes were seen
    log: Callable[[], NodeChanges | None]  # the change log last followed (not kept alive)
    generation: int  # the log's generation then
    tokens: list[object]
    stamps: list[object]
    classes: list[int]
    moved: list[int]
    epoch: int
    serial: int  # this layout's number among every layout made (none reuses it)
    reads: int  # the version of the attributes read its classes were made with


_Item = tuple[int, float, int, int]
"""A node's place in a view's heap: (unused, -score, name rank, position); the smallest wins."""


@dataclass(slots=True)
class _View:
    """One node list as last scanned for one shape: its layout, which of the layout's moves it
    has read (`epoch`, `seen`), each node's heap item (made from its class's verdict) and the
    heap (items no longer a node's are skipped when they come to the top)."""

    layout: _Layout
    epoch: int
    seen: int
    items: list[_Item | None]
    heap: list[_Item]

    def best(self) -> int | None:
        """The position of the node with the smallest item (ties: the first position), None
        when none fits."""
        heap, items = self.heap, self.items
        if len(heap) > 2 * len(items) + 16:
            heap[:] = [item for item in items if item is not None]
            heapify(heap)
        while heap and items[heap[0][3]] is not heap[0]:
            heappop(heap)
        if not heap or heap[0][0] > 0:
            return None
        return heap[0][3]


class _Book:
    """One shape's verdicts per class and the views of the node lists it was scanned with."""

    __slots__ = ("verdicts", "views")

    def __init__(self) -> None:
        self.views: dict[int, _View] = {}
        self.verdicts: dict[int, _Verdict] = {}

    def view(self, listed: int, layout: _Layout) -> tuple[_View, Sequence[int]]:
        """The view of the node list numbered `listed` (laid out as `layout`), with the
        positions whose class changed since it was last scanned (every position when it is
        new, or the layout's moves it has not read were cleared)."""
        found = self.views.get(listed)
        if found is not None and found.layout is layout and found.epoch == layout.epoch:
            moved = layout.moved
            changed: Sequence[int] = (
                () if found.seen == len(moved) else sorted(set(moved[found.seen :]))
            )
            found.seen = len(moved)
            return found, changed
        if found is None and len(self.views) >= _VIEW_LIMIT:
            self.views.clear()
        nodes = len(layout.nodes)
        found = self.views[listed] = _View(
            layout=layout, epoch=layout.epoch, seen=len(layout.moved), items=[None] * nodes, heap=[]
        )
        return found, range(nodes)

    def verdict(
        self, number: int, node: ClaimNode, compute: Callable[[ClaimNode], Fit]
    ) -> _Verdict:
        """The verdict of class `number` (decided on `node`, of that class, when not kept)."""
        found = self.verdicts.get(number)
        if found is not None:
            return found
        fit = compute(node)
        if len(self.verdicts) >= _LIKE_LIMIT:
            self.verdicts.clear()
        positions = node.devices.positions
        if not fit.fits:
            found = _Verdict(node, positions, fit, 1, -0.0)
        else:
            found = _Verdict(node, positions, fit, -int(fit.rank[0]), -fit.rank[1])
        self.verdicts[number] = found
        return found


class Verdicts:
    def __init__(
        self,
        scoring: Scoring,
        reads: AttributeReads | None = None,
        *,
        alike: Verdicts | None = None,
    ) -> None:
        """`reads`: the device attributes the shapes decided may read (None: every one); nodes
        whose devices differ only in others are alike. A shape's reads are noted before it is
        scanned. `alike`: verdicts (of another usage) whose likenesses these share, with its
        reads: a node's fixed part, the costly part of its class, is then read once for both."""
        self._learners = scoring.learners()
        self._shipped = scoring.shipped
        self._books: dict[tuple[object, ...], _Book] = {}
        self._last: list[ClaimNode] = []
        self._last_given: tuple[ClaimNode, ...] | None = None  # the tuple `_last` was, if one
        self._last_number = -1
        self._numbers: dict[tuple[int, ...], tuple[int, tuple[ClaimNode, ...]]] = {}
        self._next_number = 0
        self._likeness: _Likeness = _Likeness(reads) if alike is None else alike._likeness
        self._likes: dict[int, _Like] = {}  # per node object, for every shape and list
        self._layouts: dict[int, _Layout] = {}  # per node list, by its number

    def list_number(self, nodes: Sequence[ClaimNode]) -> int:
        """A number for the node list (the same objects in the same order: the same number while
        it is kept; never one of another list). The very tuple given last time costs nothing;
        the same list as last time one comparison in C (of object identities: `ClaimNode`
        equals only itself)."""
        if nodes is self._last_given:  # a tuple: the same nodes while it lives
            return self._last_number
        same = nodes == self._last if isinstance(nodes, list) else list(nodes) == self._last
        if not same:
            last = tuple(nodes)
            ids = tuple(map(id, last))
            found = self._numbers.get(ids)  # it holds its nodes, so these ids are still theirs
            if found is None:
                if len(self._numbers) >= _VIEW_LIMIT:
                    self._numbers.clear()
                found = self._numbers[ids] = (self._next_number, last)
                self._next_number += 1
            self._last, self._last_number = list(last), found[0]
        self._last_given = nodes if isinstance(nodes, tuple) else None
        return self._last_number

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
        if listed is None:
            listed = self.list_number(nodes)
        layout = self._layout(listed, nodes)
        if not self._shipped:
            return _decided_afresh(layout, compute)
        learned = tuple(fn.version for fn in self._learners) if self._learners else ()
        book = self._book((shape, learned))
        self._follow(layout, usage, changes)
        view, changed = book.view(listed, layout)
        if changed:
            _items(book, view, changed, compute)
        at = view.best()
        if at is None:
            return None
        node = layout.nodes[at]
        found = book.verdict(layout.classes[at], node, compute)
        if found.node is node:
            return node, found.fit
        return node, _moved(found.fit, found.positions, node.devices.devices)

    def classes(self, listed: int) -> tuple[Sequence[int], tuple[int, int, int]] | None:
        """Each node's class in the node list numbered `listed`, as its last `scan` left them,
        with a stamp that stays while they do (and never comes back once they change); None
        when not kept (no scan of that list, or scores that are not shipped)."""
        layout = self._layouts.get(listed)
        if layout is None or not self._shipped:
            return None
        return layout.classes, (layout.serial, layout.epoch, len(layout.moved))

    def _follow(self, layout: _Layout, usage: Usage, changes: NodeChanges | None) -> None:
        """The layout's classes brought up to `usage` and the states' changes (`changes`, when
        given): a node whose pools or state changed is classed again, and logged in `moved`
        when its class is another."""
        stale = _changed_pools(layout, usage)
        stale.update(_changed_states(layout, changes))
        if layout.reads != self._likeness.version:  # every likeness is made again
            layout.reads = self._likeness.version
            stale = set(range(len(layout.nodes)))
        if not stale:
            return
        nodes, stamps, classes, moved = layout.nodes, layout.stamps, layout.classes, layout.moved
        if len(moved) > 4 * len(nodes) + 64:
            moved.clear()
            layout.epoch += 1
        versions = usage.versions.get
        for i in sorted(stale):
            node = nodes[i]
            number = self._like(node, tuple(map(versions, node.devices.pools)), usage)
            state = node.state
            stamps[i] = None if state is None else state.derived  # what the class read
            if classes[i] != number:
                classes[i] = number
                moved.append(i)

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
        unseen = object()  # a token and stamp nothing holds: every node is classed at first
        found = self._layouts[listed] = _Layout(
            nodes=tuple(nodes),
            pools=tuple(p for p, _i in flat),
            owner=tuple(i for _p, i in flat),
            places=places,
            states=tuple(_NO_STATE if n.state is None else n.state for n in nodes),
            ranks=self._ranks(nodes),
            at=_positions(nodes),
            usage=_nothing,
            seen=0,
            log=_nothing,
            generation=0,
            tokens=[unseen] * len(flat),
            stamps=[unseen] * len(nodes),
            classes=[-1] * len(nodes),
            moved=[],
            epoch=0,
            serial=next(_SERIALS),
            reads=self._likeness.version,
        )
        return found

    def _ranks(self, nodes: Sequence[ClaimNode]) -> tuple[int, ...]:
        """Each node's rank (equal names: equal ranks; the lowest wins a tie): by name, but a name
        after the longer names that start with it (the order of the names with the highest
        character appended; before, of the names with each character reversed, largest first)."""
        keys = [n.name + _LAST for n in nodes]
        rank = {k: r for r, k in enumerate(sorted(set(keys)))}
        return tuple(rank[k] for k in keys)

    def _like(self, node: ClaimNode, tokens: tuple[object, ...], usage: Usage) -> int:
        """The node's class, kept for every shape and list while its pools' tokens and its
        state's `derived` dict are those it was made with."""
        state = node.state
        kept = self._likes.get(id(node))
        version = self._likeness.version
        if (
            kept is not None
            and kept.node is node
            and kept.tokens == tokens
            and (state is None or kept.stamp is state.derived)
            and kept.version == version
        ):
            return kept.number
        number = self._likeness.of(node, usage)  # derives: `derived` is a dict now
        if len(self._likes) >= _FIXED_LIMIT:
            self._likes.clear()
        stamp = None if state is None else state.derived
        self._likes[id(node)] = _Like(node, tokens, stamp, version, number)
        return number

    def _book(self, key: tuple[object, ...]) -> _Book:
        book = self._books.get(key)
        if book is None:
            if len(self._books) >= _BOOK_LIMIT:
                self._books.clear()
            book = self._books[key] = _Book()
        return book


def _items(
    book: _Book, view: _View, changed: Sequence[int], compute: Callable[[ClaimNode], Fit]
) -> None:
    """The heap items of the nodes at `changed` in `view`, from their classes' verdicts: pushed
    when few, else the heap made again from every item. One loop, as it runs for every node of
    a new view."""
    layout = view.layout
    nodes, ranks, classes = layout.nodes, layout.ranks, layout.classes
    items, heap = view.items, view.heap
    verdicts = book.verdicts.get
    push = len(changed) <= len(items) // 4
    for i in changed:
        number = classes[i]
        found = verdicts(number) or book.verdict(number, nodes[i], compute)
        item = items[i] = (found.unused, found.loss, ranks[i], i)
        if push:  # the node's older item stays until it comes to the top
            heappush(heap, item)
    if not push:
        heap[:] = [item for item in items if item is not None]
        heapify(heap)


def _decided_afresh(
    layout: _Layout, compute: Callable[[ClaimNode], Fit]
) -> tuple[ClaimNode, Fit] | None:
    """The best node, every node decided afresh (scores that are not all shipped may read
    anything of a node)."""
    best: tuple[tuple[int, float, int, int], ClaimNode, Fit] | None = None
    for i, node in enumerate(layout.nodes):
        fit = compute(node)
        if not fit.fits:
            continue
        key = (-int(fit.rank[0]), -fit.rank[1], layout.ranks[i], i)
        if best is None or key < best[0]:
            best = (key, node, fit)
    return None if best is None else (best[1], best[2])


def _changed_pools(layout: _Layout, usage: Usage) -> set[int]:
    """The nodes of `layout` whose pools' tokens in `usage` differ from those it last saw: from
    the pools `usage` changed since, when it is the object last followed, else all compared."""
    if layout.usage() is usage:
        changed = usage.changes[layout.seen :]
        layout.seen = len(usage.changes)
        stale = set()
        for pool in set(changed):
            token = usage.versions.get(pool)
            for k in layout.places.get(pool, ()):
                layout.tokens[k] = token
                stale.add(layout.owner[k])
        return stale
    tokens = list(map(usage.versions.get, layout.pools))
    stale = {layout.owner[i] for i in compress(count(), map(is_not, tokens, layout.tokens))}
    layout.tokens, layout.usage, layout.seen = tokens, ref(usage), len(usage.changes)
    return stale


def _changed_states(layout: _Layout, changes: NodeChanges | None) -> list[int]:
    """The positions in `layout` of nodes whose state changed since it was last followed: those
    `changes` names since the generation last seen, when it is the log last followed and
    remembers that far; else those whose state's stamp differs from the one seen."""
    if changes is not None:
        names = changes.changed_since(layout.generation) if layout.log() is changes else None
        layout.generation = changes.generation
        if names is not None:
            at = layout.at
            return [i for name in names if name in at for i in at[name]]
        layout.log = ref(changes)
    else:
        layout.log = _nothing
    return list(compress(count(), map(is_not, map(_stamp_of, layout.states), layout.stamps)))


def _positions(nodes: Sequence[ClaimNode]) -> dict[str, list[int]]:
    at: dict[str, list[int]] = {}
    for i, node in enumerate(nodes):
        at.setdefault(node.name, []).append(i)
    return at


def _nothing() -> None:
    return None


class _Likeness:
    """What a verdict reads of a node, up to its pool names: nodes of equal likeness decide alike
    (their picks at the same device positions). The part fixed for a node object (its devices,
    GPU map and static state: `ClaimNode.likeness`, made with it) is numbered once per object,
    the state's class once per state change; equal
    contents get the same number (never one given to other contents), so a likeness is small."""

    def __init__(self, reads: AttributeReads | None) -> None:
        """`reads`: the attributes expressions may read (None: every one)."""
        self._reads = reads
        self._fixed: dict[int, tuple[ClaimNode, int, int, tuple[DeviceId, ...]]] = {}
        self._numbers: dict[object, int] = {}  # contents -> number (holds the GPU selectors)
        self._known: dict[int, tuple[Hashed, int]] = {}  # a state class's number by its id
        self._next = count()

    def of(self, node: ClaimNode, usage: Usage) -> int:
        """The number of the node's likeness (its class)."""
        fixed, ids = self._fixed_part(node)
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
            return self._number((fixed, held, shares, -1, None))
        label = state.labels.get(GPU_PRODUCT_LABEL)
        found = cast(Hashed, state.derive(_STATE_CLASS, _state_class))
        known = self._known.get(id(found))
        number = known[1] if known is not None and known[0] is found else self._state(found)
        return self._number((fixed, held, shares, number, label))

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

    @property
    def version(self) -> int:
        """Grows whenever the attributes read do: every likeness is to be made again."""
        return -1 if self._reads is None else self._reads.version

    def _fixed_part(self, node: ClaimNode) -> tuple[int, tuple[DeviceId, ...]]:
        """(the number of the node's fixed part, its devices' ids): of the attributes read
        only, made once per node object and set of attributes read."""
        found = self._fixed.get(id(node))
        version = self.version
        if found is None or found[0] is not node or found[1] != version:
            if len(self._fixed) >= _FIXED_LIMIT:
                self._fixed.clear()
            reads = self._reads
            if reads is None or reads.every:
                number = self._number(node.likeness)  # hashed once, with the node
            else:
                seen = node.devices.likeness_reading(reads.keeps)
                number = self._number(Hashed((seen, *node.rest)))
            found = self._fixed[id(node)] = (node, version, number, node.devices.ids)
        return found[2], found[3]


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
