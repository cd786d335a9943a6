"""Every Kubernetes API call of the scheduler, through the real `kubernetes` client.

Objects travel as plain JSON dicts (camelCase, as the API server sends them): each call asks for the
raw response (`_preload_content=False`) and parses it once, which is faster than the client's
models and sidesteps a known client bug — `pods/binding` answers with a `Status`, which the client
fails to read as a `Binding` although the pod is bound. Errors become `ApiError` (HTTP status 0 for
a transport failure) or its subclasses (`calls.api_call`).

The writes made once per pod (the binding, its Events, `PodScheduled=False`) skip the client's
request building (argument validation, model serialisation, per-call header and timeout objects):
they send JSON bytes through the client's own urllib3 pool, with its configuration's headers and
credentials (read per call, so a refreshed token is used), and do not parse the answer. List
answers and watch events are decoded once, straight into dicts, by `decode` (of a Node, only the
fields the scheduler reads).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import urllib3
from kubernetes import client

from agent import nrt
from agent.kube.client import QUEUE_GROUP, QUEUE_PLURAL, QUEUE_VERSION
from agent.kube.connect import TRANSPORT_ERRORS, load_configuration, read_or_none
from agent.objkey import object_key
from scheduler.errors import ApiError, ConflictError, LeaseConflictError
from scheduler.kubeapi.calls import Kind, WatchStream, api_call, error_class
from scheduler.kubeapi.decode import NODE_FIELDS, WHOLE, Decoder
from scheduler.kubeapi.pooled_writes import PooledWriter

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]
SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
PODGROUP_GROUP, PODGROUP_VERSION, PODGROUP_PLURAL = "scheduling.x-k8s.io", "v1alpha1", "podgroups"


def _body(resp: Any) -> Any:
    """Read a raw response to the end, return its connection to the pool, parse the JSON."""
    try:
        data = resp.data
    finally:
        resp.release_conn()
    return json.loads(data) if data else {}


def _read_or_none(operation: str, call: Callable[[], Any]) -> dict[str, Any] | None:
    """The object a raw read returns, or None when it does not exist (404)."""
    with api_call(operation):
        response = read_or_none(call)
        return None if response is None else dict(_body(response))


def _status_text(data: bytes, reason: str | None) -> str:
    """The `message` of the `Status` an error answer carries, else the HTTP reason (as
    `status_message` reads the client's `ApiException`)."""
    try:
        return str(json.loads(data or b"{}").get("message") or reason)
    except (ValueError, AttributeError):
        return str(reason)


def _path(*parts: str) -> str:
    """Path segments quoted as the client quotes path parameters (nothing left unescaped)."""
    return "/".join(quote(part, safe="") for part in parts)


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _decoder(kind: Kind) -> Decoder:
    return NODE_FIELDS if kind is NODES else WHOLE


PODS = Kind("pods")
NODES = Kind("nodes")
NRTS = Kind(nrt.PLURAL, nrt.GROUP, nrt.VERSION, nrt.PLURAL)
PODGROUPS = Kind("podgroups", PODGROUP_GROUP, PODGROUP_VERSION, PODGROUP_PLURAL)
QUEUES = Kind(QUEUE_PLURAL, QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL)
ELASTIC_QUOTAS = Kind("elasticquotas", PODGROUP_GROUP, "v1alpha1", "elasticquotas")
PDBS = Kind("poddisruptionbudgets", "policy", "v1", "poddisruptionbudgets")
DISRUPTION_TARGET = "DisruptionTarget"  # the pod condition a victim gets before its deletion
PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"  # its reason when a scheduler preempts


class KubeClient:
    """The scheduler's API calls. Thread-safe (urllib3 pools connections)."""

    def __init__(
        self, api_client: client.ApiClient, component: str, identity: str, timeout: float = 30.0
    ) -> None:
        """`timeout`: seconds any call may take (a watch: its own length plus this)."""
        self.api_client = api_client
        # Typed as Any: every call passes JSON dicts and reads raw responses, not the models.
        self.core: Any = client.CoreV1Api(api_client)
        self.custom: Any = client.CustomObjectsApi(api_client)
        self.coordination: Any = client.CoordinationV1Api(api_client)
        self.storage: Any = client.StorageV1Api(api_client)
        self.component, self.identity = component, identity
        self.timeout = timeout
        self._writer = PooledWriter(
            api_client.rest_client.pool_manager, api_client.configuration.host, timeout
        )

    @classmethod
    def from_kubeconfig(
        cls, path: str | None, component: str, identity: str, pool: int = 32
    ) -> KubeClient:
        """The kubeconfig at `path`, else as `agent.kube.connect` chooses; ConfigError: none."""
        configuration = load_configuration(path)
        configuration.connection_pool_maxsize = pool
        return cls(client.ApiClient(configuration), component, identity)

    def close(self) -> None:
        """Close the connection pool."""
        api_client: Any = self.api_client
        api_client.close()

    # -- list and watch ------------------------------------------------------------------
    def _list_call(self, kind: Kind, **kw: Any) -> Any:
        if kind is PODS:
            return self.core.list_pod_for_all_namespaces(_preload_content=False, **kw)
        if kind is NODES:
            return self.core.list_node(_preload_content=False, **kw)
        if kind is NRTS or kind is QUEUES:
            return self.custom.list_cluster_custom_object(
                kind.group, kind.version, kind.plural, _preload_content=False, **kw
            )
        return self.custom.list_custom_object_for_all_namespaces(
            kind.group, kind.version, kind.plural, _preload_content=False, **kw
        )

    def list(self, kind: Kind) -> tuple[list[dict[str, Any]], str]:
        """Every object of `kind` (of a Node: its `NodeFields`) and the list's resourceVersion."""
        with api_call(f"list {kind.name}"):
            resp = self._list_call(kind, _request_timeout=self.timeout)
            try:
                data = resp.data
            finally:
                resp.release_conn()
        body = _decoder(kind).list_body(data)
        return list(body.get("items") or []), str(
            (body.get("metadata") or {}).get("resourceVersion", "")
        )

    def watch(self, kind: Kind, resource_version: str, timeout_seconds: int = 300) -> WatchStream:
        """Open a watch of `kind` after `resource_version`."""
        with api_call(f"watch {kind.name}"):
            resp = self._list_call(
                kind,
                watch=True,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout_seconds,
                _request_timeout=(self.timeout, timeout_seconds + self.timeout),
            )
        return WatchStream(kind, resp, _decoder(kind))

    # -- binding and status --------------------------------------------------------------
    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Bind the pod to `node`; ConflictError when it is already bound (someone else won)."""
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        self._send(
            "POST",
            f"/api/v1/namespaces/{_path(namespace)}/pods/{_path(name)}/binding",
            body,
            "application/json",
            f"bind pod {object_key(namespace, name)} to {node}",
        )

    def annotate_pod(self, namespace: str, name: str, uid: str, annotations: Obj) -> None:
        """Merge `annotations` into the pod's metadata while it is still pod `uid` (a new pod of
        the same name fails: its UID differs)."""
        self._send(
            "PATCH",
            f"/api/v1/namespaces/{_path(namespace)}/pods/{_path(name)}",
            {"metadata": {"uid": uid, "annotations": dict(annotations)}},
            MERGE,
            f"annotate pod {object_key(namespace, name)}",
        )

    def set_pod_scheduled_false(self, namespace: str, name: str, reason: str, message: str) -> None:
        """Set the pod's `PodScheduled=False` condition with `reason` and `message`."""
        self._pod_condition(namespace, name, "PodScheduled", "False", reason, message)

    def mark_disruption_target(self, namespace: str, name: str, message: str) -> None:
        """Condition `DisruptionTarget=True` (reason `PreemptionByScheduler`) on `pods/status`,
        as kube-scheduler writes it before deleting a victim."""
        self._pod_condition(
            namespace, name, DISRUPTION_TARGET, "True", PREEMPTION_BY_SCHEDULER, message
        )

    def _pod_condition(
        self, namespace: str, name: str, kind: str, status: str, reason: str, message: str
    ) -> None:
        """One condition on `pods/status` (a strategic merge joins it to the others by type)."""
        condition = {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": now_rfc3339(),
        }
        self._patch_pod_status(namespace, name, {"conditions": [condition]})

    def _patch_pod_status(self, namespace: str, name: str, status: Obj) -> None:
        self._send(
            "PATCH",
            f"/api/v1/namespaces/{_path(namespace)}/pods/{_path(name)}/status",
            {"status": dict(status)},
            SMP,
            f"patch pod {object_key(namespace, name)} status",
        )

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """Delete the pod with its own grace period (`terminationGracePeriodSeconds`), only if it
        is still the pod `uid` (a precondition: a new pod of the same name is left alone)."""
        self._send(
            "DELETE",
            f"/api/v1/namespaces/{_path(namespace)}/pods/{_path(name)}",
            {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}},
            "application/json",
            f"delete pod {object_key(namespace, name)}",
        )

    def set_nominated_node(self, namespace: str, name: str, node: str | None) -> None:
        """Set (or, with None, clear) the pod's `status.nominatedNodeName`."""
        self._patch_pod_status(namespace, name, {"nominatedNodeName": node})

    def _send(self, method: str, path: str, body: Obj, content_type: str, operation: str) -> None:
        """One write through the client's connection pool, with the client's headers and
        credentials; the answer is read, not parsed. Errors as `api_call` maps them."""
        api_client: Any = self.api_client
        headers = {"Accept": "application/json", **api_client.default_headers}
        headers["Content-Type"] = content_type
        if api_client.cookie:
            headers["Cookie"] = api_client.cookie
        for auth in api_client.configuration.auth_settings().values():
            if auth.get("in") == "header" and auth.get("value"):
                headers[auth["key"]] = auth["value"]
        data = json.dumps(body, separators=(",", ":")).encode()
        try:
            if self._writer.usable:
                answer = self._writer.request(method, path, data, headers)
                status, reason, text = answer.status, answer.reason, answer.body
            else:
                resp = api_client.rest_client.pool_manager.urlopen(
                    method,
                    api_client.configuration.host + path,
                    body=data,
                    headers=headers,
                    timeout=urllib3.Timeout(total=self.timeout),
                )
                status, reason, text = int(resp.status), str(resp.reason), resp.data
        except TRANSPORT_ERRORS as exc:
            raise ApiError(operation, 0, str(exc)) from exc
        if not 200 <= status < 300:
            raise error_class(status)(operation, status, _status_text(text, reason))

    def patch_podgroup_status(self, namespace: str, name: str, status: Obj) -> None:
        """Merge `status` into the PodGroup's status subresource."""
        with api_call(f"patch podgroup {object_key(namespace, name)} status"):
            self._merge_status(PODGROUPS, namespace, name, status)

    def patch_queue_status(self, name: str, status: Obj) -> None:
        """Merge `status` into the (cluster-scoped) Queue's status subresource."""
        with api_call(f"patch queue {name} status"):
            self._merge_status(QUEUES, "", name, status)

    def _merge_status(self, kind: Kind, namespace: str, name: str, status: Obj) -> None:
        """A merge patch of a custom resource's status subresource (cluster-scoped: no
        namespace)."""
        args = (kind.group, kind.version, *([namespace] if namespace else []), kind.plural, name)
        patch = (
            self.custom.patch_namespaced_custom_object_status
            if namespace
            else self.custom.patch_cluster_custom_object_status
        )
        resp = patch(
            *args,
            {"status": dict(status)},
            _content_type=MERGE,
            _preload_content=False,
            _request_timeout=self.timeout,
        )
        _body(resp)

    def create_event(
        self, involved: Obj, kind: str, event_type: str, reason: str, message: str
    ) -> None:
        """A core/v1 Event about `involved` (cluster-scoped objects' events go to `default`)."""
        meta = involved.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        stamp = now_rfc3339()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{meta.get('name')}.{uuid.uuid4().hex[:16]}",
                "namespace": namespace,
            },
            "involvedObject": {
                "apiVersion": str(involved.get("apiVersion") or "v1"),
                "kind": kind,
                "namespace": str(meta.get("namespace") or ""),
                "name": meta.get("name"),
                "uid": meta.get("uid"),
            },
            "reason": reason,
            "message": message[:1024],
            "type": event_type,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.identity,
            "action": "Scheduling",
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        self._send(
            "POST",
            f"/api/v1/namespaces/{_path(namespace)}/events",
            body,
            "application/json",
            f"create event {reason} for {kind} {object_key(namespace, str(meta.get('name')))}",
        )

    # -- volumes -------------------------------------------------------------------------
    def get_pvc(self, namespace: str, name: str) -> dict[str, Any] | None:
        return _read_or_none(
            f"get persistentvolumeclaim {object_key(namespace, name)}",
            lambda: self.core.read_namespaced_persistent_volume_claim(
                name, namespace, _preload_content=False, _request_timeout=self.timeout
            ),
        )

    def storage_class_modes(self) -> dict[str, str]:
        """StorageClass name → volumeBindingMode; empty when storage classes cannot be listed."""
        try:
            with api_call("list storageclasses"):
                body = _body(
                    self.storage.list_storage_class(
                        _preload_content=False, _request_timeout=self.timeout
                    )
                )
        except ApiError as exc:
            log.debug("storage classes unavailable: %s", exc)
            return {}
        return {
            str(sc["metadata"]["name"]): str(sc.get("volumeBindingMode") or "Immediate")
            for sc in body.get("items") or []
        }

    # -- leases (scheduler.kubeapi.leader.LeaseStore) --------------------------------------------
    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        return _read_or_none(
            f"get lease {object_key(namespace, name)}",
            lambda: self.coordination.read_namespaced_lease(
                name, namespace, _preload_content=False, _request_timeout=self.timeout
            ),
        )

    def create_lease(self, namespace: str, body: Obj) -> dict[str, Any]:
        return self._lease_write(
            f"create lease {namespace}",
            lambda: self.coordination.create_namespaced_lease(
                namespace, dict(body), _preload_content=False, _request_timeout=self.timeout
            ),
        )

    def replace_lease(self, namespace: str, name: str, body: Obj) -> dict[str, Any]:
        return self._lease_write(
            f"replace lease {object_key(namespace, name)}",
            lambda: self.coordination.replace_namespaced_lease(
                name, namespace, dict(body), _preload_content=False, _request_timeout=self.timeout
            ),
        )

    def _lease_write(self, operation: str, call: Callable[[], Any]) -> dict[str, Any]:
        try:
            with api_call(operation):
                return dict(_body(call()))
        except ConflictError as exc:
            raise LeaseConflictError(str(exc)) from exc
