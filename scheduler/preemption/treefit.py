"""A tree of pod groups (U's `TreeDemand`) placed on an area's clones, by the walk the scheduler's
gang tracker runs (`place_subtree`): each PodGroup's pods of U together as a gang
(`place_gang`, its own topology), each CompositePodGroup's children in one domain of its
topology, kept only when the root is satisfied, all within the area. What the walk places is
assumed on the clones while it runs, and taken back before `place_tree` returns.

A group's domain is read from the nodes its placed pods hold, so the clones hold those nodes
too (`search`), in the area or not. When U's pods have devices decided apart (their claims,
`TreeDemand.devices`), a PodGroup's pods are placed as the scheduler places a gang of claims:
on the nodes where each fits the rest of its request, the devices choose each pod's node (the
devices the groups placed before took counted), and each pod takes the rest there.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.placement import (
    Assignment,
    Placer,
    PodRequest,
    Snapshot,
    Tree,
    excluding_outside,
    member_domains,
    place_gang,
    place_subtree,
)

from .model import Preemptor, TreeDemand, TreeDeviceTrial

__all__ = ["place_tree"]

Taken = list[tuple[PodRequest, Assignment]]


def place_tree(
    preemptor: Preemptor,
    demand: TreeDemand,
    placer: Placer,
    area: frozenset[str],
    gone: frozenset[str] = frozenset(),
) -> Taken | None:
    """Where U's pods go on `area` (nothing left assumed), or None when the walk cannot
    satisfy the tree's root there; `gone`: the pods (keys) taken out, whose devices are free."""
    trial = None if demand.devices is None else demand.devices.begin(gone)
    walk = _AreaWalk(preemptor, demand, placer, trial)
    placed, satisfied, _ = place_subtree(demand.tree, walk, area, keep=False)
    walk.undo(placed)
    return placed if satisfied else None


class _AreaWalk:
    """`place_subtree`'s `TreeSide` on the clones: U's pods of each PodGroup."""

    def __init__(
        self,
        preemptor: Preemptor,
        demand: TreeDemand,
        placer: Placer,
        trial: TreeDeviceTrial | None,
    ) -> None:
        self._preemptor, self._demand, self._placer = preemptor, demand, placer
        self._trial = trial

    @property
    def snapshot(self) -> Snapshot:
        return self._placer.snapshot

    def held_nodes(self, node: Tree) -> list[str]:
        return [n for key in node.leaves() for n in self._demand.held.get(key, ())]

    def waiting(self, node: Tree) -> list[PodRequest]:
        keys = set(node.leaves())
        return [p for p in self._preemptor.pods if self._demand.groups.get(p.key) in keys]

    def place_leaf(self, leaf: Tree, allowed: frozenset[str] | None) -> tuple[Taken, bool, str]:
        pods = self.waiting(leaf)
        held = self._demand.held.get(leaf.key, ())
        if len(held) + len(pods) < leaf.need or not pods:
            return [], len(held) >= leaf.need, ""
        confined = member_domains(self.snapshot, leaf.topology, held)
        if isinstance(confined, str):
            return [], False, confined
        why = ""
        for domain in confined:
            placed, why = self._together(pods, leaf, _within(domain, allowed))
            if placed:
                return placed, True, ""
        return [], False, why

    def undo(self, placed: Taken) -> None:
        for pod, _ in placed:
            self.snapshot.forget(pod.key)
        if self._trial is not None and placed:
            self._trial.forget([pod.key for pod, _ in placed])

    def _together(
        self, pods: Sequence[PodRequest], leaf: Tree, allowed: frozenset[str] | None
    ) -> tuple[Taken, str]:
        """`pods` placed as one gang within `allowed` and assumed, or none and why."""
        if self._trial is not None:
            return self._with_devices(self._trial, pods, leaf, allowed)
        result = place_gang(
            pods,
            self._placer,
            topology=leaf.topology,
            excluded=excluding_outside(self.snapshot, None, allowed),
            prefer_clique=self._preemptor.prefer_clique,
            reasons=False,
        )
        if not result.ok:
            return [], result.reason
        placed = [(pod, result.assignments[pod.key]) for pod in pods]
        for pod, assignment in placed:
            self.snapshot.assume(pod, assignment)
        return placed, ""

    def _with_devices(
        self,
        trial: TreeDeviceTrial,
        pods: Sequence[PodRequest],
        leaf: Tree,
        allowed: frozenset[str] | None,
    ) -> tuple[Taken, str]:
        """`pods` placed with their devices (see the module), or none and why."""
        nodes = set(self.snapshot.names() if allowed is None else allowed)
        for pod in pods:
            nodes.intersection_update(self._placer.feasible(pod))
        where = trial.place([pod.key for pod in pods], sorted(nodes)) if nodes else None
        if where is None:
            return [], f"the devices of {leaf.key}'s pods fit no node there"
        placed: Taken = []
        for pod in pods:
            node = where.get(pod.key)
            assignment = None if node is None else self._placer.assignment_on(pod, node)
            if assignment is None:
                self.undo(placed)
                trial.forget([p.key for p in pods[len(placed) :]])
                return [], f"pod {pod.key} no longer fits node {node}"
            self.snapshot.assume(pod, assignment)
            placed.append((pod, assignment))
        return placed, ""


def _within(domain: frozenset[str] | None, allowed: frozenset[str] | None) -> frozenset[str] | None:
    if domain is None:
        return allowed
    return domain if allowed is None else domain & allowed
