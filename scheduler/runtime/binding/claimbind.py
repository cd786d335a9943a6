"""What a bind writes to a pod's ResourceClaims before `pods/binding`, in kube-scheduler's order
(its DynamicResources PreBind), and how it is undone.

For each claim this scheduler allocated: the finalizer `resource.kubernetes.io/delete-protection`
(an update of the claim), then `status.allocation` and the pod appended to `status.reservedFor`
in one status update; for a claim allocated already (by anyone, or by an earlier pod sharing it),
only the pod appended to `reservedFor`. Then the pod is bound. A claim allocated by someone else
meanwhile, or a stale write to a claim this scheduler allocates, fails the bind: the pod is
decided again. Any failure undoes what was written, in reverse: the pod leaves `reservedFor`, an
allocation this scheduler made is cleared once no one holds the claim, and the finalizer it added
is removed then.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from scheduler.claims.decision import ClaimAllocation
from scheduler.claims.status import allocation_status
from scheduler.errors import ApiError, ConflictError

__all__ = ["DELETE_PROTECTION", "ClaimWrites", "PodRef", "bind_with_claims"]

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
class _Written:
    """What was written to one claim (what an undo takes back)."""

    namespace: str
    name: str
    allocated: bool
    finalized: bool


class ClaimBindError(Exception):
    """A claim could not be reserved as decided (the pod is decided again)."""


def bind_with_claims(
    api: ClaimWrites, pod: PodRef, claims: Sequence[ClaimAllocation], bind: Callable[[], str]
) -> str:
    """Reserve every claim for `pod`, then `bind()`; its outcome ("bound", or why not), or
    "conflict" / "error" when a claim write failed. Undone in reverse when not bound."""
    written: list[_Written] = []
    try:
        for made in claims:
            written.append(_reserve(api, pod, made))
    except (ClaimBindError, ApiError) as exc:
        log.info("pod %s/%s: claims not reserved: %s", pod.namespace, pod.name, exc)
        _undo(api, pod, written)
        return "conflict" if isinstance(exc, ClaimBindError | ConflictError) else "error"
    outcome = bind()
    if outcome != "bound":
        _undo(api, pod, written)
    return outcome


def _reserve(api: ClaimWrites, pod: PodRef, made: ClaimAllocation) -> _Written:
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
            _write_reservation(api, claim, pod, made)
        except ConflictError:
            if made.new:
                _undo(api, pod, [_Written(**_names(claim), allocated=False, finalized=finalized)])
                raise
            continue  # reserved for another pod meanwhile: read it again
        return _Written(**_names(claim), allocated=made.new, finalized=finalized)
    raise ClaimBindError(f"resourceclaim {key}: kept changing while reserved")


def _write_reservation(
    api: ClaimWrites, claim: dict[str, Any], pod: PodRef, made: ClaimAllocation
) -> None:
    status = dict(claim.get("status") or {})
    if made.new:
        status["allocation"] = allocation_status(made.allocation)
    reserved = list(status.get("reservedFor") or ())
    if any(r.get("uid") == pod.uid for r in reserved):
        return
    status["reservedFor"] = [*reserved, pod.consumer]
    api.update_status({**claim, "status": status})


def _undo(api: ClaimWrites, pod: PodRef, written: Sequence[_Written]) -> None:
    for done in reversed(written):
        try:
            _release(api, pod, done)
        except ApiError as exc:
            log.warning(
                "pod %s/%s: undoing resourceclaim %s/%s failed: %s",
                pod.namespace,
                pod.name,
                done.namespace,
                done.name,
                exc,
            )


def _release(api: ClaimWrites, pod: PodRef, done: _Written) -> None:
    for _ in range(_RETRIES):
        claim = api.get(done.namespace, done.name)
        if claim is None:
            return
        status = dict(claim.get("status") or {})
        reserved = [r for r in status.get("reservedFor") or () if r.get("uid") != pod.uid]
        status["reservedFor"] = reserved
        clear = done.allocated and not reserved
        if clear:
            status.pop("allocation", None)
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
