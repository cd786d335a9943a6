"""The scheduling loop: watch intake, one unit per cycle (a pod or a gang), parallel binding.

Intake (informer threads, `scheduler.runtime.intake`) updates the cache and the queue under
`cache.lock`. A cycle pops one
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
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from agent.objkey import ObjectKey
from agent.shares import DEFAULT_SHARE_LOCK_NAMESPACE, DEFAULT_SHARE_LOCK_SECONDS
from scheduler.claims.model import ClaimKey
from scheduler.claims.status import DEFAULT_BINDING_TIMEOUT_SECONDS
from scheduler.errors import ApiError, ConflictError
from scheduler.kubeapi.client import KubeClient
from scheduler.kubeapi.decode import Listed
from scheduler.kubeapi.leader import Fence
from scheduler.kubeapi.resourceclaims import ClaimApi
from scheduler.kubeapi.sharelock import ShareLocks
from scheduler.placement import Assignment, Placer, Scoring
from scheduler.preemption import Claimed, DeviceFit, PreemptionSettings
from scheduler.quota.modelfilter import assigned
from scheduler.runtime.binding.claimbind import (
    ConditionWait,
    ExtendedClaim,
    PodRef,
    bind_with_claims,
    delete_made_claim,
)
from scheduler.runtime.binding.sharebind import ShareBinding
from scheduler.runtime.claims.book import ClaimBook
from scheduler.runtime.claims.extended import made_key
from scheduler.runtime.claims.placing import ClaimCharges, ClaimPlacement, ClaimRefusal
from scheduler.runtime.claims.podrefs import has_claims
from scheduler.runtime.cluster.cache import ClusterCache
from scheduler.runtime.cluster.podinfo import (
    PodInfo,
)
from scheduler.runtime.cluster.volumes import VolumeCheck
from scheduler.runtime.gangs.tracker import GangTracker
from scheduler.runtime.intake import SHARE_LOCK, Intake, Later
from scheduler.runtime.metrics import SchedulerMetrics
from scheduler.runtime.pending import SchedulingQueue, UnitKey, UnitKind
from scheduler.runtime.preempting.nominating import OtherForm, Preemption
from scheduler.runtime.queues.queueing import CATEGORY as QUEUE_CATEGORY
from scheduler.runtime.queues.queueing import QueueGate
from scheduler.runtime.reporter import Reporter

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopSettings:
    bind_workers: int = 16
    bind_retries: int = 1  # same-node retries before the pod is re-placed
    idle_wait: float = 0.5
    storage_class_ttl: float = 30.0
    queue_status_period: float = 2.0  # Queue status written at most this often (on change)
    share_lock_namespace: str = DEFAULT_SHARE_LOCK_NAMESPACE  # where share Leases live
    share_lock_seconds: int = DEFAULT_SHARE_LOCK_SECONDS
    binding_timeout: float = DEFAULT_BINDING_TIMEOUT_SECONDS  # a bind's wait for binding conditions
    binding_poll: float = 1.0
    condition_waits: int = 64  # binds waiting for binding conditions at once (threads of their own)


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
        self._kube, self.cache, self.queue, self.scoring = kube, cache, queue, scoring
        self._metrics, self._reporter, self._fence, self._clock = metrics, reporter, fence, clock
        self._settings = settings or LoopSettings()
        self._wake = threading.Event()  # ends a standby's idle wait (`wake`)
        self._binder = ThreadPoolExecutor(self._settings.bind_workers, thread_name_prefix="bind")
        self._stopping = threading.Event()
        self._waiting_binder = ThreadPoolExecutor(
            self._settings.condition_waits, thread_name_prefix="bind-wait"
        )
        """Binds that wait for their devices' binding conditions (up to `binding_timeout`),
        apart: they never hold up the others'."""
        self._conditions = ConditionWait(
            timeout_s=self._settings.binding_timeout,
            poll_s=self._settings.binding_poll,
            pause=self._stopping.wait,
        )
        self._placer = Placer(cache.snapshot, scoring)
        self._reasons: dict[ObjectKey, str] = {}  # pending pod key -> why it waits (metrics)
        self.claims = ClaimBook(scoring)
        self.dra = False  # resource.k8s.io/v1 served: pods with claims are placed (`run`)
        self._claim_api = ClaimApi(kube)
        self.quota = QueueGate(cache, queue, reporter)
        self.charges = ClaimCharges(self.claims, cache, self._queue_refusal)  # until bound
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
            self.charges,
        )
        self._volumes = VolumeCheck(kube, clock, self._settings.storage_class_ttl)
        seconds = self._settings.share_lock_seconds
        locks = ShareLocks(kube, self._settings.share_lock_namespace, seconds, time.time)
        self.shares = ShareBinding(locks, kube.annotate_pod, time.time, seconds)
        self.intake = Intake(
            cache,
            queue,
            self.quota,
            self.gangs,
            self.preemption,
            self.shares,
            reporter,
            metrics,
            self._reasons,
            self.claims,
            scoring,
        )

    # -- intake (scheduler.kubeapi.informer.Sink) --------------------------------------------------
    def replace(self, kind: str, items: list[dict[str, Any]]) -> Later:
        """A full list of `kind` (`Intake.replace`), and what it leaves for after the sync."""
        return self.intake.replace(kind, items)

    def replace_in_part(self, kind: str, items: list[Listed]) -> Later:
        """A full list of `kind` decoded in part (`Intake.replace_in_part`)."""
        return self.intake.replace_in_part(kind, items)

    def event(self, kind: str, etype: str, obj: dict[str, Any]) -> None:
        """One watch event (`Intake.event`)."""
        self.intake.event(kind, etype, obj)

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
        if self.claims.has_stale:  # a set's size, read without the lock (rarely true)
            with self.cache.lock:
                stale = self.claims.stale()
            self._binder.submit(self._delete_stale, stale)
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
            info = self.charges.first_form(info)  # one asking a resource a class maps
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
            self.cache.expire_load()
            placer = self._live_placer()
            if has_claims(info.obj):
                return self._attempt_claims(unit, info, placer, excluded)
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
                claimed = self.charges.place_dra_form(placer, info, excluded)
                if isinstance(claimed, tuple):  # the nodes DRA serves the resource on
                    return self._scheduled(unit, *claimed)
                other = None
                if claimed is not None:
                    message = f"{message}; {claimed.message}"
                    other = self._other_form(info, claimed)
                return self._refuse(
                    unit, info, category, message, admitted=not models.nodes, other=other
                )
            self.cache.assume(key, decision.assignment)
            self.preemption.placed(unit)
        self.queue.done(unit)
        self._bind(unit, [(info, decision.assignment)])
        return "scheduled"

    def _attempt_claims(
        self, unit: UnitKey, info: PodInfo, placer: Placer, excluded: AbstractSet[str] | None
    ) -> str:
        """A pod with ResourceClaims (called with `cache.lock` held): its claims allocated on a
        node that fits the rest of it, assumed with the GPUs they take, then bound."""
        placed = self.charges.place(placer, info, excluded)
        if isinstance(placed, ClaimRefusal):
            room = self.charges.room(info)  # victims' claims free devices for it
            if room is None or not (placed.room or placed.quota):
                return self._refuse(unit, info, "claims", placed.message)
            category = "claims" if placed.room else QUEUE_CATEGORY
            claimed = self.charges.claimed([info])
            return self._refuse(
                unit,
                info,
                category,
                placed.message,
                admitted=placed.room,
                devices=room,
                claimed=claimed,
            )
        return self._scheduled(unit, info, placed)

    def _scheduled(self, unit: UnitKey, info: PodInfo, placed: ClaimPlacement) -> str:
        """A pod with claims placed (called with `cache.lock` held; it binds after)."""
        self.preemption.placed(unit)
        self.queue.done(unit)
        self._bind(unit, [(info, placed.assignment)])
        return "scheduled"

    def _other_form(self, info: PodInfo, refused: ClaimRefusal) -> OtherForm | None:
        """`info` with its made claim, for a victim search on the nodes that do not offer the
        resource, when more room or a lower queue there would let it start (None: not)."""
        dra = info.dra_form
        if dra is None or not (refused.room or refused.quota):
            return None
        room = self.charges.room(dra)
        if room is None:
            return None
        claimed = self.charges.claimed([dra])
        return OtherForm(
            infos=[dra], devices=room, claimed=claimed, excluded=self.charges.offering(dra)
        )

    def _queue_refusal(self, infos: Sequence[PodInfo]) -> str | None:
        """Why the queue of `infos` (one unit) holds it back as it asks now (None: admitted)."""
        problem = self.quota.problem(infos)
        return None if problem is None else problem[1]

    def _refuse(
        self,
        unit: UnitKey,
        info: PodInfo,
        category: str,
        message: str,
        admitted: bool | None = None,
        devices: DeviceFit | None = None,
        claimed: Claimed | None = None,
        other: OtherForm | None = None,
    ) -> str:
        """The pod waits for `message`. `admitted`: None when nothing in the cluster could
        help it; False when a max on its path refused it, True when no node fits: then it may
        preempt (or get a starvation hold). `devices`: what it needs besides its request (its
        claims), for the victim search; `claimed`: what they will be charged to its queue;
        `other`: the pod with its made claim, searched when the pod as it is finds none."""
        if admitted is not None and self.unfit_may_preempt(info, category):
            live = self._live_placer()
            message = self.preemption.unfit(
                unit,
                [info],
                None,
                message,
                admitted=admitted,
                live=live,
                devices=devices,
                claimed=claimed,
                other=other,
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
            self._placer = Placer(self.cache.snapshot, self.scoring)
        return self._placer

    def precheck(self, info: PodInfo) -> tuple[str, str] | None:
        """(category, message) for a pod that cannot be placed whatever the cluster looks like."""
        if info.error:
            return "invalid", f"invalid pod: {info.error}"
        if not self.dra and has_claims(info.obj):
            return "unsupported", "unsupported: dynamic resource claims (no resource.k8s.io/v1)"
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
        """One bind task per pod; pods sharing a claim (a gang's, its PodGroup's) in one task,
        in decision order: the pod that allocates the claim writes it before the others
        reserve it."""
        binder = self._waiting_binder if self._waits(binds) else self._binder
        if self._share_claims([info for info, _ in binds]):
            binder.submit(self._bind_in_order, unit, binds)
            return
        for info, assignment in binds:
            binder.submit(self._bind_one, unit, info, assignment)

    def _waits(self, binds: list[tuple[PodInfo, Assignment]]) -> bool:
        """Whether some pod's claims wait for binding conditions before its bind."""
        with self.cache.lock:
            held = [self.charges.held(info.key) for info, _ in binds]
        return any(m.allocation.waits for h in held if h is not None for m in h.decision.claims)

    def _share_claims(self, infos: Sequence[PodInfo]) -> bool:
        with self.cache.lock:
            held = [self.charges.held(info.key) for info in infos]
        keys = [m.claim.key for h in held if h is not None for m in h.decision.claims]
        return len(keys) != len(set(keys))

    def _bind_in_order(self, unit: UnitKey, binds: list[tuple[PodInfo, Assignment]]) -> None:
        for info, assignment in binds:
            self._bind_one(unit, info, assignment)

    def _bind_one(self, unit: UnitKey, info: PodInfo, assignment: Assignment) -> None:
        node, bind = assignment.node, functools.partial(self._try_bind, info, assignment.node)
        nrt = self.cache.nrts.get(node)  # a dict read: its topologies are never changed in place
        with self.cache.lock:
            claims = self.charges.held(info.key)
            group = None if claims is None else self.charges.group_ref(info)
        created: list[str] = []  # the claim of the pod's extended resources, once created
        if claims is not None:
            pod = PodRef(namespace=info.namespace, name=info.name, uid=info.uid)
            made = claims.decision.claims
            extended = self._extended_claim(info, created)
            bind = functools.partial(
                bind_with_claims,
                self._claim_api,
                pod,
                made,
                bind,
                group,
                extended,
                self._conditions,
            )
        outcome = self.shares.bind(info, assignment, nrt, bind) if assignment.shares else bind()
        self._metrics.binds.labels(result=outcome).inc()
        if outcome == "bound":
            if claims is not None:
                with self.cache.lock:
                    self.charges.bound(info.key)
                    if created:
                        key = made_key(info.namespace, info.name)
                        self.claims.created(key, ClaimKey(info.namespace, created[0]))
            self._reporter.scheduled(info.obj, node)
            if unit.kind is UnitKind.GANG:
                self.gangs.bound(unit, info.key)
            return
        with self.cache.lock:
            self.charges.forget(info.key)
            self._reasons[info.key] = "backoff"
            self.queue.retry(unit, info.request.priority, info.created)
            if unit.kind is UnitKind.GANG:
                self.gangs.bind_failed(unit, info.key)

    def _extended_claim(self, info: PodInfo, created: list[str]) -> ExtendedClaim | None:
        """The claim of the pod's extended resources to create at its bind (None: it has none);
        its name goes into `created` once the pod's status names it."""
        key = made_key(info.namespace, info.name)
        with self.cache.lock:
            made = self.claims.made(key)
        if made is None:
            return None
        mappings = [m.wire() for m in made.ask.mappings]

        def record(name: str) -> None:
            self._kube.set_extended_claim(info.namespace, info.name, name, mappings)
            created.append(name)

        return ExtendedClaim(key=key, body=made.body, record=record)

    def _delete_stale(self, keys: AbstractSet[ClaimKey]) -> None:
        """Delete claims made for waiting pods by binds that did not finish (their deletion
        lets the pods be tried again)."""
        for key in sorted(keys):
            try:
                delete_made_claim(self._claim_api, key)
            except ApiError as exc:
                log.warning("deleting resourceclaim %s, made by an earlier bind: %s", key, exc)

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
        self._stopping.set()  # binds waiting for binding conditions give up
        self._binder.shutdown(wait=True, cancel_futures=True)
        self._waiting_binder.shutdown(wait=True, cancel_futures=True)
        self.preemption.close()
