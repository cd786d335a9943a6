"""What the scheduler tells users through the API: Events, `PodScheduled=False`, PodGroup status.

Writes go through a small thread pool so a slow API server never stalls the scheduling loop, and
only while this replica may bind (the leader): two replicas never both report. Each write is
de-duplicated against the last one that succeeded for the same object, so a pod retried every few
seconds with the same reason gets one Event and one condition patch, not one per attempt.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from agent.objkey import key_of, split_key
from scheduler.errors import ApiError
from scheduler.kubeapi import workloads
from scheduler.kubeapi.client import KubeClient
from scheduler.kubeapi.leader import Fence
from scheduler.runtime.metrics import SchedulerMetrics

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]
REASON_FAILED_SCHEDULING = "FailedScheduling"
REASON_SCHEDULED = "Scheduled"
CONDITION_UNSCHEDULABLE = "Unschedulable"
PODGROUP_API_VERSION = "scheduling.x-k8s.io/v1alpha1"


def _shows_unschedulable(pod: Obj, message: str) -> bool:
    """Does the pod's status carry `PodScheduled=False`, reason Unschedulable, with `message`?"""
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled":
            return bool(
                condition.get("status") == "False"
                and condition.get("reason") == CONDITION_UNSCHEDULABLE
                and condition.get("message") == message
            )
    return False


class Reporter:
    def __init__(
        self, kube: KubeClient, fence: Fence, metrics: SchedulerMetrics, workers: int = 4
    ) -> None:
        self._kube, self._fence, self._metrics = kube, fence, metrics
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="report")
        self._lock = threading.Lock()
        self._last: dict[Hashable, object] = {}
        self._pending: set[Future[None]] = set()
        self._queued: dict[Hashable, tuple[object, Callable[[], None]]] = {}  # after the in-flight

    def unschedulable(self, pod: Obj, message: str) -> None:
        """Event `FailedScheduling` and `PodScheduled=False` (reason Unschedulable): `message`.
        The condition is not patched when the pod already shows it, word for word (written by an
        earlier run of this scheduler, say)."""
        key = key_of(pod)
        shown = _shows_unschedulable(pod, message)

        def write() -> None:
            ns, name = split_key(key)
            self._kube.create_event(pod, "Pod", "Warning", REASON_FAILED_SCHEDULING, message)
            if not shown:
                self._kube.set_pod_scheduled_false(ns, name, CONDITION_UNSCHEDULABLE, message)

        self._submit(("pod", key), message, write)

    def scheduled(self, pod: Obj, node: str) -> None:
        """Event `Scheduled`: "Successfully assigned ns/name to node"."""
        key = key_of(pod)
        message = f"Successfully assigned {key} to {node}"
        self._submit(
            ("pod", key),
            message,
            lambda: self._kube.create_event(pod, "Pod", "Normal", REASON_SCHEDULED, message),
        )

    def warn(self, involved: Obj, kind: str, reason: str, message: str) -> None:
        """A Warning event about any object (malformed PodGroup, NRT or Node; a failed gang)."""
        key = ("warn", kind, key_of(involved), reason)
        self._submit(
            key,
            message,
            lambda: self._kube.create_event(involved, kind, "Warning", reason, message),
        )

    def note(self, involved: Obj, kind: str, reason: str, message: str) -> None:
        """A Normal event about any object (a gang whose lost members were replaced)."""
        key = ("note", kind, key_of(involved), reason)
        self._submit(
            key,
            message,
            lambda: self._kube.create_event(involved, kind, "Normal", reason, message),
        )

    def group_status(self, group: Obj, status: Mapping[str, Any]) -> None:
        """Patch the PodGroup's status (ours, or a scheduling.k8s.io one: by its apiVersion)
        when it differs from what was last written."""
        key = key_of(group)
        ns, name = split_key(key)
        api_version = str(group.get("apiVersion") or "")
        frozen = json.dumps(status, sort_keys=True)
        if api_version.startswith(workloads.GROUP + "/"):
            self._submit(
                ("upstream-group", key),
                frozen,
                lambda: workloads.patch_status(self._kube, api_version, ns, name, status),
            )
            return
        self._submit(
            ("group", key),
            frozen,
            lambda: self._kube.patch_podgroup_status(ns, name, status),
        )

    def queue_status(self, queue: Obj, patch: Mapping[str, Any]) -> None:
        """Merge-patch the Queue's status when it differs from what was last written."""
        name = str((queue.get("metadata") or {}).get("name") or "")
        self._submit(
            ("queue", name),
            json.dumps(patch, sort_keys=True),
            lambda: self._kube.patch_queue_status(name, patch),
        )

    def forget(self, pod: Obj) -> None:
        """Drop what was reported for a deleted pod."""
        with self._lock:
            self._last.pop(("pod", key_of(pod)), None)

    def flush(self, timeout: float = 5.0) -> None:
        """Wait for the writes submitted so far (tests and shutdown)."""
        with self._lock:
            pending = list(self._pending)
        for future in pending:
            future.result(timeout=timeout)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- internals -----------------------------------------------------------------------
    def _submit(self, key: Hashable, value: object, write: Callable[[], None]) -> None:
        """Write in order per object: while one write of `key` runs, only the newest waits."""
        if not self._fence.may_bind():
            return
        with self._lock:
            if self._last.get(key) == value:
                return
            self._last[key] = value
            in_flight = key in self._queued
            self._queued[key] = (value, write)
            if in_flight:
                return
            future = self._pool.submit(self._drain, key)
            self._pending.add(future)
        future.add_done_callback(self._done)

    def _drain(self, key: Hashable) -> None:
        while True:
            with self._lock:
                value, write = self._queued[key]
            self._run(key, value, write)
            with self._lock:
                if self._queued[key][0] == value and self._queued[key][1] is write:
                    del self._queued[key]
                    return

    def _run(self, key: Hashable, value: object, write: Callable[[], None]) -> None:
        try:
            write()
        except ApiError as exc:
            self._metrics.api_errors.labels(operation=exc.operation.split(" ", 1)[0]).inc()
            log.warning("report failed: %s", exc)
            self._retry_later(key, value)
        except Exception:
            log.exception("report failed unexpectedly")
            self._retry_later(key, value)

    def _retry_later(self, key: Hashable, value: object) -> None:
        with self._lock:
            if self._last.get(key) == value:
                del self._last[key]

    def _done(self, future: Future[None]) -> None:
        with self._lock:
            self._pending.discard(future)
