"""The scheduling loop: watch intake, one unit per cycle (a pod or a gang), parallel binding.

Intake (informer threads) updates the cache and the queue under `cache.lock`. A cycle pops one
unit, decides under the lock with a `Placer` bound to the live snapshot, assumes what it placed,
and hands the binds to a thread pool, so the next cycle starts at once.

Gangs (DESIGN §7): a PodGroup's pending members are placed together, on one snapshot, once
bound + pending reach `minMember`; only if every one fits are they assumed and bound (in
parallel). Nothing is reserved while a gang waits. A failed bind is retried on the same node, then
the member is forgotten and the gang re-placed, until `scheduleTimeoutSeconds` after its first
bind; then the group gets the event `GangPartiallyBound` and phase `Failed` (see `gangs`).

A unit refused for capacity or a queue's max goes to `nominating.Preemption` (DESIGN §11), which
may evict for it and keeps the nodes held for nominated units out of other units' placement.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from agent.objkey import ObjectKey, key_of, split_key
from agent.shares import DEFAULT_SHARE_LOCK_NAMESPACE, DEFAULT_SHARE_LOCK_SECONDS
from scheduler.errors import ApiError, ConflictError
from scheduler.kubeapi.client import KubeClient
from scheduler.kubeapi.leader import Fence
from scheduler.kubeapi.sharelock import ShareLocks
from scheduler.placement import Assignment, Placer, Scoring
from scheduler.preemption import PreemptionSettings
from scheduler.quota.modelfilter import assigned
from scheduler.runtime.cache import ClusterCache
from scheduler.runtime.gangs import GangTracker
from scheduler.runtime.metrics import SchedulerMetrics
from scheduler.runtime.nominating import Preemption
from scheduler.runtime.pending import SchedulingQueue, UnitKey, UnitKind
from scheduler.runtime.podinfo import (
    PodInfo,
    admission_rejection,
    placement_inputs_equal,
    read_pod,
)
from scheduler.runtime.queuebook import ELASTIC_QUOTAS, QUEUES
from scheduler.runtime.queueing import CATEGORY as QUEUE_CATEGORY
from scheduler.runtime.queueing import QueueGate
from scheduler.runtime.reporter import Reporter
from scheduler.runtime.sharebind import ShareBinding
from scheduler.runtime.volumes import VolumeCheck

log = logging.getLogger(__name__)

SHARE_LOCK = "share-lock"
"""Why a share pod waits when every node that fits is admitting another share."""

PODS, NODES, NRTS, PODGROUPS = "pods", "nodes", "noderesourcetopologies", "podgroups"
PDBS = "poddisruptionbudgets"


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopSettings:
    bind_workers: int = 16
    bind_retries: int = 1  # same-node retries before the pod is re-placed
    idle_wait: float = 0.5
    storage_class_ttl: float = 30.0
    queue_status_period: float = 2.0  # Queue status written at most this often (on change)
    share_lock_namespace: str = DEFAULT_SHARE_LOCK_NAMESPACE  # where share Leases live
    share_lock_seconds: int = DEFAULT_SHARE_LOCK_SECONDS


def _key(kind: str, obj: Mapping[str, Any]) -> str:
    """What `ClusterCache.keys_of(kind)` lists for `obj`: pods and PodGroups by object key,
    nodes and NRTs by name."""
    if kind in (PODS, PODGROUPS, ELASTIC_QUOTAS):
        return key_of(obj)
    return str((obj.get("metadata") or {}).get("name") or "")


def _stub(kind: str, key: str) -> dict[str, Any]:
    """A deleted object's stand-in (its metadata) for `_key(kind, ...)` == `key`."""
    if kind in (PODS, PODGROUPS, ELASTIC_QUOTAS):
        namespace, name = split_key(key)
        return {"metadata": {"namespace": namespace, "name": name}}
    return {"metadata": {"name": key}}


