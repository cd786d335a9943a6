"""`FakeApiServer`: a Kubernetes API server on 127.0.0.1 over HTTP for the real `kubernetes` client.

    with FakeApiServer() as fake:
        core = kubernetes.client.CoreV1Api(fake.api_client())
        fake.add_node("gpu-node-1", capacity={"nvidia.com/gpu": "8"})

It reproduces what `reference/kubernetes-api-notes.md` records about real servers, and offers fault
injection (`down`/`up`, `slow`, `fail_next`), a request log (`requests`) and direct object access
(`get_object`, `put_object`) for assertions. Everything is thread-safe.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from kubernetes import client

from tests.fakeapi import authz, controllers, deletion, disruption, workloads
from tests.fakeapi.api import Api
from tests.fakeapi.errors import ApiError
from tests.fakeapi.handlers import FakeHttpServer
from tests.fakeapi.objects import Ref, format_time, parse_time
from tests.fakeapi.priority import system_classes
from tests.fakeapi.resources import (
    Registry,
    ResourceType,
    builtin_types,
    elasticquota_crd,
    nrt_crd,
    podgroup_crd,
    queue_crd,
)
from tests.fakeapi.store import DELETE, Obj, Store, clone

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
DEFAULT_CAPACITY = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request as the server received it; `body` is the decoded JSON/YAML (None when empty)."""

    method: str
    path: str
    query: Mapping[str, str]
    body: Any
    content_type: str


@dataclass(slots=True)
class _Fault:
    remaining: int
    status: int
    path: re.Pattern[str] | None
    method: str | None
    message: str = field(default="injected failure")


