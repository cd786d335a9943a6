"""What a bind writes to a pod's ResourceClaims before `pods/binding`, in kube-scheduler's order
(its DynamicResources PreBind), and how it is undone.

For each claim this scheduler allocated: the finalizer `resource.kubernetes.io/delete-protection`
(an update of the claim), then `status.allocation` and the pod appended to `status.reservedFor`
in one status update; for a claim allocated already (by anyone, or by an earlier pod sharing it),
only the pod appended to `reservedFor`. A claim of the pod's upstream PodGroup
(DRAWorkloadResourceClaims) is reserved for the PodGroup instead (`{apiGroup:
scheduling.k8s.io, resource: podgroups, name, uid}`, kube's `resourceclaim.BindTo`), once: a
member that finds the group there writes nothing. Then the pod is bound. A claim allocated by
someone else meanwhile, or a stale write to a claim this scheduler allocates, fails the bind: the
pod is decided again. Any failure undoes what was written, in reverse: the entry this bind added
leaves `reservedFor`, an allocation this scheduler made is cleared once no one holds the claim,
and the finalizer it added is removed then.

A pod's extended resources backed by DRA (`ExtendedClaim`, KEP-5004) take one claim more, which
the bind creates first (as kube-scheduler's PreBind does), allocates and reserves as the others,
then names in the pod's `status.extendedResourceClaimStatus` before the binding; a failed bind
deletes it (its finalizer removed first).

A claim whose devices have binding conditions (DRADeviceBindingConditions) is written with them
and `allocationTimestamp`; the binding then waits (`ConditionWait`) until each such device's
entry in the claim's `status.devices` has every binding condition True, as kube-scheduler's
PreBind does. One of its binding failure conditions True, or the timeout, fails the bind (its
writes are undone and the pod is decided again).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from agent.podgroup import podgroup_consumer
from scheduler.claims.decision import ClaimAllocation
from scheduler.claims.model import ClaimKey
from scheduler.claims.status import allocation_status
from scheduler.errors import ApiError, ConflictError

__all__ = [
    "DELETE_PROTECTION",
    "ClaimWrites",
    "ConditionWait",
    "ExtendedClaim",
    "GroupRef",
    "PodRef",
    "bind_with_claims",
    "delete_made_claim",
]

log = logging.getLogger(__name__)

DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
"""The finalizer kube-scheduler puts on a claim it allocates (the resourceclaim controller
removes it when it deallocates the claim)."""

_RETRIES = 3  # re-reads of a claim whose reservation write met a newer version
Obj = Mapping[str, Any]


class ClaimWrites(Protocol):
    """The claim calls a bind makes (`scheduler.kubeapi.resourceclaims.ClaimApi`)."""

    def get(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def update(self, claim: Obj) -> dict[str, Any]: ...

    def update_status(self, claim: Obj) -> dict[str, Any]: ...

    def create(self, claim: Obj) -> dict[str, Any]: ...

    def delete(self, namespace: str, name: str) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ExtendedClaim:
    """The claim of a pod's extended resources, to create: `key`, the one the decision read it
    as; `body`, the claim to create; `record(name)` writes the pod's
    `status.extendedResourceClaimStatus` naming it (ApiError when it cannot)."""

    key: ClaimKey
    body: Obj
    record: Callable[[str], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class PodRef:
    namespace: str
    name: str
    uid: str

    @property
    def consumer(self) -> dict[str, str]:
        """The pod as a `reservedFor` entry."""
        return {"resource": "pods", "name": self.name, "uid": self.uid}


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupRef:
    """The pod's upstream PodGroup and which of the pod's claims are the group's."""

    name: str
    uid: str
    claims: frozenset[ClaimKey]

    @property
    def consumer(self) -> dict[str, str]:
        """The PodGroup as a `reservedFor` entry."""
        return podgroup_consumer(self.name, self.uid)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Written:
    """What was written to one claim (what an undo takes back): `reserved`, the consumer UID
    this bind added to `reservedFor` (None: it was there already)."""

    namespace: str
    name: str
    allocated: bool
    finalized: bool
    reserved: str | None


def _sleep(seconds: float) -> bool:
    time.sleep(seconds)
    return False


@dataclass(frozen=True, slots=True, kw_only=True)
class ConditionWait:
    """How a bind waits for its devices' binding conditions: the claims read every `poll_s`
    until every condition is met, a failure condition is True, or `timeout_s` has passed since
    the wait began (kube-scheduler polls every 5 s, for 600 s by default). `pause(s)` sleeps and
    says whether the scheduler is stopping (a stop event's `wait`): the bind then fails."""

    timeout_s: float = 600.0
    poll_s: float = 1.0
    pause: Callable[[float], bool] = field(default=_sleep)
    clock: Callable[[], float] = field(default=time.monotonic)


