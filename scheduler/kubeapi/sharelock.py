"""A node's share lock (DESIGN §12): the `coordination.k8s.io/v1` Lease `gputopo-share-<node>`
in the scheduler's namespace, held by the UID of the share pod being admitted there.

The Lease is the record of the decision (DESIGN §12 "Trust"): with the holder it names the pod
(`gputopo.io/pod`) and what each share container is given (`gputopo.io/shares`: GPU UUID,
memory bytes, compute percent), which is all the agent serves; only the scheduler's and the
agent's ServiceAccounts write it. Expiry only lets this scheduler take it for another pod.

Taken only when the Lease is absent (create: 409 AlreadyExists means another writer won), has no
holder (released) or is expired (`renewTime` + `leaseDurationSeconds` before now); always written
with the resourceVersion that was read (409 Conflict: lost the race). Released by an update that
clears the holder and both annotations under the read resourceVersion; never deleted. The
agent releases it once the pod's share containers are allocated; the scheduler only after a
failed annotation or bind.

Lease times are wall-clock RFC 3339 MicroTime written by the holder's writer; `wall` is this
process's clock (the scheduler wrote the time it compares against).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agent.shares import (
    LEASE_SHARES_ANNOTATION,
    LOCK_POD_ANNOTATION,
    LeaseShare,
    encode_lease_shares,
    share_lock_name,
)
from scheduler.errors import ApiError, LeaseConflictError
from scheduler.kubeapi.leader import LeaseStore, micro_time

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]

__all__ = ["Holder", "ShareLocks", "lock_holder"]

_RETRY_SECONDS = 1.0
"""How long a lock lost to a writer whose holder could not be read counts as held."""


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds a node's lock (`pod`: `<namespace>/<name>`) and until when (epoch seconds)."""

    uid: str
    pod: str
    until: float


def _epoch(text: object) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def lock_holder(lease: Obj | None, now: float) -> Holder | None:
    """The live holder of `lease` at `now`; None when absent, released or expired."""
    if lease is None:
        return None
    spec = lease.get("spec") or {}
    uid = str(spec.get("holderIdentity") or "")
    if not uid:
        return None
    renewed = _epoch(spec.get("renewTime")) or _epoch(spec.get("acquireTime"))
    until = (renewed or 0.0) + float(spec.get("leaseDurationSeconds") or 0)
    if until < now:
        return None
    pod = str(((lease.get("metadata") or {}).get("annotations") or {}).get(LOCK_POD_ANNOTATION))
    return Holder(uid, pod, until)


class ShareLocks:
    """Take and release share locks through `store` (the scheduler's `KubeClient`)."""

    def __init__(
        self, store: LeaseStore, namespace: str, seconds: int, wall: Callable[[], float]
    ) -> None:
        self._store, self._ns, self._seconds, self._wall = store, namespace, seconds, wall

    def acquire(
        self, node: str, uid: str, pod: str, shares: Mapping[str, LeaseShare]
    ) -> Holder | None:
        """Take `node`'s lock for pod `uid` (`pod`: its key), giving its share containers
        `shares`; None when taken, else the holder that keeps it (a lost race reads the winner,
        else counts as held for a second)."""
        name = share_lock_name(node)
        now = self._wall()
        current = self._store.get_lease(self._ns, name)
        holder = lock_holder(current, now)
        if holder is not None and holder.uid != uid:
            return holder
        stamp = micro_time(now)
        spec = {
            "holderIdentity": uid,
            "leaseDurationSeconds": self._seconds,
            "acquireTime": stamp,
            "renewTime": stamp,
        }
        meta: dict[str, Any] = {"name": name, "namespace": self._ns}
        if current is not None:
            meta = dict(current.get("metadata") or {}, name=name, namespace=self._ns)
        meta["annotations"] = {
            **(meta.get("annotations") or {}),
            LOCK_POD_ANNOTATION: pod,
            LEASE_SHARES_ANNOTATION: encode_lease_shares(shares),
        }
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta}
        try:
            if current is None:
                self._store.create_lease(self._ns, {**body, "spec": spec})
            else:
                self._store.replace_lease(self._ns, name, {**body, "spec": spec})
        except LeaseConflictError:
            # Another writer won: read who, or try again shortly (not a whole lock period).
            winner = lock_holder(self._store.get_lease(self._ns, name), now)
            return winner or Holder("", "", now + _RETRY_SECONDS)
        return None

    def release(self, node: str, uid: str) -> None:
        """Clear `node`'s lock if pod `uid` still holds it (a failed bind); a failure is logged
        (the lock then expires on its own)."""
        name = share_lock_name(node)
        try:
            current = self._store.get_lease(self._ns, name)
            spec = dict((current or {}).get("spec") or {})
            if current is None or spec.get("holderIdentity") != uid:
                return
            spec.pop("holderIdentity", None)
            meta = dict(current.get("metadata") or {})
            annotations = dict(meta.get("annotations") or {})
            annotations.pop(LOCK_POD_ANNOTATION, None)
            annotations.pop(LEASE_SHARES_ANNOTATION, None)
            meta["annotations"] = annotations
            self._store.replace_lease(self._ns, name, {**current, "metadata": meta, "spec": spec})
        except (ApiError, LeaseConflictError) as exc:
            log.warning("share lock %s/%s: release failed: %s", self._ns, name, exc)
