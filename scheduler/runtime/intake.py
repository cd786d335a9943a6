"""The scheduler's watch intake (`scheduler.kubeapi.informer.Sink`): each list and event of pods,
nodes, NRTs, PodGroups (ours and scheduling.k8s.io's), Queues, ElasticQuotas and PDBs goes into
the cache and the scheduling queue under `cache.lock`, and wakes the units it may let start;
DeviceClasses, ResourceSlices and ResourceClaims go into the claim book.

Pods are read (`read_pod`) before the lock is taken, so one informer's reading never holds up
another's. A change that may free room (a pod gone or moved, a node or NRT changed) tries every
unschedulable unit again, once per list (`_room_changed`). The scheduling cycle itself is
`scheduler.runtime.loop`; the two share the pending reasons (`reasons`: pod key -> why it waits),
which the intake drops when a pod stops waiting. The scoring hears of every pod that starts or
stops waiting (`Scoring.queued`, `Scoring.dequeued`: a learning score may count the queue as the
demand to come), as the simulator tells it of its own queue.

The first list of pods after a start holds every pod waiting for this scheduler (thousands, after
a restart or a failover), and reading them is most of a start's work. None of them takes room, so
scheduling need not wait for them: `replace` applies every other pod (bound, nominated, another
scheduler's) and returns the waiting ones as later steps (`Later`), in the order the queue would
take them (priority, then age), `FIRST_BATCH` then `BATCH` pods each. The informer counts as
synced once the rest is in and runs the steps after, before it watches; the loop meanwhile
starts on the first pods (the queue takes the best present; later ones are no better).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from functools import partial
from itertools import pairwise
from typing import Any, TypeVar

from agent.objkey import ObjectKey, key_of, split_key
from scheduler.claims.extended import extended_ask
from scheduler.kubeapi.decode import Listed
from scheduler.placement import Scoring
from scheduler.runtime.binding.sharebind import ShareBinding
from scheduler.runtime.claims.book import CLASSES, ClaimBook
from scheduler.runtime.claims.book import KINDS as CLAIM_KINDS
from scheduler.runtime.claims.extended import made_key, with_extended_claim
from scheduler.runtime.claims.podrefs import has_claims
from scheduler.runtime.cluster.cache import (
    COMPOSITES,
    UPSTREAM_PODGROUPS,
    WORKLOADS,
    ClusterCache,
)
from scheduler.runtime.cluster.podinfo import (
    PodInfo,
    admission_rejection,
    placement_inputs_equal,
    read_pod,
)
from scheduler.runtime.cluster.queuebook import ELASTIC_QUOTAS, QUEUES
from scheduler.runtime.gangs.tracker import GangTracker
from scheduler.runtime.metrics import SchedulerMetrics
from scheduler.runtime.pending import SchedulingQueue, UnitKey, UnitKind
from scheduler.runtime.preempting.nominating import Preemption
from scheduler.runtime.queues.queueing import QueueGate
from scheduler.runtime.reporter import Reporter

__all__ = ["BATCH", "FIRST_BATCH", "SHARE_LOCK", "Intake", "Later"]

_T = TypeVar("_T")
Later = Sequence[Callable[[], None]]
"""Steps of a list left for after the sync (the informer runs them before it watches)."""
FIRST_BATCH, BATCH = 256, 1024
"""Waiting pods of a first list read per later step: few in the first, so the loop starts soon."""
_TERMINAL_PHASES = ("Succeeded", "Failed")

SHARE_LOCK = "share-lock"
"""Why a share pod waits when every node that fits is admitting another share."""

PODS, NODES, NRTS, PODGROUPS = "pods", "nodes", "noderesourcetopologies", "podgroups"
PDBS = "poddisruptionbudgets"
NAMESPACES = "namespaces"
_BY_OBJECT_KEY = (PODS, PODGROUPS, UPSTREAM_PODGROUPS, WORKLOADS, COMPOSITES, ELASTIC_QUOTAS)


def _key(kind: str, obj: Mapping[str, Any]) -> str:
    """What `ClusterCache.keys_of(kind)` lists for `obj`: pods and PodGroups by object key,
    nodes and NRTs by name."""
    if kind in _BY_OBJECT_KEY:
        return key_of(obj)
    return str((obj.get("metadata") or {}).get("name") or "")


def _stub(kind: str, key: str) -> dict[str, Any]:
    """A deleted object's stand-in (its metadata) for `_key(kind, ...)` == `key`."""
    if kind in _BY_OBJECT_KEY:
        namespace, name = split_key(key)
        return {"metadata": {"namespace": namespace, "name": name}}
    return {"metadata": {"name": key}}