class ClaimBindError(Exception):
    """A claim could not be reserved as decided (the pod is decided again)."""


def bind_with_claims(
    api: ClaimWrites,
    pod: PodRef,
    claims: Sequence[ClaimAllocation],
    bind: Callable[[], str],
    group: GroupRef | None = None,
    extended: ExtendedClaim | None = None,
    conditions: ConditionWait | None = None,
) -> str:
    """Reserve every claim for `pod` (those of `group` for the group), wait for the binding
    conditions of their devices (`conditions`, or the defaults), then `bind()`; its outcome
    ("bound", or why not), "conflict" / "error" when a claim write failed, or "binding-failed" /
    "binding-timeout" / "stopped" when the conditions were not met. Undone in reverse when not
    bound. `extended`: the claim of the pod's extended resources, created first and deleted
    when not bound."""
    written: list[_Written] = []
    created: ClaimKey | None = None
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        if extended is not None:
            created = _create(api, extended)
            claims = [_renamed(made, extended.key, created) for made in claims]
        for made in claims:
            grouped = group is not None and made.claim.key in group.claims
            consumer = group.consumer if group is not None and grouped else pod.consumer
            written.append(_reserve(api, consumer, made, now))
        if extended is not None and created is not None:
            extended.record(created.name)
        waiting = [m.claim.key for m in claims if m.allocation.waits]
        missed = _wait_for_conditions(api, waiting, conditions or ConditionWait())
    except (ClaimBindError, ApiError) as exc:
        log.info("pod %s/%s: claims not reserved: %s", pod.namespace, pod.name, exc)
        _undo(api, pod, written, created)
        return "conflict" if isinstance(exc, ClaimBindError | ConflictError) else "error"
    if missed is not None:
        log.info("pod %s/%s: not bound: %s", pod.namespace, pod.name, missed[1])
        _undo(api, pod, written, created)
        return missed[0]
    outcome = bind()
    if outcome != "bound":
        _undo(api, pod, written, created)
    return outcome


def _create(api: ClaimWrites, extended: ExtendedClaim) -> ClaimKey:
    meta = {k: v for k, v in (extended.body.get("metadata") or {}).items() if k != "name"}
    made = api.create({**extended.body, "metadata": meta})  # named by its generateName
    meta = made.get("metadata") or {}
    return ClaimKey(str(meta.get("namespace") or extended.key.namespace), str(meta.get("name")))


def _renamed(made: ClaimAllocation, old: ClaimKey, new: ClaimKey) -> ClaimAllocation:
    if made.claim.key != old:
        return made
    return replace(made, claim=replace(made.claim, key=new))


def _wait_for_conditions(
    api: ClaimWrites, keys: Sequence[ClaimKey], wait: ConditionWait
) -> tuple[str, str] | None:
    """None once every device of `keys` with binding conditions has them all True; else (the
    outcome, why): a failure condition True, the timeout, or the scheduler stopping."""
    if not keys:
        return None
    deadline = wait.clock() + wait.timeout_s
    while True:
        pending = []
        for key in keys:
            claim = api.get(key.namespace, key.name)
            if claim is None:
                return "binding-failed", f"resourceclaim {key} is gone"
            failed, unmet = _binding_state(claim)
            if failed is not None:
                return "binding-failed", f"resourceclaim {key}: {failed}"
            pending += [f"{key} {d}" for d in unmet]
        if not pending:
            return None
        if wait.clock() >= deadline:
            why = f"binding conditions not met within {wait.timeout_s:g} s: {', '.join(pending)}"
            return "binding-timeout", why
        if wait.pause(wait.poll_s):
            return "stopped", "the scheduler is stopping"


def _binding_state(claim: Obj) -> tuple[str | None, list[str]]:
    """(a failure condition that is True, or None; the devices whose binding conditions are
    not all True yet), from the claim's allocation and `status.devices`, as kube-scheduler's
    `isClaimReadyForBinding` reads them."""
    status = claim.get("status") or {}
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or ()
    by_device = {
        (d.get("driver"), d.get("pool"), d.get("device")): {
            c.get("type"): c for c in d.get("conditions") or () if isinstance(c, Mapping)
        }
        for d in status.get("devices") or ()
        if isinstance(d, Mapping)
    }
    unmet = []
    for res in results:
        wanted = res.get("bindingConditions") or ()
        if not wanted:
            continue
        found = by_device.get((res.get("driver"), res.get("pool"), res.get("device")))
        name = f"device {res.get('pool')}/{res.get('device')}"
        if found is None:
            unmet.append(name)
            continue
        for kind in res.get("bindingFailureConditions") or ():
            cond = found.get(kind)
            if cond is not None and cond.get("status") == "True":
                return f"{name}: {kind} ({cond.get('reason')}: {cond.get('message')})", []
        if any((found.get(kind) or {}).get("status") != "True" for kind in wanted):
            unmet.append(name)
    return None, unmet