class Scheduler:
    def __init__(
        self,
        kube: KubeClient,
        cache: ClusterCache,
        queue: SchedulingQueue,
        scoring: Scoring,
        metrics: SchedulerMetrics,
        reporter: Reporter,
        fence: Fence,
        *,
        clock: Callable[[], float] = time.monotonic,
        settings: LoopSettings | None = None,
        preemption: PreemptionSettings | None = None,
    ) -> None:
        self._kube, self.cache, self.queue, self._scoring = kube, cache, queue, scoring
        self._metrics, self._reporter, self._fence, self._clock = metrics, reporter, fence, clock
        self._settings = settings or LoopSettings()
        self._wake = threading.Event()  # ends a standby's idle wait (`wake`)
        self._binder = ThreadPoolExecutor(self._settings.bind_workers, thread_name_prefix="bind")
        self._placer = Placer(cache.snapshot, scoring)
        self._reasons: dict[ObjectKey, str] = {}  # pending pod key -> why it waits (metrics)
        self._listing = self._room_freed = False  # within `replace`; room freed meanwhile
        self.quota = QueueGate(cache, queue, reporter)
        queue.chooser = self.quota.choose
        self.preemption = Preemption(
            cache,
            kube,
            fence,
            reporter,
            metrics,
            preemption or PreemptionSettings(),
            clock,
            queue.move_all_to_active,
        )
        self.gangs = GangTracker(
            cache,
            queue,
            reporter,
            metrics,
            clock,
            self.unschedulable,
            self.precheck,
            self.unfit_may_preempt,
            self._live_placer,
            self.quota,
            self.preemption,
        )
        self._volumes = VolumeCheck(kube, clock, self._settings.storage_class_ttl)
        seconds = self._settings.share_lock_seconds
        locks = ShareLocks(kube, self._settings.share_lock_namespace, seconds, time.time)
        self.shares = ShareBinding(locks, kube.annotate_pod, time.time, seconds)

    # -- intake (scheduler.kubeapi.informer.Sink) --------------------------------------------------
    def replace(self, kind: str, items: list[dict[str, Any]]) -> None:
        """A full list of `kind`: apply every object, delete what is no longer there. Pods are
        read before the lock is taken (as `event` reads them), so the other informers' lists
        go into the cache meanwhile."""
        reads: list[PodInfo | None] = [None] * len(items)
        if kind == PODS:
            pods, name, memo = self.cache.pods, self.cache.scheduler_name, self.cache.requests
            reads = [read_pod(o, name, pods.get(key_of(o)) if pods else None, memo) for o in items]
        with self.cache.lock, self.queue.batch():
            if kind in (QUEUES, ELASTIC_QUOTAS):  # one tree rebuild for the whole list
                if self.quota.on_queue(kind, "ADDED", None, items):
                    self._requeue_all()
                return
            if kind == PDBS:
                self.cache.budgets.replace(items, self.cache.pods.values())
                return
            self._listing = True
            try:
                self._apply_list(kind, items, reads)
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
            self._on_pod(etype, obj, read)
        elif kind == NODES:
            self._on_node(etype, obj)
        elif kind == NRTS:
            self._on_nrt(etype, obj)
        elif kind == PODGROUPS:
            self.gangs.on_group(etype, obj)
        elif kind in (QUEUES, ELASTIC_QUOTAS) and self.quota.on_queue(kind, etype, obj):
            self._requeue_all()
        elif kind == PDBS:
            self.cache.budgets.apply(etype, obj, self.cache.pods.values())

    def _share_holder_changed(self, key: ObjectKey, info: PodInfo | None) -> None:
        """A share lock this scheduler knew held is over: its waiters are tried again now."""
        if self.shares.pod_changed(key, info):
            waiting = [k for k, reason in self._reasons.items() if reason == SHARE_LOCK]
            self.queue.activate(UnitKey(UnitKind.POD, k) for k in waiting)

    def _on_pod(self, etype: str, obj: Mapping[str, Any], read: PodInfo | None) -> None:
        if etype == "DELETED":
            key = key_of(obj)
            old, new = self.cache.delete_pod(key), None
        else:
            old, new = self.cache.upsert_pod(obj, read)
            key = new.key
        if new is None or not new.pending:
            self._reasons.pop(key, None)
        self._share_holder_changed(key, new)
        if new is None and old is not None:
            self._reporter.forget(old.obj)
        if old is not None and not old.terminal and (new is None or new.terminal):
            self.preemption.pod_gone(old)
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
            fresh = fresh and not placement_inputs_equal(old.obj, new.obj)
        if info.group is not None:
            self.gangs.on_member(info, fresh)
            return
        unit = UnitKey(UnitKind.POD, info.key)
        if fresh and new is not None:
            self.queue.add(unit, new.request.priority, new.created, self.cache.leaf_of(new)[0])
        elif new is None or not new.pending or new.gated:
            self.queue.remove(unit)

    def _requeue_all(self) -> None:
        """The queue tree changed: every waiting unit goes to its (maybe new) leaf and is tried,
        in one batch, so the loop pops the highest of them first and not whichever came first."""
        with self.queue.batch():
            for info in list(self.cache.pods.values()):
                if not info.pending or info.gated:
                    continue
                if info.group is not None:
                    self.gangs.on_member(info, True)
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

    # -- the loop --------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Schedule until `stop`; only while the fence allows binding (the leader)."""
        last_housekeeping = last_queue_report = 0.0
        leading = False
        while not stop.is_set():
            if not self._fence.may_bind():
                leading = False
                self._wake.wait(self._settings.idle_wait)
                self._wake.clear()
                continue
            if not leading:  # (again) the leader: take over the nominations the API shows
                leading = True
                with self.cache.lock:
                    self.preemption.recover()
            self.schedule_next(self._settings.idle_wait)
            if self._clock() - last_housekeeping >= 1.0:
                last_housekeeping = self._clock()
                with self.cache.lock:
                    self.gangs.check_timeouts()
                    self.preemption.tick(self._live_placer())
            if self._clock() - last_queue_report >= self._settings.queue_status_period:
                last_queue_report = self._clock()
                with self.cache.lock:
                    self.quota.report()

    def wake(self) -> None:
        """End a standby's idle wait now: the lease was taken (its cache is warm, so it binds at
        once instead of at its next idle check), lost, or the loop is stopping."""
        self._wake.set()

    def schedule_next(self, timeout: float) -> bool:
        """Pop and try one unit; False when none came within `timeout`."""
        unit = self.queue.pop(timeout)
        if unit is None:
            return False
        start = self._clock()
        try:
            if unit.kind is UnitKind.GANG:
                result = self.gangs.attempt(unit, self._bind)
            else:
                result = self._attempt_pod(unit)
        except Exception:
            log.exception("scheduling %s failed", unit)
            self.queue.backoff(unit)
            result = "error"
        if result:
            self._metrics.attempts.labels(result=result).inc()
            self._metrics.cycle_seconds.observe(self._clock() - start)
        return True

    def _attempt_pod(self, unit: UnitKey) -> str:
        key = unit.key
        # Volumes may need API reads, so they are checked before taking the lock, on the entry
        # as it is now (a dict read needs no lock); the lock then reads the entry again.
        seen = self.cache.pods.get(key)
        volumes = self._volumes.problem(seen.obj) if seen is not None else None
        with self.cache.lock:
            info = self.cache.pods.get(key)
            if info is None or not info.pending or info.gated:
                self.queue.done(unit)
                return ""
            problem = self.precheck(info) or volumes
            if problem:
                return self._refuse(unit, info, *problem)
            problem = self.quota.problem([info])
            if problem:
                return self._refuse(unit, info, *problem, admitted=False)
            priority = info.request.priority
            held = self.preemption.excluded(unit, priority)
            models = self.quota.model_filter([info])
            excluded = models.excluded(held)
            placer = self._live_placer()
            decision = models.decide(
                held, lambda off: placer.decide(info.request, excluded=off), assigned
            )
            decision, locked = self.shares.decide(
                self._live_placer(), info.request, decision, excluded
            )
            if locked is not None:
                self.unschedulable([info], locked, SHARE_LOCK)
                self.queue.backoff(unit)
                return SHARE_LOCK
            if decision.assignment is None:
                category = QUEUE_CATEGORY if models.nodes else "unschedulable"
                message = models.message(decision, held)
                return self._refuse(unit, info, category, message, admitted=not models.nodes)
            self.cache.assume(key, decision.assignment)
            self.preemption.placed(unit)
        self.queue.done(unit)
        self._bind(unit, [(info, decision.assignment)])
        return "scheduled"

    def _refuse(
        self,
        unit: UnitKey,
        info: PodInfo,
        category: str,
        message: str,
        admitted: bool | None = None,
    ) -> str:
        """The pod waits for `message`. `admitted`: None when nothing in the cluster could
        help it; False when a max on its path refused it, True when no node fits: then it may
        preempt (or get a starvation hold)."""
        if admitted is not None and self.unfit_may_preempt(info, category):
            message = self.preemption.unfit(
                unit, [info], None, message, admitted=admitted, live=self._live_placer()
            )
        self.unschedulable([info], message, category)
        self.queue.unschedulable(unit)
        return "unschedulable"

    def unfit_may_preempt(self, info: PodInfo, category: str) -> bool:
        """A capacity or quota-max refusal (not an invalid, missing or paused queue)."""
        return category != QUEUE_CATEGORY or self.cache.leaf_of(info)[1] is None

    def _live_placer(self) -> Placer:
        """The Placer bound to the cache's live snapshot (bound anew if that object was replaced);
        call it with `cache.lock` held."""
        if self._placer.snapshot is not self.cache.snapshot:
            self._placer = Placer(self.cache.snapshot, self._scoring)
        return self._placer

    def precheck(self, info: PodInfo) -> tuple[str, str] | None:
        """(category, message) for a pod that cannot be placed whatever the cluster looks like."""
        if info.error:
            return "invalid", f"invalid pod: {info.error}"
        if info.request.unsupported:
            return "unsupported", f"unsupported: {info.request.unsupported}"
        return None

    def unschedulable(self, infos: list[PodInfo], message: str, category: str) -> None:
        """Record why `infos` wait: Event + `PodScheduled=False`, and the metrics category."""
        for info in infos:
            self._reasons[info.key] = category
            self._reporter.unschedulable(info.obj, message)

    def pending_reasons(self) -> dict[str, int]:
        """Pending pods of this scheduler by why they wait (for `pending_pods{reason}`)."""
        counts: dict[str, int] = {}
        for reason, _created in self._pending_by_reason():
            counts[reason] = counts.get(reason, 0) + 1
        return counts

    def pending_ages(self, now: float) -> dict[str, float]:
        """The oldest pending pod's age by reason at wall time `now` (`pending_oldest_seconds`)."""
        oldest: dict[str, float] = {}
        for reason, created in self._pending_by_reason():
            oldest[reason] = min(created, oldest.get(reason, created))
        return {reason: max(0.0, now - created) for reason, created in oldest.items()}

    def _pending_by_reason(self) -> list[tuple[str, float]]:
        with self.cache.lock:
            return [
                ("gated" if info.gated else self._reasons.get(info.key, "queued"), info.created)
                for info in self.cache.pods.values()
                if info.pending
            ]

    # -- binding ---------------------------------------------------------------------------
    def _bind(self, unit: UnitKey, binds: list[tuple[PodInfo, Assignment]]) -> None:
        for info, assignment in binds:
            self._binder.submit(self._bind_one, unit, info, assignment)

    def _bind_one(self, unit: UnitKey, info: PodInfo, assignment: Assignment) -> None:
        node, bind = assignment.node, functools.partial(self._try_bind, info, assignment.node)
        nrt = self.cache.nrts.get(node)  # a dict read: its topologies are never changed in place
        outcome = self.shares.bind(info, assignment, nrt, bind) if assignment.shares else bind()
        self._metrics.binds.labels(result=outcome).inc()
        if outcome == "bound":
            self._reporter.scheduled(info.obj, node)
            if unit.kind is UnitKind.GANG:
                self.gangs.bound(unit, info.key)
            return
        with self.cache.lock:
            self.cache.forget(info.key)
            self._reasons[info.key] = "backoff"
            self.queue.retry(unit, info.request.priority, info.created)
            if unit.kind is UnitKind.GANG:
                self.gangs.bind_failed(unit, info.key)

    def _try_bind(self, info: PodInfo, node: str) -> str:
        for attempt in range(1 + self._settings.bind_retries):
            if not self._fence.may_bind():
                return "fenced"
            try:
                self._kube.bind(info.namespace, info.name, info.uid, node)
            except ConflictError:
                log.info("bind %s to %s: conflict (someone else bound it)", info.key, node)
                return "conflict"
            except ApiError as exc:
                self._metrics.api_errors.labels(operation="bind").inc()
                log.warning(
                    "bind %s to %s failed (attempt %d): %s", info.key, node, attempt + 1, exc
                )
                continue
            return "bound"
        return "error"

    def close(self) -> None:
        self._binder.shutdown(wait=True, cancel_futures=True)
        self.preemption.close()