class FakeApiServer:
    """The fake API server; `start()` (or `with`) serves it on an ephemeral port of 127.0.0.1.

    `clock` stamps creation and deletion times; `install_crds` installs the NRT, PodGroup, Queue
    and ElasticQuota CRDs (the built-in PriorityClasses exist either way);
    `history_limit` is the watch events kept per resource (older resource versions get 410);
    `request_log_limit` bounds `requests` to the most recent ones (0 turns the log off).
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        install_crds: bool = True,
        namespaces: tuple[str, ...] = DEFAULT_NAMESPACES,
        history_limit: int = 50_000,
        request_log_limit: int = 100_000,
    ) -> None:
        self.lock = threading.RLock()
        self.registry = Registry()
        for rt in builtin_types():
            self.registry.add(rt)
        self.store = Store(history_limit)
        self.api = Api(self.registry, self.store, clock)
        self._requests: deque[RecordedRequest] = deque(maxlen=request_log_limit)
        self._checks: deque[authz.Attributes] = deque(maxlen=request_log_limit)
        self._faults: list[_Fault] = []
        self._delay = 0.0
        self._generation = 0
        self._stopped = False
        self._http: FakeHttpServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        for ns in namespaces:
            self._create("namespaces", {"metadata": {"name": ns}})
        for pc in system_classes():
            self._create("priorityclasses", pc)
        if install_crds:
            for crd in (nrt_crd(), podgroup_crd(), queue_crd(), elasticquota_crd()):
                self.register_crd(crd)

    # lifecycle -------------------------------------------------------------------------------

    def start(self) -> FakeApiServer:
        self._stopped = False
        self._listen(0)
        return self

    def stop(self) -> None:
        self._stopped = True
        self.down()

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _listen(self, port: int) -> None:
        http = FakeHttpServer(("127.0.0.1", port), self)
        self.port = http.server_address[1]
        thread = threading.Thread(
            target=http.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"fakeapi-{self.port}",
            daemon=True,
        )
        with self.lock:
            self._http, self._thread = http, thread
        thread.start()

    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def configuration(self, token: str | None = None) -> client.Configuration:
        """Client configuration; `token` is sent as a bearer token (the user in
        `authorization_checks`)."""
        config = client.Configuration(host=self.host)
        config.retries = 1
        if token is not None:
            config.api_key = {"authorization": token}
            config.api_key_prefix = {"authorization": "Bearer"}
        return config

    def api_client(self, token: str | None = None) -> client.ApiClient:
        """A real `kubernetes.client.ApiClient` talking to this server."""
        return client.ApiClient(self.configuration(token))

    def write_kubeconfig(self, path: str | Path, namespace: str = "default") -> Path:
        """Write a kubeconfig for `--kubeconfig` flags; returns the path."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.host}}],
            "users": [{"name": "fake", "user": {"token": "fake-token"}}],
            "contexts": [
                {
                    "name": "fake",
                    "context": {"cluster": "fake", "user": "fake", "namespace": namespace},
                }
            ],
            "current-context": "fake",
        }
        target = Path(path)
        target.write_text(yaml.safe_dump(config), encoding="utf-8")
        return target

    # fault injection -------------------------------------------------------------------------

    def down(self) -> None:
        """Go down as a crashed server does: close the listening socket and cut every open
        connection. A watch stream open now ends without its last chunk (the client sees a broken
        connection, never a clean end), and only then are the handlers woken to finish."""
        with self.lock:
            http, thread, self._http, self._thread = self._http, self._thread, None, None
        if http is not None:
            http.shutdown()
            http.server_close()
            http.cut_connections()
        with self.lock:
            self._generation += 1
        self.store.wake_all()
        if thread is not None:
            thread.join(timeout=5)

    def up(self) -> None:
        """Listen again on the same port after `down()`."""
        if self._http is None:
            self._listen(self.port)

    def slow(self, seconds: float) -> None:
        """Delay every request by `seconds` (0 to stop)."""
        with self.lock:
            self._delay = seconds

    def fail_next(
        self,
        n: int = 1,
        status: int = 500,
        path_regex: str | None = None,
        method: str | None = None,
        message: str = "injected failure",
    ) -> None:
        """Answer the next `n` requests matching `path_regex` (and `method`) with `status`."""
        pattern = re.compile(path_regex) if path_regex is not None else None
        with self.lock:
            self._faults.append(
                _Fault(n, status, pattern, method.upper() if method else None, message)
            )

    def before_request(self, method: str, path: str) -> None:
        """Called by the HTTP handler before routing: applies `slow` and raises injected faults."""
        with self.lock:
            delay = self._delay
            fault = next((f for f in self._faults if _fault_matches(f, method, path)), None)
            if fault is not None:
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self._faults.remove(fault)
        if delay > 0:
            time.sleep(delay)
        if fault is not None:
            raise ApiError(fault.status, fault.message)

    def watch_stopper(self) -> Callable[[], bool]:
        """A predicate that turns true when the watch streams open now must end (down or stop)."""
        generation = self._generation
        return lambda: self._stopped or self._generation != generation

    # request log ------------------------------------------------------------------------------

    def record(
        self,
        method: str,
        path: str,
        query: Mapping[str, str],
        raw: bytes,
        content_type: str,
        user: str = "",
    ) -> None:
        if self._requests.maxlen == 0:
            return
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = _yaml_or_text(raw)
        check = authz.resolve(method, path, query, user)
        binding = None if check is None else authz.claim_binding(check, body, self._stored(check))
        with self.lock:
            self._requests.append(RecordedRequest(method, path, dict(query), body, content_type))
            if check is not None:
                self._checks.append(check)
            if binding is not None:
                self._checks.append(binding)

    def _stored(self, check: authz.Attributes) -> Obj | None:
        """The object a write of a ResourceClaim's status addresses, as stored before it."""
        if check.resource != "resourceclaims" or check.subresource != "status":
            return None
        return self.get_object("resourceclaims", check.name, check.namespace)

    def record_created(
        self, method: str, path: str, query: Mapping[str, str], user: str = ""
    ) -> None:
        """A PUT or PATCH created its object: the real server authorized `create` as well."""
        check = authz.resolve(method, path, query, user)
        if check is not None and self._checks.maxlen != 0:
            with self.lock:
                self._checks.append(authz.created(check))

    @property
    def authorization_checks(self) -> list[authz.Attributes]:
        """What RBAC would have been asked for every resource request so far, oldest first."""
        with self.lock:
            return list(self._checks)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request so far (a copy), oldest first."""
        with self.lock:
            return list(self._requests)

    def requests_matching(
        self, method: str | None = None, path_regex: str | None = None
    ) -> list[RecordedRequest]:
        pattern = re.compile(path_regex) if path_regex is not None else None
        return [
            r
            for r in self.requests
            if (method is None or r.method == method.upper())
            and (pattern is None or pattern.search(r.path))
        ]

    def writes(self) -> list[RecordedRequest]:
        """Every request that is not a GET."""
        return [r for r in self.requests if r.method != "GET"]

    def clear_requests(self) -> None:
        with self.lock:
            self._requests.clear()
            self._checks.clear()

    # direct object access ----------------------------------------------------------------------

    def resource(self, key: str) -> ResourceType:
        return self.registry.resolve(key)

    def get_object(self, resource: str, name: str, namespace: str = "") -> Obj | None:
        """A copy of the stored object, or None."""
        found = self.store.get(self.resource(resource), namespace, name)
        return clone(found) if found is not None else None

    def list_objects(self, resource: str, namespace: str | None = None) -> list[Obj]:
        objects, _ = self.store.snapshot(self.resource(resource), namespace)
        return sorted(
            (clone(o) for o in objects),
            key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]),
        )

    def put_object(self, resource: str, obj: Obj) -> Obj:
        """Store `obj` as is, bypassing every rule (uid and creationTimestamp filled if missing)."""
        rt = self.resource(resource)
        new = clone(obj)
        meta = new.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", self.api.now())
        new.setdefault("apiVersion", rt.api_version(rt.versions[-1]))
        new.setdefault("kind", rt.kind)
        ns = meta.get("namespace", "") if rt.namespaced else ""
        stored = self.store.mutate(rt, ns, meta["name"], lambda old: new)
        assert stored is not None
        return clone(stored)

    def delete_object(self, resource: str, name: str, namespace: str = "") -> bool:
        """Remove an object at once, bypassing finalizers and grace; False when it was not there.

        The garbage collector still runs: objects it owned (ownerReferences) go too.
        """
        rt = self.resource(resource)
        removed = self.store.mutate(rt, namespace, name, lambda old: DELETE if old else None)
        if removed is not None:
            deletion.after_delete(self.api, rt, removed)
        return removed is not None

    def compact(self) -> None:
        """Forget the watch history: resuming a watch from an older version gets 410 Gone."""
        self.store.compact()

    def _create(self, resource: str, body: Obj, namespace: str = "") -> Obj:
        rt = self.resource(resource)
        _, created = self.api.create(Ref(rt, rt.versions[-1], namespace), body)
        return created

    def serve_workload_api(
        self,
        versions: Sequence[str] = ("v1beta1",),
        *,
        claims_gate: bool = True,
        composite_gate: bool = False,
    ) -> None:
        """Serve `scheduling.k8s.io` Workloads and PodGroups in `versions`, as a server with
        the GenericWorkload gate does (`workloads`); `claims_gate`: DRAWorkloadResourceClaims
        on (PodGroup `spec.resourceClaims` kept) or off (dropped); `composite_gate`:
        CompositePodGroup on (CompositePodGroups served in `v1alpha3`, when it is)."""
        for rt in workloads.types(versions, claims_gate=claims_gate, composite_gate=composite_gate):
            self.registry.add(rt)

    def register_crd(self, crd: Obj) -> None:
        """Install a CRD as if `kubectl apply` had (it must pass the API server's checks)."""
        self._create("customresourcedefinitions", crd)

    # what other controllers would do ------------------------------------------------------------

    def make_node_ready(
        self,
        name: str,
        capacity: Mapping[str, str] | None = None,
        allocatable: Mapping[str, str] | None = None,
    ) -> Obj:
        """What kubelet and the node lifecycle controller do: report Ready, drop the taint."""
        cap = dict(capacity if capacity is not None else DEFAULT_CAPACITY)
        alloc = dict(allocatable if allocatable is not None else cap)
        change = controllers.node_ready_change(name, cap, alloc, self.api.now())
        stored = self.store.mutate(self.resource("nodes"), "", name, change)
        assert stored is not None
        return clone(stored)

    def add_node(
        self,
        name: str,
        *,
        capacity: Mapping[str, str] | None = None,
        allocatable: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        ready: bool = True,
    ) -> Obj:
        """Create a node as a kubelet registers it, then (by default) make it Ready."""
        node_labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
        }
        node_labels.update(labels or {})
        created = self._create("nodes", {"metadata": {"name": name, "labels": node_labels}})
        return self.make_node_ready(name, capacity, allocatable) if ready else created

    def complete_pod_deletions(self, *, only_expired: bool = False) -> int:
        """What kubelets would do: remove every Terminating pod (`only_expired`: only those whose
        grace period has ended by the server's clock, as when containers ignore SIGTERM).
        Returns how many went."""
        rt = self.resource("pods")
        objects, _ = self.store.snapshot(rt, None)
        now, done = self.api.clock(), 0
        for pod in objects:
            meta = pod["metadata"]
            if not meta.get("deletionTimestamp") or meta.get("finalizers"):
                continue
            if only_expired and parse_time(meta["deletionTimestamp"]) > now:
                continue
            done += self.delete_object("pods", meta["name"], meta.get("namespace", ""))
        return done

    def start_pod(self, name: str, namespace: str = "default", *, ready: bool = True) -> Obj:
        """What a kubelet reports for a bound pod whose containers run: phase Running and the
        Ready condition (False with `ready=False`)."""
        change = controllers.pod_started_change(self.api.now(), ready)
        stored = self.store.mutate(self.resource("pods"), namespace, name, change)
        assert stored is not None
        return clone(stored)

    def settle_pdb(self, name: str, namespace: str = "default") -> Obj:
        """One pass of the disruption controller over a PodDisruptionBudget: count the healthy
        pods it selects and write `status` (observedGeneration, disruptionsAllowed, ...) as
        kube-controller-manager would. A real API server never does this by itself."""
        pods, _ = self.store.snapshot(self.resource("pods"), namespace)
        now = self.api.clock()

        def change(old: Obj | None) -> Obj:
            if old is None:
                raise KeyError(f"fake API server: no PodDisruptionBudget {namespace}/{name}")
            return disruption.settled(old, pods, now, format_time)

        stored = self.store.mutate(self.resource("poddisruptionbudgets"), namespace, name, change)
        assert stored is not None
        return clone(stored)

    def collect_orphaned_pods(self) -> list[str]:
        """What the pod garbage collector (kube-controller-manager's PodGC) does to pods bound to
        a Node that no longer exists: mark each Failed with the `DisruptionTarget` condition
        (reason `DeletionByPodGC`), then delete it with grace 0. Returns the `ns/name` it removed.

        A real PodGC waits 40 s (its quarantine) before it acts; tests call this when they want
        it to have run. Pods with finalizers stay Terminating, as they would on a real server.
        """
        pods_rt, nodes_rt = self.resource("pods"), self.resource("nodes")
        objects, _ = self.store.snapshot(pods_rt, None)
        removed: list[str] = []
        for pod in objects:
            meta, node = pod["metadata"], (pod.get("spec") or {}).get("nodeName")
            if not node or self.store.get(nodes_rt, "", node) is not None:
                continue
            ns, name = meta.get("namespace", ""), meta["name"]
            self.store.mutate(pods_rt, ns, name, controllers.podgc_fail_change(self.api.now()))
            ref = Ref(pods_rt, pods_rt.versions[-1], ns, name)
            try:
                deletion.delete(self.api, ref, None, {"gracePeriodSeconds": "0"})
            except ApiError as exc:
                if exc.code != 404:
                    raise
                continue
            removed.append(f"{ns}/{name}")
        return removed


def _yaml_or_text(raw: bytes) -> Any:
    text = raw.decode(errors="replace")
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _fault_matches(fault: _Fault, method: str, path: str) -> bool:
    if fault.method is not None and fault.method != method:
        return False
    return fault.path is None or fault.path.search(path) is not None


__all__ = ["DEFAULT_CAPACITY", "FakeApiServer", "RecordedRequest", "format_time"]