def _reserve(
    api: ClaimWrites, consumer: Mapping[str, str], made: ClaimAllocation, now: str
) -> _Written:
    key = made.claim.key
    for _ in range(_RETRIES):
        claim = api.get(key.namespace, key.name)
        if claim is None:
            raise ClaimBindError(f"resourceclaim {key} is gone")
        status = claim.get("status") or {}
        if made.new and status.get("allocation"):
            raise ClaimBindError(f"resourceclaim {key} was allocated meanwhile")
        if not made.new and not status.get("allocation"):
            raise ClaimBindError(f"resourceclaim {key} was deallocated meanwhile")
        finalized = False
        if made.new and DELETE_PROTECTION not in _finalizers(claim):
            meta = claim["metadata"]
            meta["finalizers"] = [*_finalizers(claim), DELETE_PROTECTION]
            claim, finalized = api.update(claim), True
        try:
            reserved = _write_reservation(api, claim, consumer, made, now)
        except ConflictError:
            if made.new:
                undo = _Written(
                    **_names(claim), allocated=False, finalized=finalized, reserved=None
                )
                _release(api, undo)
                raise
            continue  # reserved for another pod meanwhile: read it again
        return _Written(**_names(claim), allocated=made.new, finalized=finalized, reserved=reserved)
    raise ClaimBindError(f"resourceclaim {key}: kept changing while reserved")


def _write_reservation(
    api: ClaimWrites,
    claim: dict[str, Any],
    consumer: Mapping[str, str],
    made: ClaimAllocation,
    now: str,
) -> str | None:
    """Allocate (when new) and reserve; the UID added to `reservedFor` (None: there already)."""
    status = dict(claim.get("status") or {})
    if made.new:
        status["allocation"] = allocation_status(made.allocation, now)
    reserved = list(status.get("reservedFor") or ())
    if any(r.get("uid") == consumer["uid"] for r in reserved):
        return None
    status["reservedFor"] = [*reserved, dict(consumer)]
    api.update_status({**claim, "status": status})
    return consumer["uid"]


def _undo(
    api: ClaimWrites, pod: PodRef, written: Sequence[_Written], created: ClaimKey | None = None
) -> None:
    for done in reversed(written):
        try:
            _release(api, done)
        except ApiError as exc:
            log.warning(
                "pod %s/%s: undoing resourceclaim %s/%s failed: %s",
                pod.namespace,
                pod.name,
                done.namespace,
                done.name,
                exc,
            )
    if created is not None:
        try:
            delete_made_claim(api, created)
        except ApiError as exc:
            log.warning("pod %s/%s: deleting resourceclaim %s failed: %s", pod.namespace,
                        pod.name, created, exc)  # fmt: skip


def delete_made_claim(api: ClaimWrites, key: ClaimKey) -> None:
    """Delete a claim a bind created, its finalizer removed first (kube's `deleteClaim`)."""
    claim = api.get(key.namespace, key.name)
    if claim is None:
        return
    if DELETE_PROTECTION in _finalizers(claim):
        claim["metadata"]["finalizers"] = [f for f in _finalizers(claim) if f != DELETE_PROTECTION]
        api.update(claim)
    api.delete(key.namespace, key.name)


def _release(api: ClaimWrites, done: _Written) -> None:
    if done.reserved is None and not done.allocated and not done.finalized:
        return  # this bind wrote nothing to the claim
    for _ in range(_RETRIES):
        claim = api.get(done.namespace, done.name)
        if claim is None:
            return
        status = dict(claim.get("status") or {})
        reserved = [r for r in status.get("reservedFor") or () if r.get("uid") != done.reserved]
        status["reservedFor"] = reserved
        clear = done.allocated and not reserved
        if clear:  # kube-scheduler's deallocation: the devices' statuses go with it
            status.pop("allocation", None)
            status.pop("devices", None)
        try:
            claim = api.update_status({**claim, "status": status})
        except ConflictError:
            continue
        if done.finalized and (clear or not done.allocated):
            claim["metadata"]["finalizers"] = [
                f for f in _finalizers(claim) if f != DELETE_PROTECTION
            ]
            api.update(claim)
        return


def _finalizers(claim: Obj) -> list[str]:
    return list((claim.get("metadata") or {}).get("finalizers") or ())


def _names(claim: Obj) -> dict[str, str]:
    meta = claim.get("metadata") or {}
    return {"namespace": str(meta.get("namespace") or ""), "name": str(meta.get("name") or "")}
