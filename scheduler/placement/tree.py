"""A tree of pod groups placed group by group, as kube-scheduler 1.37 places a tree of
CompositePodGroups: `Tree` (what each group needs, its children in order, its own topology) and
`place_subtree`, the walk the scheduler's gang tracker and the victim search both run.

A CompositePodGroup places its children in order inside one domain of its own topology (the
domain its placed pods hold, else each domain whose free GPUs could hold its waiting pods,
tightest first); a PodGroup (a leaf) is placed by the caller (`TreeSide.place_leaf`), as its own
gang, inside what the levels above allow. Unless the tree has started (`keep`), what a level
placed is undone when fewer than `need` of its children are satisfied, and the next domain is
tried.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from agent.objkey import ObjectKey

from .gang import TopologyConstraint, domains_holding, member_domains
from .request import PodRequest
from .snapshot import Snapshot

__all__ = ["Placed", "Tree", "TreeSide", "place_subtree"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Tree:
    """One group of a tree: a PodGroup (`leaf`, `need` its minCount) or a CompositePodGroup
    (`need` its minGroupCount, `children` in kube's order); `topology`: its own constraint (its
    pods, its whole subtree's, in one domain)."""

    key: ObjectKey
    need: int
    children: tuple[Tree, ...] = ()
    leaf: bool = False
    topology: TopologyConstraint | None = None

    def inner_topology(self) -> bool:
        """Whether a group below this one has a topology constraint of its own."""
        return any(c.topology is not None or c.inner_topology() for c in self.children)

    def labels(self) -> set[str]:
        """The topology labels of this group and of every group below it."""
        own = set() if self.topology is None else {self.topology.label}
        return own.union(*(c.labels() for c in self.children))

    def leaves(self) -> list[ObjectKey]:
        """The PodGroups below (or this one), in order."""
        if self.leaf:
            return [self.key]
        return [k for child in self.children for k in child.leaves()]

    def satisfied(self, count: Callable[[ObjectKey], int]) -> bool:
        """Whether the group is satisfied when each PodGroup has `count(key)` pods."""
        if self.leaf:
            return count(self.key) >= self.need
        return sum(1 for c in self.children if c.satisfied(count)) >= self.need

    def minimum(
        self, present: Callable[[ObjectKey], int], held: Callable[[ObjectKey], int]
    ) -> dict[ObjectKey, int] | None:
        """How many more pods of each PodGroup to place for the group to be satisfied, with
        `present(key)` pods existing and `held(key)` of them placed: the first children (in
        order) that can be, those satisfied already first; None when the pods that exist
        cannot satisfy it."""
        if self.leaf:
            if present(self.key) < self.need:
                return None
            return {self.key: max(self.need - held(self.key), 0)}
        options = [c.minimum(present, held) for c in self.children]
        usable = [o for o in options if o is not None]
        usable.sort(key=lambda o: sum(o.values()) > 0)  # stable: order kept within each
        if len(usable) < self.need:
            return None
        chosen: dict[ObjectKey, int] = {}
        for option in usable[: self.need]:
            chosen.update(option)
        return chosen


Placed = tuple[list[T], bool, str]
"""What a walk placed, whether the group is satisfied then, and why pods were left."""


class TreeSide(Protocol[T]):
    """What the walk asks of its caller, who holds the pods and places them (`T`: one placed
    pod, as the caller records it)."""

    @property
    def snapshot(self) -> Snapshot:
        """The nodes the walk reads domains and free GPUs from (the caller's placements made so
        far in the walk assumed on it)."""
        ...

    def held_nodes(self, node: Tree) -> list[str]:
        """The nodes the placed pods of `node`'s PodGroups hold."""
        ...

    def waiting(self, node: Tree) -> list[PodRequest]:
        """The pods of `node`'s PodGroups the walk is to place."""
        ...

    def place_leaf(self, leaf: Tree, allowed: frozenset[str] | None) -> Placed[T]:
        """Place PodGroup `leaf`'s waiting pods within `allowed` (None: anywhere), as its own
        gang, and assume them on `snapshot`."""
        ...

    def undo(self, placed: list[T]) -> None:
        """Take back what the walk placed (no longer assumed on `snapshot`)."""
        ...


def place_subtree(
    node: Tree, side: TreeSide[T], allowed: frozenset[str] | None, *, keep: bool
) -> Placed[T]:
    """Place `node`'s waiting pods within `allowed` (None: anywhere): its children in order,
    in one domain of its topology; unless `keep`, what it placed is undone when too few
    children are satisfied, and the next domain is tried."""
    if node.leaf:
        return side.place_leaf(node, allowed)
    where = _domains(node, side, allowed)
    if isinstance(where, str):
        return [], False, where
    why = ""
    for domain in where:
        placed: list[T] = []
        satisfied = 0
        for child in node.children:
            more, ok, left = place_subtree(child, side, domain, keep=keep)
            placed += more
            satisfied += ok
            why = why or left
        if keep or satisfied >= node.need:
            return placed, satisfied >= node.need, why
        side.undo(placed)
    return [], False, why


def _domains(
    node: Tree, side: TreeSide[T], allowed: frozenset[str] | None
) -> Sequence[frozenset[str] | None] | str:
    """Where `node`'s subtree may go, in the order to try: within `allowed`, the domain of its
    topology its placed pods hold, else each domain that could hold its waiting pods; or why
    nowhere."""
    if node.topology is None:
        return [allowed]
    snapshot = side.snapshot
    inside = member_domains(snapshot, node.topology, side.held_nodes(node))
    if isinstance(inside, str):
        return inside
    if inside == [None]:  # nothing placed yet: each domain that could hold it
        inside = [*domains_holding(snapshot, node.topology.label, side.waiting(node))]
    where = [d if allowed is None else d & allowed for d in inside if d is not None]
    if not where:
        leaves = len(node.leaves())
        return f"no {node.topology.label} domain holds the {leaves} PodGroups below {_name(node)}"
    return where


def _name(node: Tree) -> str:
    return node.key.partition("@")[0]
