"""A waiting pod's claims on a node once some pods are gone: the claim allocator's side of a
victim search (`scheduler.preemption.DeviceFit`; DESIGN §11, §14).

A claim's devices come free when every pod it is reserved for is gone: the resourceclaim
controller drops a deleted pod from `status.reservedFor` and, once that is empty, clears
`status.allocation` and the finalizer (a claim made from a pod's template goes with its pod). The
claim book counts a claim's devices as used until its allocation is removed, as kube-scheduler
does. A search counts them free already when every pod the claim is reserved for is a victim it
takes, or is gone (deleted or finished, its claim not yet deallocated; `alive` holds the UIDs of
the pods and PodGroups that exist and run): the room coming back is never paid for with a
second victim. A claim reserved also for a pod that stays keeps its devices.
A gang's pods (`GangClaimRoom`) are allocated together, as the gang is placed: each pod's
claims with the devices the earlier ones took counted, all within one domain of a required
topology level. A tree's (`TreeClaimRoom`) are allocated PodGroup by PodGroup as the search's
walk places the groups, each with the devices the groups placed before took counted.
Called with `cache.lock` held; one room serves one search.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace

from scheduler.claims.decision import ClaimAllocation, ClaimNode, PodClaims, PodDecision
from scheduler.claims.usage import Usage
from scheduler.runtime.claims.book import ClaimBook

__all__ = ["ClaimRoom", "GangClaimRoom", "Leaving", "Pods", "TreeClaimRoom", "TreeClaimTrial"]

Pods = tuple[Mapping[str, str], AbstractSet[str]]
"""(pod key -> UID of the pods that may be victims, UIDs of the pods and PodGroups alive)."""


class Leaving:
    """The devices in use once some pods are gone, each set of them worked out once."""

    def __init__(self, book: ClaimBook, pods: Callable[[], Pods]) -> None:
        """`pods`: (pod key -> UID of the pods that may be victims, the UIDs of the pods and
        PodGroups that exist and have not finished), asked for when first needed (it reads
        every pod: a pod that waits without searching for victims never pays it)."""
        self._book, self._pods = book, pods
        self._known: Pods | None = None
        self._usages: dict[frozenset[str], Usage] = {}

    def usage(self, gone: frozenset[str]) -> Usage:
        """The claims' usage once the pods `gone` (their keys) are gone."""
        usage = self._usages.get(gone)
        if usage is None:
            if self._known is None:
                self._known = self._pods()
            uids, alive = self._known
            leaving = {uids[key] for key in gone if key in uids}
            freed = self._book.freed_by(leaving, alive)
            usage = self._usages[gone] = self._book.usage_without(freed)
        return usage


class ClaimRoom:
    """`fits(node, gone)`: do the pod's claims fit on `node` once the pods `gone` are gone?"""

    def __init__(
        self,
        book: ClaimBook,
        claims: PodClaims,
        nodes: Callable[[str], ClaimNode],
        leaving: Leaving,
    ) -> None:
        """`claims`: the waiting pod's; `nodes`: a node as claims see it."""
        self._book, self._claims, self._nodes, self._leaving = book, claims, nodes, leaving

    def fits(self, node: str, gone: frozenset[str]) -> bool:
        usage = self._leaving.usage(gone)
        found = self._book.allocator.on_node(self._claims, self._nodes(node), usage)
        return isinstance(found, PodDecision)


class GangClaimRoom:
    """`place(nodes, gone)`: where each of a gang's pods goes (pod key -> node) with their claims
    allocated together on `nodes` once the pods `gone` are gone; None: they do not fit there."""

    def __init__(
        self,
        book: ClaimBook,
        claims: Sequence[PodClaims],
        nodes: Callable[[str], ClaimNode],
        leaving: Leaving,
        domain: Callable[[str], str | None] | None = None,
    ) -> None:
        """`claims`: the pending pods', in the gang's order; `domain`: a node's value of the
        gang's required topology label (None: the gang has no required level)."""
        self._book, self._claims, self._nodes, self._leaving = book, claims, nodes, leaving
        self._domain = domain

    def place(self, nodes: Sequence[str], gone: frozenset[str]) -> Mapping[str, str] | None:
        usage = self._leaving.usage(gone)
        listed = [self._nodes(name) for name in nodes]
        domains: dict[str, list[ClaimNode]] | None = None
        if self._domain is not None:
            domains = {}
            for node in listed:
                value = self._domain(node.name)
                if value is not None:
                    domains.setdefault(value, []).append(node)
        decision = self._book.allocator.place_gang(self._claims, listed, usage, domains=domains)
        if not decision.placed:
            return None
        where = {}
        for pod, made in zip(self._claims, decision.pods, strict=True):
            if made.node is None:
                return None
            where[pod.key] = made.node
        return where


class TreeClaimRoom:
    """`begin(gone)`: a walk's trial (`TreeClaimTrial`) of a tree's pending pods' claims once
    the pods `gone` are gone."""

    def __init__(
        self,
        book: ClaimBook,
        claims: Mapping[str, PodClaims],
        nodes: Callable[[str], ClaimNode],
        leaving: Leaving,
    ) -> None:
        """`claims`: the pending pods', by pod key."""
        self._book, self._claims, self._nodes, self._leaving = book, claims, nodes, leaving

    def begin(self, gone: frozenset[str]) -> TreeClaimTrial:
        usage = self._leaving.usage(gone)
        return TreeClaimTrial(self._book, self._claims, self._nodes, usage)


class TreeClaimTrial:
    """`place(pods, nodes)`: where each of a PodGroup's pods goes with their claims allocated
    together on `nodes`, what the groups placed before in this trial allocated counted (a
    usage of its own, from `base`; a claim one of them allocated is allocated for the next,
    so a claim two groups share is allocated once); `forget(pods)` gives theirs back."""

    def __init__(
        self,
        book: ClaimBook,
        claims: Mapping[str, PodClaims],
        nodes: Callable[[str], ClaimNode],
        base: Usage,
    ) -> None:
        self._book, self._claims, self._nodes, self._base = book, claims, nodes, base
        self._usage = base.copy()
        self._made: dict[str, tuple[ClaimAllocation, ...]] = {}  # by pod key: what it allocated

    def place(self, pods: Sequence[str], nodes: Sequence[str]) -> Mapping[str, str] | None:
        claims = [self._as_allocated(self._claims[key]) for key in pods]
        listed = [self._nodes(name) for name in nodes]
        decision = self._book.allocator.place_gang(claims, listed, self._usage)
        if not decision.placed:
            return None
        where = {}
        for pod, made in zip(claims, decision.pods, strict=True):
            if made.node is None:
                return None
            where[pod.key] = made.node
        for pod, made in zip(claims, decision.pods, strict=True):
            new = tuple(c for c in made.claims if c.new)
            self._made[pod.key] = new
            for allocated in new:
                self._usage.add(allocated.allocation.devices)
        return where

    def forget(self, pods: Sequence[str]) -> None:
        if any([self._made.pop(key, None) is not None for key in pods]):
            self._usage = self._base.copy()
            for made in self._made.values():
                for allocated in made:
                    self._usage.add(allocated.allocation.devices)

    def _as_allocated(self, pod: PodClaims) -> PodClaims:
        """`pod`'s claims, those this trial allocated for an earlier group with that."""
        allocated = {c.claim.key: c.allocation for made in self._made.values() for c in made}
        if not allocated:
            return pod
        claims = tuple(
            c if c.key not in allocated else replace(c, allocation=allocated[c.key])
            for c in pod.claims
        )
        return replace(pod, claims=claims)
