"""Binding a share pod (DESIGN §12): the node's share lock (whose Lease names the pod and gives
each share container its GPU, memory and compute: what the agent serves), the
`gputopo.io/gpus` annotation (for people and tools), then the bind; and which nodes' locks this
scheduler knows are held.

A share pod is bound only under its node's lock, so the agent's Allocate knows whose annotation
names the GPU. A lock held for another pod is not a reason to wait: the decision leaves that node
out and takes the next best (`decide`); only when every node that fits is locked does the pod wait,
and it is retried after a short backoff, not after the unschedulable flush. A failed annotation
or bind releases the lock at once. A hold is known from the locks this scheduler took or found
taken, and from each decision that places a share (the node is reserved until its bind has
taken the lock or failed, so two share pods never race for one node's Lease); a hold is
dropped when the holder pod's shares are allocated (`gputopo.io/allocated`), when
it ends or is deleted, or when the lock expires, so the next try reads the Lease again. Pods that
place no shares never look at locks.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet

from agent.model import GpuUuid
from agent.nrt import DecodedTopology
from agent.objkey import ObjectKey
from agent.shares import ALLOCATED_ANNOTATION, GPUS_ANNOTATION, LeaseShare, encode_gpus
from scheduler.errors import ApiError
from scheduler.kubeapi.sharelock import Holder, ShareLocks
from scheduler.placement import Assignment, Placer, PodRequest
from scheduler.placement.pick import Decision
from scheduler.runtime.cluster.podinfo import PodInfo

log = logging.getLogger(__name__)

__all__ = ["LOCKED", "ShareBinding"]

LOCKED = "locked"
"""The bind outcome when the node's share lock is held for another pod."""

RECHECK = 0.5
"""Seconds a lock still naming a holder known allocated counts as held before it is read again."""
_FINISHED_KEPT = 1024

Annotate = Callable[[str, str, str, Mapping[str, str]], None]  # namespace, name, uid, annotations


def lease_shares(assignment: Assignment, uuids: Sequence[str]) -> dict[str, LeaseShare] | None:
    """What the share Lease gives each share container of `assignment`: its GPU (`uuids` by
    index), the memory charged and the compute asked; None when a GPU index is unknown."""
    if any(s.gpu >= len(uuids) for s in assignment.shares):
        return None
    return {
        s.container: LeaseShare(
            gpu=GpuUuid(uuids[s.gpu]),
            memory_bytes=max(1, s.memory),
            compute_percent=s.compute or None,
        )
        for s in assignment.shares
    }


