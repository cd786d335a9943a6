"""Leader election on a `coordination.k8s.io/v1` Lease, with fencing.

The algorithm is client-go's: a replica takes the lease when it is absent, held by nobody, or not
renewed for `lease_duration` seconds *as observed on this replica's own clock* (so clock skew
between replicas does not matter); the holder renews every `retry_period`. Updates carry the lease's
`resourceVersion`, so two replicas cannot both win one round (the loser gets 409).

Fencing: `may_bind()` is true only until `renew_deadline` (< `lease_duration`) after the last
successful renewal. A leader cut off from the API server therefore stops binding before any other
replica can consider the lease expired and start binding itself.

A failed round (the API server unreachable or failing) is one WARNING line with the reason, every
round, with its traceback only when DEBUG is on; an error that is not an API failure (a bug) also
gets its traceback the first time in a row.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from agent.objkey import object_key
from scheduler.errors import LeaseConflictError, SchedulerError

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]


class LeaseStore(Protocol):
    """The three Lease calls election needs (`kubeapi.client.KubeClient` implements them)."""

    def get_lease(self, namespace: str, name: str) -> Obj | None: ...

    def create_lease(self, namespace: str, body: Obj) -> Obj: ...

    def replace_lease(self, namespace: str, name: str, body: Obj) -> Obj: ...


class Fence(Protocol):
    def may_bind(self) -> bool: ...


class AlwaysLeader:
    """The fence when leader election is off: this replica always binds."""

    def may_bind(self) -> bool:
        return True


def micro_time(epoch: float) -> str:
    """A Kubernetes MicroTime string (`2024-05-01T12:00:00.000000Z`)."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        store: LeaseStore,
        namespace: str,
        name: str,
        identity: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        if not retry_period < renew_deadline < lease_duration:
            raise ValueError("leader election needs retry_period < renew_deadline < lease_duration")
        self._store, self._ns, self._name, self.identity = store, namespace, name, identity
        self._key = object_key(namespace, name)
        self._clock, self._wall = clock, wall
        self._duration, self._deadline, self._retry = lease_duration, renew_deadline, retry_period
        self._on_change = on_change
        self._lock = threading.Lock()
        self._renewed_at: float | None = None  # our clock, last successful acquire/renew
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0
        self._was_leader = False
        self._failing = False  # the last round failed

    def may_bind(self) -> bool:
        """True while this replica holds the lease and its renew deadline has not passed."""
        with self._lock:
            return (
                self._renewed_at is not None and self._clock() < self._renewed_at + self._deadline
            )

    def run(self, stop: threading.Event) -> None:
        """Acquire, then renew every `retry_period`, until `stop`; then release the lease."""
        while not stop.is_set():
            try:
                self.try_acquire_or_renew()
            except Exception as exc:  # noqa: BLE001 (one line per failed round; see the docstring)
                self._round_failed("round", exc)
            else:
                self._failing = False
            self._notify()
            stop.wait(self._retry)
        self.release()

    def try_acquire_or_renew(self) -> bool:
        """One election round; True when this replica holds the lease afterwards."""
        now, current = self._clock(), self._store.get_lease(self._ns, self._name)
        if current is None:
            return self._write(now, None, self._fresh_spec(now, transitions=0))
        spec = current.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        seen = (holder, str(spec.get("renewTime") or ""))
        if seen != self._observed:
            self._observed, self._observed_at = seen, now
        duration = float(spec.get("leaseDurationSeconds") or self._duration)
        if holder and holder != self.identity and now < self._observed_at + duration:
            self._lose()
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.identity:
            new_spec = {
                **spec,
                "renewTime": micro_time(self._wall()),
                "leaseDurationSeconds": int(self._duration),
            }
        else:
            new_spec = self._fresh_spec(now, transitions=transitions + 1)
        return self._write(now, current, new_spec)

    def release(self) -> None:
        """Give the lease up (holder emptied) so another replica takes over at once."""
        with self._lock:
            held = self._renewed_at is not None
            self._renewed_at = None
        if not held:
            return
        try:
            current = self._store.get_lease(self._ns, self._name)
            spec = (current or {}).get("spec") or {}
            if current is not None and spec.get("holderIdentity") == self.identity:
                body = {
                    **current,
                    "spec": {**spec, "holderIdentity": "", "leaseDurationSeconds": 1},
                }
                self._store.replace_lease(self._ns, self._name, body)
        except Exception as exc:  # noqa: BLE001 (as a failed round)
            self._round_failed("release", exc)
        self._notify()

    # -- internals -----------------------------------------------------------------------
    def _fresh_spec(self, now: float, transitions: int) -> dict[str, Any]:
        stamp = micro_time(self._wall())
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self._duration),
            "acquireTime": stamp,
            "renewTime": stamp,
            "leaseTransitions": transitions,
        }

    def _write(self, now: float, current: Obj | None, spec: dict[str, Any]) -> bool:
        try:
            if current is None:
                meta = {"name": self._name, "namespace": self._ns}
                body = {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": meta,
                    "spec": spec,
                }
                self._store.create_lease(self._ns, body)
            else:
                self._store.replace_lease(self._ns, self._name, {**current, "spec": spec})
        except LeaseConflictError:
            self._lose()
            return False
        with self._lock:
            self._renewed_at = now
        self._observed, self._observed_at = (self.identity, spec["renewTime"]), now
        return True

    def _round_failed(self, what: str, exc: Exception) -> None:
        """One line with the reason; the traceback at DEBUG, or once in a row for a bug."""
        expected = isinstance(exc, SchedulerError)
        reason = str(exc) if expected else f"{type(exc).__name__}: {exc}"
        trace = log.isEnabledFor(logging.DEBUG) or (not expected and not self._failing)
        self._failing = True
        log.warning("lease %s: %s failed: %s", self._key, what, reason, exc_info=trace)

    def _lose(self) -> None:
        with self._lock:
            self._renewed_at = None

    def _notify(self) -> None:
        leader = self.may_bind()
        if leader != self._was_leader:
            self._was_leader = leader
            log.info("lease %s: %s", self._key, "acquired" if leader else "lost")
            if self._on_change is not None:
                self._on_change(leader)
