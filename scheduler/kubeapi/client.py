"""Every Kubernetes API call of the scheduler, over one urllib3 pool (`connection.Connection`).

`connection.connect` reads the credentials (kubeconfig or in-cluster, TLS) itself in the common
shapes and leaves the rest to the `kubernetes` client; either way the calls skip the client's
typed APIs (`CoreV1Api` and the like): importing them builds thousands of models and took
seconds of the scheduler's start before its first list, and per call they add request models,
header dicts and retry objects for nothing the scheduler reads.
Objects travel as plain JSON dicts (camelCase, as the API server sends them): a request goes out
as JSON bytes with the connection's credentials (read per call, so a refreshed token is used)
through `PooledWriter` (one `sendall`, the answer read with llhttp), a watch through the
pool's streaming response. List answers and watch events are decoded once, straight into dicts,
by `decode` (of a Node, only the fields the scheduler reads). Errors are `ApiError` (HTTP status 0
for a transport failure) or the subclass of its status (`calls.error_class`): `ConflictError`,
`GoneError`, `NotFoundError`.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

import urllib3

from agent import nrt
from agent.kube.kinds import QUEUE_GROUP, QUEUE_PLURAL, QUEUE_VERSION
from agent.kube.transport import TRANSPORT_ERRORS, transport_reason
from agent.objkey import object_key
from scheduler.errors import ApiError, ConflictError, LeaseConflictError, NotFoundError
from scheduler.kubeapi.calls import Kind, WatchStream, error_class
from scheduler.kubeapi.connection import Connection, connect
from scheduler.kubeapi.decode import NODE_FIELDS, WHOLE, Decoder, Listed
from scheduler.kubeapi.pooled_writes import PooledWriter

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]
SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
PODGROUP_GROUP, PODGROUP_VERSION, PODGROUP_PLURAL = "scheduling.x-k8s.io", "v1alpha1", "podgroups"


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


def _collection(kind: Kind) -> str:
    """The path of every object of `kind`, in all namespaces."""
    if not kind.group:
        return f"/api/{kind.version}/{kind.plural or kind.name}"
    return f"/apis/{kind.group}/{kind.version}/{kind.plural}"


def _lease_path(namespace: str, name: str) -> str:
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{_path(namespace)}/leases"
    return f"{leases}/{_path(name)}" if name else leases


@dataclass(frozen=True, slots=True)
class Read:
    """A GET of one object (`KubeClient.read`): its path and the operation its errors name."""

    path: str
    operation: str


def lease_read(namespace: str, name: str) -> Read:
    return Read(_lease_path(namespace, name), f"get lease {object_key(namespace, name)}")


def discovery_read(group: str, version: str) -> Read:
    return Read(f"/apis/{group}/{version}", f"discover {group}/{version}")


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
NAMESPACES = Kind("namespaces")
DISRUPTION_TARGET = "DisruptionTarget"  # the pod condition a victim gets before its deletion
PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"  # its reason when a scheduler preempts


class KubeClient:
    """The scheduler's API calls. Thread-safe (urllib3 pools connections)."""

    def __init__(
        self,
        connection: Connection | ApiClient,
        component: str,
        identity: str,
        timeout: float = 30.0,
    ) -> None:
        """`connection`: the pool and credentials (a `kubernetes` `ApiClient`'s, as tests and
        benches build one for the fake API server, are taken over); `timeout`: seconds any
        call may take (a watch: its own length plus this)."""
        if not isinstance(connection, Connection):
            connection = Connection.of_api_client(connection)
        self.connection = connection
        self.component, self.identity = component, identity
        self.timeout = timeout
        self._writer = PooledWriter(connection.pool, connection.host, timeout)
        self._lock = threading.Lock()
        self._prefetched: dict[Kind | str, Future[bytes]] = {}

    @classmethod
    def from_kubeconfig(
        cls, path: str | None, component: str, identity: str, pool: int = 32
    ) -> KubeClient:
        """The kubeconfig at `path`, else in kubectl's order (`connection.connect`);
        ConfigError: no usable credentials."""
        return cls(connect(path, pool), component, identity)

    def renamed(self, component: str) -> KubeClient:
        """A client for `component` on this one's connection, taking over the lists and reads
        this one sent (`prefetch`, `prefetch_reads`) and not yet handed out: `gputopo-scheduler
        run` sends its first requests before it has read the settings that name the scheduler
        (`scheduler.cli.run`)."""
        client = KubeClient(self.connection, component, self.identity, self.timeout)
        with self._lock:
            client._prefetched, self._prefetched = self._prefetched, {}
        return client

    @property
    def host(self) -> str:
        return self.connection.host

    def close(self) -> None:
        """Close the connection pool."""
        self.connection.close()

    # -- list and watch ------------------------------------------------------------------
    def prefetch(self, kinds: Sequence[Kind]) -> None:
        """Send the list of each of `kinds` now, on a thread of its own; the next `list` of that
        kind takes the answer (waiting for it if need be), as if it had been sent then. Start-up
        sends the big lists before it imports the runtime (`scheduler.cli.run`)."""
        for kind in kinds:
            self._send_early(kind, _collection(kind), f"list {kind.name}")

    def prefetch_reads(self, reads: Sequence[Read]) -> None:
        """Send each GET of `reads` now, as `prefetch` does a list; the next `read` of that path
        takes the answer. Start-up sends its discovery and Lease reads with the first lists, so
        that they do not queue behind them (`scheduler.cli.run`)."""
        for read in reads:
            self._send_early(read.path, read.path, read.operation)

    def forget_prefetched_reads(self) -> None:
        """Drop the answers to `prefetch_reads` not taken (say, the discovery of a version never
        asked for), so that no later `read` takes an old answer; the lists stay."""
        with self._lock:
            for key in [key for key in self._prefetched if isinstance(key, str)]:
                del self._prefetched[key]

    def _send_early(self, key: Kind | str, path: str, operation: str) -> None:
        answer: Future[bytes] = Future()
        with self._lock:
            self._prefetched[key] = answer
        threading.Thread(
            target=self._fetch, args=(path, operation, answer), name="prefetch", daemon=True
        ).start()

    def _fetch(self, path: str, operation: str, answer: Future[bytes]) -> None:
        try:
            answer.set_result(self._call("GET", path, None, "", operation))
        except ApiError as exc:
            answer.set_exception(exc)

    def _get(self, key: Kind | str, path: str, operation: str) -> bytes:
        """The answer to a GET of `path`: the one sent early under `key`, if any (waiting for
        it; its ApiError raised as the call would have raised it), else a GET sent now."""
        with self._lock:
            prefetched = self._prefetched.pop(key, None)
        if prefetched is not None:
            return prefetched.result()
        return self._call("GET", path, None, "", operation)

    def list_in_part(self, kind: Kind) -> tuple[list[Listed], str]:
        """Every object of `kind` decoded in part (`decode.Listed`: its `PodHead` now, the whole
        object when asked) and the list's resourceVersion."""
        data = self._get(kind, _collection(kind), f"list {kind.name}")
        items, metadata = _decoder(kind).listed_in_part(data)
        return items, str(metadata.get("resourceVersion", ""))

    def list(self, kind: Kind) -> tuple[list[dict[str, Any]], str]:
        """Every object of `kind` (of a Node: its `NodeFields`) and the list's resourceVersion.
        The items of a built-in kind outside the core group carry the `apiVersion` and `kind`
        the API server leaves out of a list's items (a watch event's object has them), so that
        what reads an object's version (an upstream PodGroup's status write and condition) reads
        the served one whichever way the object came."""
        data = self._get(kind, _collection(kind), f"list {kind.name}")
        body = _decoder(kind).list_body(data)
        items = list(body.get("items") or [])
        if kind.group:
            _stamp_type(items, body.get("apiVersion"), body.get("kind"))
        return items, str((body.get("metadata") or {}).get("resourceVersion", ""))

    def watch(self, kind: Kind, resource_version: str, timeout_seconds: int = 300) -> WatchStream:
        """Open a watch of `kind` after `resource_version` (the answer is streamed, not read)."""
        operation = f"watch {kind.name}"
        query = urlencode(
            {
                "watch": "true",
                "resourceVersion": resource_version,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": str(timeout_seconds),
            }
        )
        try:
            resp = self.connection.pool.request(
                "GET",
                f"{self.connection.host}{_collection(kind)}?{query}",
                headers=self._headers(""),
                preload_content=False,
                timeout=urllib3.Timeout(connect=self.timeout, read=timeout_seconds + self.timeout),
            )
        except TRANSPORT_ERRORS as exc:
            raise ApiError(operation, 0, transport_reason(exc)) from exc
        if resp.status != 200:
            try:
                text = resp.data
            finally:
                resp.release_conn()
            raise error_class(resp.status)(operation, resp.status, _status_text(text, resp.reason))
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

    def set_extended_claim(
        self, namespace: str, name: str, claim: str, mappings: Sequence[Obj]
    ) -> None:
        """The pod's `status.extendedResourceClaimStatus`: the claim of its extended resources
        backed by DRA and the requests each container's resource uses (KEP-5004)."""
        value = {"requestMappings": [dict(m) for m in mappings], "resourceClaimName": claim}
        self._patch_pod_status(namespace, name, {"extendedResourceClaimStatus": value})

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

    def _headers(self, content_type: str) -> dict[str, str]:
        """The connection's credentials (read per call: a refreshed token is used), JSON
        accepted, `content_type` when the request has a body."""
        headers = {"Accept": "application/json", **self.connection.auth()}
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    def _send(self, method: str, path: str, body: Obj, content_type: str, operation: str) -> None:
        """A write whose answer is not needed."""
        self._call(method, path, body, content_type, operation)

    def _call(
        self, method: str, path: str, body: Obj | None, content_type: str, operation: str
    ) -> bytes:
        """One request through the client's connection pool, with the client's headers and
        credentials; the answer's body, unparsed. Errors: `ApiError` (0 when no answer came) or
        the subclass of its HTTP status."""
        data = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = self._headers(content_type if body is not None else "")
        try:
            if self._writer.usable:
                answer = self._writer.request(method, path, data, headers)
                status, reason, text = answer.status, answer.reason, answer.body
            else:
                resp = self.connection.pool.urlopen(
                    method,
                    self.connection.host + path,
                    body=data if body is not None else None,
                    headers=headers,
                    timeout=urllib3.Timeout(total=self.timeout),
                )
                status, reason, text = int(resp.status), str(resp.reason), resp.data
        except TRANSPORT_ERRORS as exc:
            raise ApiError(operation, 0, transport_reason(exc)) from exc
        if not 200 <= status < 300:
            raise error_class(status)(operation, status, _status_text(text, reason))
        return bytes(text)

    def read(self, path: str, operation: str) -> dict[str, Any] | None:
        """The object at `path`, or None when it does not exist (404)."""
        try:
            return dict(json.loads(self._get(path, path, operation)))
        except NotFoundError:
            return None

    def delete(self, path: str, operation: str) -> None:
        """Delete the object at `path`; one that does not exist is done."""
        try:
            self._call("DELETE", path, None, "", operation)
        except NotFoundError:
            return

    def resources(self, group: str, version: str) -> dict[str, Any] | None:
        """Discovery: the APIResourceList `group/version` serves, or None when it serves none."""
        discovery = discovery_read(group, version)
        return self.read(discovery.path, discovery.operation)

    def patch_status(self, kind: Kind, namespace: str, name: str, status: Obj) -> None:
        """Merge `status` into the status subresource of an object of `kind` (one of the
        upstream API groups': `scheduler.kubeapi.workloads`)."""
        self._merge_status(kind, namespace, name, status, kind.name)

    def patch_podgroup_status(self, namespace: str, name: str, status: Obj) -> None:
        """Merge `status` into the PodGroup's status subresource."""
        self._merge_status(PODGROUPS, namespace, name, status, "podgroup")

    def patch_queue_status(self, name: str, status: Obj) -> None:
        """Merge `status` into the (cluster-scoped) Queue's status subresource."""
        self._merge_status(QUEUES, "", name, status, "queue")

    def _merge_status(self, kind: Kind, namespace: str, name: str, status: Obj, what: str) -> None:
        """A merge patch of a custom resource's status subresource (cluster-scoped: no
        namespace)."""
        scope = f"/namespaces/{_path(namespace)}" if namespace else ""
        path = f"/apis/{kind.group}/{kind.version}{scope}/{kind.plural}/{_path(name)}/status"
        operation = f"patch {what} {object_key(namespace, name) if namespace else name} status"
        self._send("PATCH", path, {"status": dict(status)}, MERGE, operation)

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
        return self.read(
            f"/api/v1/namespaces/{_path(namespace)}/persistentvolumeclaims/{_path(name)}",
            f"get persistentvolumeclaim {object_key(namespace, name)}",
        )

    def storage_class_modes(self) -> dict[str, str]:
        """StorageClass name → volumeBindingMode; empty when storage classes cannot be listed."""
        try:
            data = self._call(
                "GET", "/apis/storage.k8s.io/v1/storageclasses", None, "", "list storageclasses"
            )
        except ApiError as exc:
            log.debug("storage classes unavailable: %s", exc)
            return {}
        return {
            str(sc["metadata"]["name"]): str(sc.get("volumeBindingMode") or "Immediate")
            for sc in json.loads(data).get("items") or []
        }

    # -- leases (scheduler.kubeapi.leader.LeaseStore) --------------------------------------------
    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        lease = lease_read(namespace, name)
        return self.read(lease.path, lease.operation)

    def create_lease(self, namespace: str, body: Obj) -> dict[str, Any]:
        return self._lease_write(
            "POST", _lease_path(namespace, ""), body, f"create lease {namespace}"
        )

    def replace_lease(self, namespace: str, name: str, body: Obj) -> dict[str, Any]:
        return self._lease_write(
            "PUT",
            _lease_path(namespace, name),
            body,
            f"replace lease {object_key(namespace, name)}",
        )

    def write(self, method: str, path: str, body: Obj, operation: str) -> dict[str, Any]:
        """A JSON write (POST, PUT) at `path`; the object the server answers with."""
        return dict(json.loads(self._call(method, path, body, "application/json", operation)))

    def _lease_write(self, method: str, path: str, body: Obj, operation: str) -> dict[str, Any]:
        try:
            return self.write(method, path, body, operation)
        except ConflictError as exc:
            raise LeaseConflictError(str(exc)) from exc


def _stamp_type(items: list[Any], api_version: object, list_kind: object) -> None:
    """Give each object of `items` that lacks them the list's `apiVersion` and its kind
    (`PodGroupList` -> `PodGroup`)."""
    if not isinstance(api_version, str) or not isinstance(list_kind, str):
        return
    kind = list_kind.removesuffix("List")
    for item in items:
        if isinstance(item, dict) and "apiVersion" not in item:
            item["apiVersion"] = api_version
            item["kind"] = kind