class ShareBinding:
    """Share locks around share pods' binds (thread-safe: binds run on a pool)."""

    def __init__(
        self, locks: ShareLocks, annotate: Annotate, wall: Callable[[], float], seconds: int
    ) -> None:
        self._locks, self._annotate, self._wall, self._seconds = locks, annotate, wall, seconds
        self._held: dict[str, Holder] = {}
        self._by_pod: dict[str, str] = {}  # holder pod key -> node
        # UIDs of holders seen allocated or gone, whose Lease the agent is releasing (newest last)
        self._finished: dict[str, None] = {}
        self._mutex = threading.Lock()

    def blocked(self) -> frozenset[str]:
        """Nodes whose share lock is known held now."""
        now = self._wall()
        with self._mutex:
            for node in [n for n, h in self._held.items() if h.until < now]:
                self._drop(node)
            return frozenset(self._held)

    def decide(
        self,
        placer: Placer,
        request: PodRequest,
        decision: Decision,
        excluded: AbstractSet[str] | None,
    ) -> tuple[Decision, str | None]:
        """`decision` again without locked nodes when it places shares on one; the message
        naming the locks when every node that fits is locked (None otherwise)."""
        chosen = decision.assignment
        if chosen is None or not chosen.shares:
            return decision, None
        blocked = self.blocked()
        if chosen.node not in blocked:
            self._reserve(chosen.node, request)
            return decision, None
        again = placer.decide(request, excluded=blocked | (excluded or frozenset()))
        if again.assignment is not None:
            self._reserve(again.assignment.node, request)
            return again, None
        with self._mutex:
            holders = sorted({self._held[n].pod or "?" for n in blocked if n in self._held})
        return again, (
            f"{len(blocked)} node(s) where the pod fits are admitting a share (share lock held "
            f"by {', '.join(holders)}); trying again shortly"
        )

    def bind(
        self,
        info: PodInfo,
        assignment: Assignment,
        nrt: DecodedTopology | None,
        try_bind: Callable[[], str],
    ) -> str:
        """Lock, annotate (GPU UUIDs from the node's `nrt`), bind; the outcome (`LOCKED`, or
        `try_bind`'s, or "error")."""
        node = assignment.node
        uuids = [str(g.uuid) for g in nrt.inventory.gpus] if nrt is not None else []
        given = lease_shares(assignment, uuids)
        if given is None:
            log.warning("share pod %s: %s has no NRT naming its GPUs", info.key, node)
            self._forget(node, info)
            return "error"
        try:
            holder = self._locks.acquire(node, info.uid, info.key, given)
        except ApiError as exc:
            log.warning("share pod %s: the share lock of %s: %s", info.key, node, exc)
            self._forget(node, info)
            return "error"
        if holder is not None:
            if holder.uid in self._finished:  # allocated: the agent's release is on its way
                holder = Holder(holder.uid, holder.pod, min(holder.until, self._wall() + RECHECK))
            self._hold(node, holder)  # another pod's: this pod's reservation goes
            log.info("share pod %s: %s is locked by %s", info.key, node, holder.pod or "?")
            return LOCKED
        self._hold(node, Holder(info.uid, info.key, self._wall() + self._seconds))
        try:
            chosen = {c: str(s.gpu) for c, s in given.items()}
            annotation = {GPUS_ANNOTATION: encode_gpus(chosen)}  # for people and tools
            self._annotate(info.namespace, info.name, info.uid, annotation)
        except ApiError as exc:
            log.warning("share pod %s: annotate for %s failed: %s", info.key, node, exc)
            self._release(node, info)
            return "error"
        outcome = try_bind()
        if outcome != "bound":
            self._release(node, info)
        return outcome

    def _reserve(self, node: str, request: PodRequest) -> None:
        """The node is this scheduler's to lock for `request` from its decision on: the next
        share pod's decision leaves it out instead of racing this one's bind for the Lease.
        `bind` replaces the reservation by the lock (or drops it when the lock is refused)."""
        self._hold(node, Holder("", str(request.key), self._wall() + self._seconds))

    def pod_changed(self, key: ObjectKey, info: PodInfo | None) -> bool:
        """A pod changed or went (`info` None): a holder that is allocated or gone lets its
        node be tried again (the agent releases, or the lock expires). True when it did, so
        the share pods waiting for a lock are tried again at once."""
        with self._mutex:
            node = self._by_pod.get(key)
            if node is None:
                return False
            done = info is None or info.terminal or info.terminating
            allocated = info is not None and ALLOCATED_ANNOTATION in (
                (info.obj.get("metadata") or {}).get("annotations") or {}
            )
            if done or allocated:
                self._finish(node)
                return True
            return False

    def _release(self, node: str, info: PodInfo) -> None:
        self._locks.release(node, info.uid)
        self._forget(node, info)

    def _forget(self, node: str, info: PodInfo) -> None:
        """Drop this pod's hold (or reservation) on `node`, if it is still the one known."""
        with self._mutex:
            if self._by_pod.get(info.key) == node:
                self._drop(node)

    def _hold(self, node: str, holder: Holder) -> None:
        with self._mutex:
            self._drop(node)
            self._held[node] = holder
            if holder.pod:
                self._by_pod[holder.pod] = node

    def _finish(self, node: str) -> None:
        """The holder on `node` is allocated or gone: drop it and remember its UID, since the
        Lease may still name it for a moment (the agent records the pod, then releases)."""
        gone = self._held.get(node)
        if gone is not None and gone.uid:
            self._finished[gone.uid] = None
            while len(self._finished) > _FINISHED_KEPT:
                del self._finished[next(iter(self._finished))]
        self._drop(node)

    def _drop(self, node: str) -> None:
        gone = self._held.pop(node, None)
        if gone is not None and self._by_pod.get(gone.pod) == node:
            del self._by_pod[gone.pod]