def _waits(obj: Mapping[str, Any], scheduler_name: str) -> bool:
    """Waiting for this scheduler and holding no room: ours, not bound, not nominated, not
    finished or going (what `PodInfo.pending` says, read before the pod is)."""
    spec, meta = obj.get("spec") or {}, obj.get("metadata") or {}
    status = obj.get("status") or {}
    return (
        spec.get("schedulerName") == scheduler_name
        and not spec.get("nodeName")
        and not status.get("nominatedNodeName")
        and status.get("phase") not in _TERMINAL_PHASES
        and not meta.get("deletionTimestamp")
    )


def _queue_order(obj: Mapping[str, Any]) -> tuple[int, str, str]:
    """Higher priority first, then older (RFC 3339 stamps sort as text), then by key."""
    spec, meta = obj.get("spec") or {}, obj.get("metadata") or {}
    priority = spec.get("priority")
    return (
        -priority if isinstance(priority, int) else 0,
        str(meta.get("creationTimestamp") or ""),
        key_of(obj),
    )


def _split_waiting(
    items: list[dict[str, Any]], scheduler_name: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pods that take room or are not ours, and the waiting ones in queue order."""
    rest: list[dict[str, Any]] = []
    waiting: list[dict[str, Any]] = []
    for obj in items:
        (waiting if _waits(obj, scheduler_name) else rest).append(obj)
    waiting.sort(key=_queue_order)
    return rest, waiting


def _split_waiting_in_part(
    items: list[Listed], scheduler_name: str
) -> tuple[list[Listed], list[Listed]]:
    """`_split_waiting` on the objects' heads (`PodHead` holds every field it reads)."""
    rest: list[Listed] = []
    waiting: list[Listed] = []
    for item in items:
        (waiting if _waits(item.head, scheduler_name) else rest).append(item)
    waiting.sort(key=lambda item: _queue_order(item.head))
    return rest, waiting


def _batches(count: int) -> list[tuple[int, int]]:
    """(start, end) of each later step over `count` waiting pods."""
    bounds = [0, *range(FIRST_BATCH, count, BATCH), count] if count else []
    return list(pairwise(bounds))


def _claims_named(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Do `old` and `new` name the same claims made from templates (a change: the pod may be
    placed now)?"""
    field = "resourceClaimStatuses"
    return bool((old.get("status") or {}).get(field) == (new.get("status") or {}).get(field))


class Intake:
    """Lists and events into the cache and the queue (the informers' sink)."""

    def __init__(
        self,
        cache: ClusterCache,
        queue: SchedulingQueue,
        quota: QueueGate,
        gangs: GangTracker,
        preemption: Preemption,
        shares: ShareBinding,
        reporter: Reporter,
        metrics: SchedulerMetrics,
        reasons: MutableMapping[ObjectKey, str],
        claims: ClaimBook,
        scoring: Scoring,
    ) -> None:
        self.cache, self.queue, self._quota, self._gangs = cache, queue, quota, gangs
        self._scoring = scoring
        self._preemption, self._shares, self._reporter = preemption, shares, reporter
        self._metrics, self._reasons, self._claims = metrics, reasons, claims
        self._listing = self._room_freed = False  # within `replace`; room freed meanwhile

    def replace(self, kind: str, items: list[dict[str, Any]]) -> Later:
        """A full list of `kind`: apply every object, delete what is no longer there. Pods are
        read before the lock is taken (as `event` reads them), so the other informers' lists
        go into the cache meanwhile. The first list of pods leaves its waiting pods for the
        steps it returns (module docstring)."""
        if kind == PODS and not self.cache.pods:
            items, waiting = _split_waiting(items, self.cache.scheduler_name)
            return self._replace(kind, items, self._steps(waiting, self._add_waiting))
        return self._replace(kind, items, ())

    def replace_in_part(self, kind: str, items: list[Listed]) -> Later:
        """`replace`, from a list decoded in part: the first list of pods decodes only the pods
        that take room or are not ours whole now, and each waiting one in the step that reads
        it (most of a start's decoding, after the sync)."""
        if kind != PODS or self.cache.pods:
            return self.replace(kind, [item.whole() for item in items])
        rest, waiting = _split_waiting_in_part(items, self.cache.scheduler_name)
        return self._replace(
            kind, [item.whole() for item in rest], self._steps(waiting, self._add_listed)
        )

    @staticmethod
    def _steps(waiting: Sequence[_T], add: Callable[[Sequence[_T]], None]) -> Later:
        return [partial(add, waiting[start:end]) for start, end in _batches(len(waiting))]

    def _replace(self, kind: str, items: list[dict[str, Any]], later: Later) -> Later:
        reads: list[PodInfo | None] = [None] * len(items)
        if kind == PODS:
            pods, name, memo = self.cache.pods, self.cache.scheduler_name, self.cache.requests
            reads = [read_pod(o, name, pods.get(key_of(o)) if pods else None, memo) for o in items]
        with self.cache.lock, self.queue.batch():
            if kind in (QUEUES, ELASTIC_QUOTAS):  # one tree rebuild for the whole list
                if self._quota.on_queue(kind, "ADDED", None, items):
                    self._requeue_all()
                return later
            if kind == PDBS:
                self.cache.budgets.replace(items, self.cache.pods.values())
                return later
            if kind == NAMESPACES:
                if self.cache.replace_namespaces(items):
                    self._room_changed()  # a namespaceSelector may pick other pods now
                return later
            if kind in CLAIM_KINDS:
                self._claims.replace(kind, items)
                self._recharge_claim_pods()
                if kind == CLASSES:
                    self._reread_extended()
                self.queue.move_all_to_active()
                return later
            self._listed(lambda: self._apply_list(kind, items, reads))
        return later

    def _add_listed(self, listed: Sequence[Listed]) -> None:
        """A later step of a first pod list decoded in part: these waiting pods, whole."""
        self._add_waiting([item.whole() for item in listed])

    def _add_waiting(self, objs: Sequence[dict[str, Any]]) -> None:
        """A later step of the first pod list: these waiting pods, as if listed with the rest."""
        name, memo = self.cache.scheduler_name, self.cache.requests
        reads = [read_pod(o, name, None, memo) for o in objs]

        def apply() -> None:
            for obj, read in zip(objs, reads, strict=True):
                self._apply(PODS, "ADDED", obj, read)

        with self.cache.lock, self.queue.batch():
            self._listed(apply)

    def _listed(self, apply: Callable[[], object]) -> None:
        """`apply` (under the lock) with room freed meanwhile answered once, after it."""
        self._listing = True
        try:
            apply()
        finally:
            self._listing = False
            if self._room_freed:
                self._room_freed = False
                self.queue.move_all_to_active()

    def _apply_list(
        self, kind: str, items: list[dict[str, Any]], reads: list[PodInfo | None]
    ) -> None:
        before = set(self.cache.keys_of(kind))
        seen = set()
        for obj, read in zip(items, reads, strict=True):
            self._apply(kind, "ADDED", obj, read)
            seen.add(_key(kind, obj) if read is None else read.key)
        for key in before - seen:
            self._apply(kind, "DELETED", _stub(kind, key))

    def _room_changed(self) -> None:
        """Room may have been freed: every unschedulable unit is tried again; once per list
        (each move walks every unit: once per object of a list of thousands was quadratic)."""
        if self._listing:
            self._room_freed = True
        else:
            self.queue.move_all_to_active()

    def event(self, kind: str, etype: str, obj: dict[str, Any]) -> None:
        read = None
        if kind == PODS and etype != "DELETED":
            # Only this informer's thread replaces pod entries, so the entry read without the
            # lock is the pod as last read (its request and object are never changed in place).
            previous = self.cache.pods.get(key_of(obj))
            read = read_pod(obj, self.cache.scheduler_name, previous, self.cache.requests)
        with self.cache.lock:
            self._apply(kind, etype, obj, read)

    def _apply(
        self, kind: str, etype: str, obj: Mapping[str, Any], read: PodInfo | None = None
    ) -> None:
        if kind == PODS:
            if read is not None:
                read = self._claims_charged(with_extended_claim(read, self._claims, self.cache))
            else:
                self._claims.unmake(made_key(*split_key(key_of(obj))))
            self._on_pod(etype, obj, read)
        elif kind == NODES:
            self._on_node(etype, obj)
        elif kind == NRTS:
            self._on_nrt(etype, obj)
        elif kind in (PODGROUPS, UPSTREAM_PODGROUPS):
            self._gangs.on_group(etype, obj, upstream=kind == UPSTREAM_PODGROUPS)
        elif kind == WORKLOADS:
            self._gangs.on_workload(etype, obj)
        elif kind == COMPOSITES:
            self._gangs.on_composite(etype, obj)
        elif kind in (QUEUES, ELASTIC_QUOTAS) and self._quota.on_queue(kind, etype, obj):
            self._requeue_all()
        elif kind == PDBS:
            self.cache.budgets.apply(etype, obj, self.cache.pods.values())
        elif (kind == NAMESPACES and self.cache.namespace_event(etype, obj)) or (
            kind in CLAIM_KINDS and self._claims.apply(kind, etype, obj)
        ):
            if kind == CLASSES:
                self._reread_extended()
            self._room_changed()

    def _share_holder_changed(self, key: ObjectKey, info: PodInfo | None) -> None:
        """A share lock this scheduler knew held is over: its waiters are tried again now."""
        if self._shares.pod_changed(key, info):
            waiting = [k for k, reason in self._reasons.items() if reason == SHARE_LOCK]
            self.queue.activate(UnitKey(UnitKind.POD, k) for k in waiting)

    def _tell_scoring(self, key: ObjectKey, old: PodInfo | None, info: PodInfo | None) -> None:
        """Whether the pod of `key` waits for this scheduler now (`info`: None when gone), and
        a pod of ours first seen bound (placed before this scheduler started or took over,
        or by another replica) as history for the learning scores."""
        if info is not None and info.pending and not info.gated:
            self._scoring.queued(info.request)
            return
        self._scoring.dequeued(key)
        if (
            info is not None
            and info.ours
            and info.counted
            and not info.assumed
            and info.error is None
            and (old is None or old.node is None)
        ):
            self._scoring.seen(info.request)

    def _on_pod(self, etype: str, obj: Mapping[str, Any], read: PodInfo | None) -> None:
        if etype == "DELETED":
            key = key_of(obj)
            old, new = self.cache.delete_pod(key), None
        else:
            old, new = self.cache.upsert_pod(obj, read)
            key = new.key
        if new is None or not new.pending:
            self._reasons.pop(key, None)
        self._tell_scoring(key, old, new)
        self._share_holder_changed(key, new)
        if new is None and old is not None:
            self._reporter.forget(old.obj)
        if old is not None and not old.terminal and (new is None or new.terminal):
            self._preemption.pod_gone(old)
            rejected = None if new is None or not new.ours else admission_rejection(new.obj)
            if rejected is not None:
                self._metrics.admission_rejections.labels(reason=rejected).inc()
        if (
            old is not None
            and old.counted
            and (new is None or not new.counted or new.node != old.node)
        ):
            self._room_changed()
        info = new or old
        if info is None:
            return
        fresh = new is not None and new.pending and not new.gated
        if new is not None and old is not None and old.pending and not old.gated:
            # else a status update: nothing new to try
            fresh = fresh and not (
                placement_inputs_equal(old.obj, new.obj) and _claims_named(old.obj, new.obj)
            )
        if info.group is not None:
            self._gangs.on_member(info, fresh)
            return
        unit = UnitKey(UnitKind.POD, info.key)
        if fresh and new is not None:
            self.queue.add(unit, new.request.priority, new.created, self.cache.leaf_of(new)[0])
        elif new is None or not new.pending or new.gated:
            self.queue.remove(unit)

    def _claims_charged(self, info: PodInfo) -> PodInfo:
        """A bound pod of ours with claims, charged what they hold: their whole GPUs (its
        request as read asks none; a pod this scheduler placed carries them over from its
        decision) and their shares of shared GPUs (`claim_shares`, DESIGN §12's charge)."""
        if info.node is None or not info.ours or not has_claims(info.obj):
            return info
        held = self._claims.charge(info.obj)
        gpus = max(info.request.gpus, len(held.gpus))
        if gpus == info.request.gpus and held.shares == info.claim_shares:
            return info
        request = info.request
        if gpus != request.gpus:
            request = dataclasses.replace(request, gpus=gpus)
        return dataclasses.replace(info, request=request, claim_shares=held.shares)

    def _recharge_claim_pods(self) -> None:
        """Claims listed: bound pods of ours read before them are charged their GPUs and
        shares now."""
        for info in list(self.cache.pods.values()):
            charged = self._claims_charged(info)
            if charged is not info:
                self.cache.upsert_pod(info.obj, charged)

    def _reread_extended(self) -> None:
        """DeviceClasses changed: the extended resources they map may change what waiting pods
        of ours ask (`with_extended_claim`), read again from the pods as the API has them."""
        mapped = self._claims.extended
        for info in [i for i in self.cache.pods.values() if i.ours and i.pending]:
            made = self._claims.made(made_key(info.namespace, info.name))
            if made is None and extended_ask(info.obj, mapped) is None:
                continue  # asks nothing a class maps (most pods: not read again)
            raw = info.obj if made is None else made.pod
            again = with_extended_claim(self.cache.read_pod(raw), self._claims, self.cache)
            if again.obj is not info.obj or again.dra_form or info.dra_form or info.plugin_form:
                self._on_pod("MODIFIED", again.obj, again)  # a form may have changed

    def _requeue_all(self) -> None:
        """The queue tree changed: every waiting unit goes to its (maybe new) leaf and is tried,
        in one batch, so the loop pops the highest of them first and not whichever came first."""
        with self.queue.batch():
            for info in list(self.cache.pods.values()):
                if not info.pending or info.gated:
                    continue
                if info.group is not None:
                    self._gangs.on_member(info, True)
                else:
                    unit = UnitKey(UnitKind.POD, info.key)
                    self.queue.add(
                        unit, info.request.priority, info.created, self.cache.leaf_of(info)[0]
                    )
            self.queue.move_all_to_active()

    def _on_node(self, etype: str, obj: Mapping[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name") or "")
        if etype == "DELETED":
            self.cache.delete_node(name)
            return
        changed, problem = self.cache.upsert_node(obj)
        if problem:
            self._reporter.warn(obj, "Node", "InvalidNode", problem)
        if changed:
            self._room_changed()

    def _on_nrt(self, etype: str, obj: Mapping[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name") or "")
        if etype == "DELETED":
            self.cache.delete_nrt(name)
        elif problem := self.cache.upsert_nrt(obj):
            self._reporter.warn(obj, "NodeResourceTopology", "InvalidNodeResourceTopology", problem)
        self._room_changed()
