"""The agent's API calls for share Allocate (DESIGN §12): the node's share lock, its holder pod,
the `gputopo.io/allocated` annotation, and warning Events.

`ShareClient` is the device plugin's `ShareApi`. Allocate is a hot path the kubelet waits on,
so every call has a short timeout (`timeout_s`, default 0.5 s) and no retry here: the caller
bounds its own wait. Failures become `PublishError` naming the object (`api_errors`).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from kubernetes import client

from agent.errors import PublishError
from agent.kube.client import MERGE_PATCH, _read_or_none, api_errors, list_node_pods
from agent.kube.publisher import FIELD_MANAGER
from agent.shares import (
    ALLOCATED_ANNOTATION,
    LEASE_SHARES_ANNOTATION,
    LOCK_POD_ANNOTATION,
    ShareLock,
    ShareRequestError,
    share_lock_from_lease,
    share_lock_name,
)

EVENT_SOURCE = "gputopo-agent"


class ShareClient:
    """The share lock of `node` in `namespace`, and the pods on that node."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        node: str,
        namespace: str,
        timeout_s: float = 0.5,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._api_client = api_client
        self._node = node
        self._namespace = namespace
        self._timeout = timeout_s
        self._wall_clock = wall_clock
        self.server: str = api_client.configuration.host
        self._last: dict[str, Any] | None = None  # the Lease as last read, for its release
        self._last_version = ""

    @cached_property
    def _core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self._api_client)

    @cached_property
    def _coordination(self) -> client.CoordinationV1Api:
        return client.CoordinationV1Api(self._api_client)

    def lock(self) -> ShareLock | None:
        """The node's share Lease, or None when it does not exist."""
        name = share_lock_name(self._node)
        lease = _read_or_none(
            f"reading Lease {self._namespace}/{name}",
            lambda: self._coordination.read_namespaced_lease(
                name, self._namespace, _preload_content=False, _request_timeout=self._timeout
            ),
            self.server,
        )
        if lease is None:
            return None
        lease.setdefault("spec", {})
        self._last, self._last_version = lease, str(lease["metadata"].get("resourceVersion"))
        try:
            return share_lock_from_lease(lease)
        except ShareRequestError as exc:
            raise PublishError(str(exc)) from None

    def release(self, lock: ShareLock) -> bool:
        """Remove the holder (and its pod and shares annotations) with an update under the read
        resourceVersion; False when the Lease changed meanwhile (409: another writer won)."""
        lease = self._last if self._last_version == lock.resource_version else None
        if lease is None:
            return False
        body = copy.deepcopy(lease)
        body["spec"].pop("holderIdentity", None)
        annotations = body["metadata"].get("annotations") or {}
        annotations.pop(LOCK_POD_ANNOTATION, None)
        annotations.pop(LEASE_SHARES_ANNOTATION, None)
        try:
            with api_errors(f"releasing Lease {lock.namespace}/{lock.name}", self.server):
                self._coordination.replace_namespaced_lease(
                    lock.name, lock.namespace, body,  # type: ignore[arg-type]  # sent as is
                    field_manager=FIELD_MANAGER,
                    _preload_content=False, _request_timeout=self._timeout,
                )  # fmt: skip
        except PublishError as exc:
            if "HTTP 409" in str(exc):
                return False
            raise
        return True

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return _read_or_none(
            f"reading Pod {namespace}/{name}",
            lambda: self._core.read_namespaced_pod(
                name, namespace, _preload_content=False, _request_timeout=self._timeout
            ),
            self.server,
        )

    def pods_on_node(self) -> list[dict[str, Any]]:
        return list_node_pods(self._core, self._node, self.server, self._timeout)

    def patch_allocated(self, namespace: str, name: str, value: str) -> None:
        with api_errors(f"patching {ALLOCATED_ANNOTATION} of Pod {namespace}/{name}", self.server):
            self._core.patch_namespaced_pod(
                name,
                namespace,
                {"metadata": {"annotations": {ALLOCATED_ANNOTATION: value}}},
                field_manager=FIELD_MANAGER,
                _content_type=MERGE_PATCH,
                _preload_content=False,
                _request_timeout=self._timeout,
            )

    def warn(self, pod: Mapping[str, Any], reason: str, message: str) -> None:
        """A Warning Event on `pod` (core/v1, as `kubectl describe pod` shows)."""
        meta = pod.get("metadata") or {}
        namespace = meta.get("namespace", "default")
        now = datetime.fromtimestamp(self._wall_clock(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name', 'pod')}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": "v1", "kind": "Pod", "namespace": namespace,
                "name": meta.get("name", ""), "uid": meta.get("uid", ""),
            },
            "type": "Warning", "reason": reason, "message": message,
            "source": {"component": EVENT_SOURCE, "host": self._node},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }  # fmt: skip
        with api_errors(f"creating an Event on Pod {namespace}/{meta.get('name')}", self.server):
            self._core.create_namespaced_event(
                namespace,
                event,  # type: ignore[arg-type]  # a plain dict is sent as it is
                _preload_content=False,
                _request_timeout=self._timeout,
            )
