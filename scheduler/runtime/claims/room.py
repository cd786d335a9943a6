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
Called with `cache.lock` held; one `ClaimRoom` serves one search.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet

from scheduler.claims.decision import ClaimNode, PodClaims, PodDecision
from scheduler.claims.usage import Usage
from scheduler.runtime.claims.book import ClaimBook

__all__ = ["ClaimRoom"]


class ClaimRoom:
    """`fits(node, gone)`: do the pod's claims fit on `node` once the pods `gone` are gone?"""

    def __init__(
        self,
        book: ClaimBook,
        claims: PodClaims,
        nodes: Callable[[str], ClaimNode],
        uids: Mapping[str, str],
        alive: AbstractSet[str],
    ) -> None:
        """`claims`: the waiting pod's; `nodes`: a node as claims see it; `uids`: pod key ->
        UID of the pods that may be victims; `alive`: the UIDs of the pods and PodGroups that
        exist and have not finished."""
        self._book, self._claims, self._nodes = book, claims, nodes
        self._uids, self._alive = uids, alive
        self._usages: dict[frozenset[str], Usage] = {}

    def fits(self, node: str, gone: frozenset[str]) -> bool:
        usage = self._usages.get(gone)
        if usage is None:
            leaving = {self._uids[key] for key in gone if key in self._uids}
            freed = self._book.freed_by(leaving, self._alive)
            usage = self._usages[gone] = self._book.usage_without(freed)
        found = self._book.allocator.on_node(self._claims, self._nodes(node), usage)
        return isinstance(found, PodDecision)
