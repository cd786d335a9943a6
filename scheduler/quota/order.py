"""Which queue goes next, and each queue's fair share (DESIGN §10). Pure.

Level by level from the root, among the children with work pending in their subtree: first those
with within-guarantee work (furthest below its min first: smallest used / min), then the lowest
weighted dominant share (DRF: the largest used / root capacity over managed resources, divided by
weight); ties by name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping

from scheduler.quota.admission import within_guarantee
from scheduler.quota.amounts import Amounts
from scheduler.quota.spec import ROOT
from scheduler.quota.tree import QuotaTree
from scheduler.quota.usage import Changes, Usage

__all__ = ["QueueOrder", "below_min", "choose_leaf", "dominant_share", "fair_shares"]

_ABSENT = object()  # a leaf without a head, as last asked
_Rank = tuple[int, float, str]


def below_min(tree: QuotaTree, usage: Usage, queue: str) -> float:
    """used / min, the smallest over the resources `queue` names in its min (inf: none)."""
    used = usage.used(queue)
    ratios = [used.get(r, 0) / low for r, low in tree.specs[queue].min.items() if low > 0]
    return min(ratios, default=math.inf)


def dominant_share(tree: QuotaTree, usage: Usage, queue: str, capacity: Amounts) -> float:
    used = usage.used(queue)
    shares = [used.get(r, 0) / capacity[r] for r in tree.managed if capacity.get(r, 0) > 0]
    return max(shares, default=0.0) / tree.specs[queue].weight


def choose_leaf(
    tree: QuotaTree, usage: Usage, capacity: Amounts, heads: Mapping[str, Amounts]
) -> str:
    """The leaf whose next unit goes first; `heads`: each leaf with work and that unit's demand.
    A leaf the tree does not know (its pods only wait) goes first: nothing to order."""
    unknown = sorted(leaf for leaf in heads if leaf not in tree.paths)
    if unknown:
        return unknown[0]
    guaranteed: set[str] = set()
    active: set[str] = set()
    for leaf, demand in heads.items():
        path = tree.paths[leaf]
        active.update(path)
        if within_guarantee(tree, usage, leaf, demand):
            guaranteed.update(path)
    queue = ROOT
    while tree.children[queue]:
        candidates = [c for c in tree.children[queue] if c in active]
        queue = min(candidates, key=lambda c: _rank(tree, usage, capacity, c, c in guaranteed))
    return queue


class QueueOrder:
    """`choose_leaf` with a memory, for callers that ask after every decision. It walks the same
    levels, but a leaf's within-guarantee answer is kept until its head unit changes or usage
    moves the way that can change it, and whether a queue has active or guaranteed work below it
    is kept until one of those leaves changes; a queue's rank is kept until its usage or the
    capacity changes. A rise on a queue with a min can only end a guarantee, and only for a head
    that no longer fits that queue's min: the largest amount any kept within-guarantee head below
    asks of each min key is kept (`_tight`, an upper bound), so a rise that leaves room for it
    ends none, and only a rise that does not rechecks the heads below at that queue. A fall can
    only start a guarantee: the heads below that were not within are asked again.
    Same answers as `choose_leaf` (property and unit tests compare them).

    `heads` maps each leaf with work to a token of its head unit (hashable, compared with `==`,
    never None); `demand_of(leaf)` gives that unit's demand and is called only when needed.
    `choose` takes every head; `choose_changed` only the heads that changed since the last call
    (None: the leaf has no work now), for a caller that keeps its heads itself.
    """

    def __init__(self) -> None:
        self._tree: QuotaTree | None = None
        self._usage: Usage | None = None
        self._changes = Changes()
        self._below: dict[str, tuple[str, ...]] = {}  # queue -> the leaves under it
        self._heads: dict[str, Hashable] = {}  # as last told
        self._unknown: set[str] = set()  # leaves with work the tree does not know
        self._flags: dict[str, bool] = {}  # leaf -> its head is within guarantee
        self._asked: dict[str, Amounts] = {}  # leaf -> its head's demand, while flagged within
        self._tight: dict[str, dict[str, int]] = {}  # queue -> min key -> most a head asks
        self._has: dict[str, tuple[bool, bool]] = {}  # queue -> (active, guaranteed) below it
        self._ranks: dict[str, tuple[bool, _Rank]] = {}  # queue -> (guaranteed, its rank)
        self._capacity: dict[str, int] = {}  # what the ranks were made with

    def choose(
        self,
        tree: QuotaTree,
        usage: Usage,
        capacity: Amounts,
        heads: Mapping[str, Hashable],
        demand_of: Callable[[str], Amounts],
    ) -> str:
        old = self._heads  # heads compared, not hashed: a head's hash may be dear
        changed: dict[str, Hashable | None] = {
            q: h for q, h in heads.items() if (b := old.get(q, _ABSENT)) is not h and b != h
        }
        changed.update(dict.fromkeys(old.keys() - heads.keys()))
        return self.choose_changed(tree, usage, capacity, changed, demand_of)

    def choose_changed(
        self,
        tree: QuotaTree,
        usage: Usage,
        capacity: Amounts,
        changed: Mapping[str, Hashable | None],
        demand_of: Callable[[str], Amounts],
    ) -> str:
        self._follow(tree, usage, changed)
        if self._unknown:  # a leaf the tree does not know goes first: nothing to order
            return min(self._unknown)
        if capacity != self._capacity:
            self._ranks, self._capacity = {}, dict(capacity)
        queue, known, ranked = ROOT, self._has, self._ranks
        while tree.children[queue]:
            ranks = []
            for child in tree.children[queue]:
                active, has = known.get(child) or self._below_of(child, demand_of)
                if active:
                    rank = ranked.get(child)
                    if rank is None or rank[0] is not has:
                        rank = ranked[child] = (has, _rank(tree, usage, capacity, child, has))
                    ranks.append(rank[1])
            queue = min(ranks)[2]
        return queue

    def _below_of(self, queue: str, demand_of: Callable[[str], Amounts]) -> tuple[bool, bool]:
        """(any leaf below `queue` has work, any such leaf's head is within guarantee)."""
        known = self._has.get(queue)
        if known is not None:
            return known
        active = guaranteed = False
        for leaf in self._below.get(queue, ()):
            if leaf not in self._heads:
                continue
            active = True
            flag = self._flags.get(leaf)
            if flag is None:
                flag = self._flag(leaf, demand_of(leaf))
            if flag:
                guaranteed = True
                break
        self._has[queue] = (active, guaranteed)
        return active, guaranteed

    def _flag(self, leaf: str, demand: Amounts) -> bool:
        """Ask whether `leaf`'s head is within guarantee; keep the answer and what it asks."""
        tree, usage = self._tree, self._usage
        if tree is None or usage is None:
            raise RuntimeError("QueueOrder: _follow() first")
        flag = self._flags[leaf] = within_guarantee(tree, usage, leaf, demand)
        if flag:
            self._asked[leaf] = demand
            for queue in tree.min_paths[leaf]:
                _raise_to(self._tight.setdefault(queue, {}), tree.specs[queue].min, demand)
        return flag

    def _follow(
        self, tree: QuotaTree, usage: Usage, changed: Mapping[str, Hashable | None]
    ) -> None:
        """Take the changed heads; start over for a new tree or usage, else forget what the
        changed heads and usage made stale."""
        for leaf, head in changed.items():
            self._forget(tree, leaf)
            if head is None:
                self._heads.pop(leaf, None)
                self._unknown.discard(leaf)
            else:
                self._heads[leaf] = head
                if leaf not in tree.paths:
                    self._unknown.add(leaf)
        if tree is not self._tree or usage is not self._usage:
            self._restart(tree, usage)
            return
        for queue in self._changes.up:
            self._ranks.pop(queue, None)
            if queue in self._tight:
                self._rose(tree, usage, queue)
        for queue in self._changes.down:
            self._ranks.pop(queue, None)
            if queue in tree.specs and tree.specs[queue].min:
                for leaf in self._below.get(queue, ()):
                    if self._flags.get(leaf) is False:
                        self._forget(tree, leaf)
        self._changes.up.clear()
        self._changes.down.clear()

    def _restart(self, tree: QuotaTree, usage: Usage) -> None:
        if usage is not self._usage:
            self._changes = usage.watch()
        self._changes.up.clear()
        self._changes.down.clear()
        self._tree, self._usage = tree, usage
        self._below = _leaves_below(tree)
        self._unknown = {leaf for leaf in self._heads if leaf not in tree.paths}
        self._flags, self._asked, self._tight, self._has, self._ranks = {}, {}, {}, {}, {}

    def _rose(self, tree: QuotaTree, usage: Usage, queue: str) -> None:
        """`queue`'s usage rose: forget the within-guarantee heads below that no longer fit its
        min (none when the most any of them asks still fits); keep the bound of the others."""
        mins, used = tree.specs[queue].min, usage.used(queue)
        tight = self._tight[queue]
        for key, amount in tight.items():
            if used.get(key, 0) + amount > mins[key]:
                break
        else:
            return  # room left for the most any of them asks
        tight.clear()
        for leaf in self._below.get(queue, ()):
            asked = self._asked.get(leaf)
            if asked is None:
                continue
            if _fits(mins, used, asked):
                _raise_to(tight, mins, asked)
            else:
                self._forget(tree, leaf)

    def _forget(self, tree: QuotaTree, leaf: str) -> None:
        self._flags.pop(leaf, None)
        self._asked.pop(leaf, None)
        for queue in tree.paths.get(leaf, ()):
            self._has.pop(queue, None)


def _raise_to(tight: dict[str, int], mins: Mapping[str, int], asked: Amounts) -> None:
    """`tight` (per min key, the most a head asks) raised to what `asked` asks."""
    for key in mins:
        amount = asked.get(key, 0)
        if amount > tight.get(key, 0):
            tight[key] = amount


def _fits(mins: Mapping[str, int], used: Mapping[str, int], asked: Amounts) -> bool:
    """Does `asked` fit under one level's `mins` (each key it asks that the min names)?"""
    return all(
        used.get(key, 0) + amount <= mins[key]
        for key, amount in asked.items()
        if amount > 0 and key in mins
    )


def _leaves_below(tree: QuotaTree) -> dict[str, tuple[str, ...]]:
    """Every queue's leaves (a leaf's own entry is itself)."""
    below: dict[str, list[str]] = {}
    for name, path in tree.paths.items():
        if tree.is_leaf(name):
            for queue in path:
                below.setdefault(queue, []).append(name)
    return {queue: tuple(leaves) for queue, leaves in below.items()}


def _rank(tree: QuotaTree, usage: Usage, capacity: Amounts, queue: str, guaranteed: bool) -> _Rank:
    if guaranteed:
        return 0, below_min(tree, usage, queue), queue
    return 1, dominant_share(tree, usage, queue, capacity), queue


def fair_shares(
    tree: QuotaTree, usage: Usage, pending: Mapping[str, Amounts], capacity: Amounts
) -> dict[str, dict[str, int]]:
    """Each queue's fair share per managed resource: its min, plus the parent's surplus split by
    weight among siblings that want more (used + pending in their subtree), capped by max."""
    wants = _wants(tree, usage, pending)
    shares: dict[str, dict[str, int]] = {ROOT: {r: capacity.get(r, 0) for r in tree.managed}}
    stack = [ROOT]
    while stack:
        parent = stack.pop()
        kids = tree.children[parent]
        for r in tree.managed:
            split = _water_fill(tree, kids, r, shares[parent].get(r, 0), wants)
            for kid, amount in split.items():
                shares.setdefault(kid, {})[r] = amount
        stack.extend(kids)
    return shares


def _wants(
    tree: QuotaTree, usage: Usage, pending: Mapping[str, Amounts]
) -> dict[str, dict[str, int]]:
    wants = {q: dict(usage.used(q)) for q in tree.specs}
    for leaf, demand in pending.items():
        for queue in tree.paths.get(leaf, ()):
            for r, amount in demand.items():
                wants[queue][r] = wants[queue].get(r, 0) + amount
    return wants


def _water_fill(
    tree: QuotaTree, kids: list[str], r: str, total: int, wants: Mapping[str, Mapping[str, int]]
) -> dict[str, int]:
    caps = {k: min(tree.specs[k].max.get(r, total), total) for k in kids}
    give = {k: min(tree.specs[k].min.get(r, 0), caps[k]) for k in kids}
    left = total - sum(give.values())
    hungry = [k for k in kids if min(wants[k].get(r, 0), caps[k]) > give[k]]
    while left > 0 and hungry:
        weights = sum(tree.specs[k].weight for k in hungry)
        step = max(left // weights, 1)
        for k in list(hungry):
            room = min(wants[k].get(r, 0), caps[k]) - give[k]
            extra = min(room, step * tree.specs[k].weight, left)
            give[k] += extra
            left -= extra
            if extra >= room:
                hungry.remove(k)
    return give
