"""A pod with ResourceClaims decided on the live cache: placement filters the nodes for the pod's
other resources, the claim allocator chooses among those, and the GPUs its claims take are what
the pod is charged (CLAIMS.md steps 4 and 6).

`decide_claims` answers a `ClaimPlacement` (the node, the assignment charged there, the request
with the claims' GPUs, the claims' decision) or the message the pod waits with: the claims'
reasons (claim, request and nearest miss) or placement's when no node fits the rest.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace

from scheduler.claims.decision import ClaimNode, PodDecision
from scheduler.placement import Assignment, Placer, PodRequest
from scheduler.runtime.claims.book import ClaimBook
from scheduler.runtime.cluster.cache import ClusterCache
from scheduler.runtime.cluster.podinfo import PodInfo

__all__ = ["ClaimPlacement", "decide_claims"]

_SHOWN = 3  # the nearest misses a waiting pod's message names


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimPlacement:
    """`request`: the pod's own, with the GPUs its claims take (`original`: as read)."""

    original: PodRequest
    request: PodRequest
    assignment: Assignment
    decision: PodDecision


def decide_claims(
    book: ClaimBook,
    cache: ClusterCache,
    placer: Placer,
    info: PodInfo,
    excluded: AbstractSet[str] | None,
) -> ClaimPlacement | str:
    claims = book.pod_claims(info.key, info.obj)
    if isinstance(claims, str):
        return claims
    feasible = [n for n in placer.feasible(info.request) if not excluded or n not in excluded]
    if not feasible:
        return placer.decide(info.request, excluded=excluded).message()
    nodes = [_claim_node(book, cache, name) for name in feasible]
    decision = book.allocator.place(claims, nodes, book.usage())
    if decision.node is None:
        shown = "; ".join(decision.reasons[:_SHOWN])
        more = len(decision.reasons) - _SHOWN
        tail = f" (and {more} more)" if more > 0 else ""
        return f"0/{len(cache.nodes)} nodes are available: claims do not fit: {shown}{tail}"
    base = placer.assignment_on(info.request, decision.node)
    if base is None:  # placement said it fits there a moment ago, on the same snapshot
        return f"pod {info.key} no longer fits node {decision.node}"
    gpus = tuple(sorted({*base.gpus, *decision.gpus}))
    return ClaimPlacement(
        original=info.request,
        request=replace(info.request, gpus=len(gpus)),
        assignment=replace(base, gpus=gpus),
        decision=decision,
    )


def _claim_node(book: ClaimBook, cache: ClusterCache, name: str) -> ClaimNode:
    node = cache.nodes.get(name)
    nrt = cache.nrts.get(name)
    return book.node(
        name,
        node.labels if node is not None else {},
        None if nrt is None else nrt.inventory,
        cache.snapshot.node(name) if name in cache.snapshot else None,
    )
