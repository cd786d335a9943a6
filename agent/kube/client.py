"""The agent's Kubernetes API calls, over the real client (credentials: `agent.kube.connect`).

`KubeSink` is the publisher's `TopologySink` (server-side apply of the NRT object, merge patches
of node labels, the node's pod phases for the terminal-pod filter), also used by `kubectl gputopo`
(which also lists Queues and merge-patches their `spec.paused`).
Every failure becomes `PublishError` with the object and the HTTP status, so callers retry without
knowing the client. Responses are read as plain JSON (`_preload_content=False`): no client model
objects leave here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import cached_property, partial
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from agent.dra import CLAIMS
from agent.dra import GROUP as DRA_GROUP
from agent.dra import VERSION as DRA_VERSION
from agent.errors import PublishError
from agent.kube.connect import TRANSPORT_ERRORS, read_or_none, transport_reason
from agent.kube.kinds import (
    PODGROUP_GROUP,
    PODGROUP_VERSION,
    PODGROUPS,
    QUEUE_GROUP,
    QUEUE_PLURAL,
    QUEUE_VERSION,
)
from agent.kube.publisher import FIELD_MANAGER, NodeInfo
from agent.nrt import GROUP, PLURAL, VERSION
from agent.podphase import pod_phases

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
UPSTREAM_GROUP = "scheduling.k8s.io"
UPSTREAM_VERSIONS = ("v1beta1", "v1alpha3", "v1alpha2")
"""The upstream PodGroup versions, newest first, as `scheduler.kubeapi.workloads.VERSIONS`
discovers them (tests/unit/agent/cli/test_kubectl_gangs.py keeps the two alike)."""
WORKLOADS, WORKLOADS_VERSION = "workloads", "v1alpha1"
COMPOSITES, COMPOSITES_VERSION = "compositepodgroups", "v1alpha3"
"""Kubernetes 1.35's gang API: Workloads only, listed where no PodGroup version is served."""


@contextmanager
def api_errors(what: str, server: str = "") -> Iterator[None]:
    """Turn client, HTTP and socket failures of one call into PublishError naming `what` (and,
    when it got no answer, the `server` it tried)."""
    try:
        yield
    except ApiException as exc:
        raise PublishError(f"{what}: HTTP {exc.status} {exc.reason}".rstrip()) from None
    except TRANSPORT_ERRORS as exc:
        where = f"API server {server}" if server else "API server"
        raise PublishError(f"{what}: {where} unreachable: {transport_reason(exc)}") from None


def _json(response: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(response.data or b"{}")
    return data


def _read_or_none(what: str, call: Callable[[], Any], server: str) -> dict[str, Any] | None:
    """The JSON body of a GET, or None on 404."""
    with api_errors(what, server):
        response = read_or_none(call)
        return None if response is None else _json(response)


def list_node_pods(
    core: client.CoreV1Api, node: str, server: str, timeout: float
) -> list[dict[str, Any]]:
    """Every pod bound to `node`, as JSON; `PublishError` naming the node and `server`."""
    with api_errors(f"listing pods on {node}", server):
        response = core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={node}",
            _preload_content=False,
            _request_timeout=timeout,
        )
    items: list[dict[str, Any]] = _json(response).get("items") or []
    return items


class KubeSink:
    """The publisher's writes and reads against the API server."""

    def __init__(self, api_client: client.ApiClient, *, timeout_s: float = 10.0) -> None:
        self._api_client = api_client
        self._custom = client.CustomObjectsApi(api_client)
        self._timeout = timeout_s
        self.server: str = api_client.configuration.host

    @cached_property
    def _core(self) -> client.CoreV1Api:
        """Made on first use: importing CoreV1Api takes seconds; kubectl gputopo never needs it."""
        return client.CoreV1Api(self._api_client)

    def node(self, name: str) -> NodeInfo | None:
        data = _read_or_none(
            f"reading Node {name}",
            lambda: self._core.read_node(
                name, _preload_content=False, _request_timeout=self._timeout
            ),
            self.server,
        )
        if data is None:
            return None
        meta = data.get("metadata") or {}
        return NodeInfo(uid=meta.get("uid"), labels=dict(meta.get("labels") or {}))

    def get_topology(self, name: str) -> dict[str, Any] | None:
        return _read_or_none(
            f"reading NodeResourceTopology {name}",
            lambda: self._custom.get_cluster_custom_object(
                GROUP, VERSION, PLURAL, name, _preload_content=False, _request_timeout=self._timeout
            ),
            self.server,
        )

    def list_topologies(self) -> list[dict[str, Any]]:
        with api_errors("listing NodeResourceTopologies", self.server):
            response = self._custom.list_cluster_custom_object(
                GROUP, VERSION, PLURAL, _preload_content=False, _request_timeout=self._timeout
            )
        items: list[dict[str, Any]] = _json(response).get("items") or []
        return items

    def apply_topology(self, obj: Mapping[str, Any]) -> str | None:
        """Server-side apply; the object's new resourceVersion."""
        name = obj["metadata"]["name"]
        with api_errors(f"applying NodeResourceTopology {name}", self.server):
            response = self._custom.patch_cluster_custom_object(
                GROUP,
                VERSION,
                PLURAL,
                name,
                dict(obj),
                field_manager=FIELD_MANAGER,
                force=True,
                _content_type=APPLY_PATCH,
                _preload_content=False,
                _request_timeout=self._timeout,
            )
        version = (_json(response).get("metadata") or {}).get("resourceVersion")
        return None if version is None else str(version)

    def patch_labels(self, name: str, patch: Mapping[str, str | None]) -> None:
        with api_errors(f"patching labels of Node {name}", self.server):
            self._core.patch_node(
                name,
                {"metadata": {"labels": dict(patch)}},
                field_manager=FIELD_MANAGER,
                _content_type=MERGE_PATCH,
                _preload_content=False,
                _request_timeout=self._timeout,
            )

    def node_pods(self, node: str) -> list[dict[str, Any]]:
        """Every pod bound to `node`, as JSON (phases, share annotations and requests)."""
        return list_node_pods(self._core, node, self.server, self._timeout)

    def pod_phases(self, node: str) -> dict[tuple[str, str], str]:
        """(namespace, name) -> phase of every pod bound to `node`."""
        return pod_phases(self.node_pods(node))

    def list_claims(self) -> list[dict[str, Any]] | None:
        """Every ResourceClaim, or None when the API server serves no resource.k8s.io/v1."""
        data = _read_or_none(
            "listing ResourceClaims",
            lambda: self._custom.list_cluster_custom_object(
                DRA_GROUP, DRA_VERSION, CLAIMS,
                _preload_content=False, _request_timeout=self._timeout,
            ),
            self.server,
        )  # fmt: skip
        if data is None:
            return None
        items: list[dict[str, Any]] = data.get("items") or []
        return items

    def list_queues(self) -> list[dict[str, Any]] | None:
        """Every Queue, or None when the API server does not serve Queues (CRD not installed)."""
        data = _read_or_none(
            "listing Queues",
            lambda: self._custom.list_cluster_custom_object(
                QUEUE_GROUP,
                QUEUE_VERSION,
                QUEUE_PLURAL,
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
            self.server,
        )
        if data is None:
            return None
        items: list[dict[str, Any]] = data.get("items") or []
        return items

    def _list_namespaced(
        self, what: str, group: str, version: str, plural: str, namespace: str | None
    ) -> list[dict[str, Any]] | None:
        """Every object of `group/version/plural` in `namespace` (None: all); None on 404."""
        if namespace is None:
            call = lambda: self._custom.list_cluster_custom_object(  # noqa: E731
                group, version, plural, _preload_content=False, _request_timeout=self._timeout
            )
        else:
            call = lambda: self._custom.list_namespaced_custom_object(  # noqa: E731
                group, version, namespace, plural,
                _preload_content=False, _request_timeout=self._timeout,
            )  # fmt: skip
        data = _read_or_none(what, call, self.server)
        if data is None:
            return None
        items: list[dict[str, Any]] = data.get("items") or []
        return items

    def list_podgroups(self, namespace: str | None) -> list[dict[str, Any]] | None:
        """Our PodGroups in `namespace` (None: all), or None when their CRD is not installed."""
        return self._list_namespaced(
            "listing PodGroups", PODGROUP_GROUP, PODGROUP_VERSION, PODGROUPS, namespace
        )

    def list_composites(self, namespace: str | None) -> list[dict[str, Any]] | None:
        """The CompositePodGroups (`scheduling.k8s.io/v1alpha3`, 1.37 alpha) in `namespace`
        (None: all), or None when the server does not serve them."""
        return self._list_namespaced(
            f"listing {COMPOSITES} ({UPSTREAM_GROUP}/{COMPOSITES_VERSION})",
            UPSTREAM_GROUP, COMPOSITES_VERSION, COMPOSITES, namespace,
        )  # fmt: skip

    def upstream_version(self) -> str | None:
        """The newest `scheduling.k8s.io` version serving PodGroups, as the scheduler discovers
        it; None when the server serves none."""
        for version in UPSTREAM_VERSIONS:
            data = _read_or_none(
                f"discovering {UPSTREAM_GROUP}/{version}",
                partial(
                    self._custom.get_api_resources,
                    UPSTREAM_GROUP,
                    version,
                    _preload_content=False,
                    _request_timeout=self._timeout,
                ),
                self.server,
            )
            resources = (data or {}).get("resources") or ()
            if any(isinstance(r, Mapping) and r.get("name") == PODGROUPS for r in resources):
                return version
        return None

    def list_upstream_podgroups(
        self, namespace: str | None
    ) -> tuple[str, list[dict[str, Any]]] | None:
        """(apiVersion, the upstream PodGroups in `namespace`, None: all), or None when the
        server does not serve them; on a 1.35 server, which serves no PodGroups, its `v1alpha1`
        Workloads instead (as the scheduler reads them)."""
        version, plural = self.upstream_version(), PODGROUPS
        if version is None:
            version, plural = WORKLOADS_VERSION, WORKLOADS
        items = self._list_namespaced(
            f"listing {plural} ({UPSTREAM_GROUP}/{version})",
            UPSTREAM_GROUP, version, plural, namespace,
        )  # fmt: skip
        return None if items is None else (f"{UPSTREAM_GROUP}/{version}", items)

    def list_pods(self, namespace: str | None) -> list[dict[str, Any]]:
        """Every pod in `namespace` (None: all namespaces), as JSON."""
        where = "all namespaces" if namespace is None else f"namespace {namespace}"
        with api_errors(f"listing pods in {where}", self.server):
            if namespace is None:
                response = self._core.list_pod_for_all_namespaces(
                    _preload_content=False, _request_timeout=self._timeout
                )
            else:
                response = self._core.list_namespaced_pod(
                    namespace, _preload_content=False, _request_timeout=self._timeout
                )
        items: list[dict[str, Any]] = _json(response).get("items") or []
        return items

    def patch_queue(self, name: str, patch: Mapping[str, Any]) -> dict[str, Any] | None:
        """Merge-patch the Queue (its spec, never its status); None when there is no such Queue."""
        return _read_or_none(
            f"patching Queue {name}",
            lambda: self._custom.patch_cluster_custom_object(
                QUEUE_GROUP,
                QUEUE_VERSION,
                QUEUE_PLURAL,
                name,
                dict(patch),
                _content_type=MERGE_PATCH,
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
            self.server,
        )

    def create_queue(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        body = {"apiVersion": f"{QUEUE_GROUP}/{QUEUE_VERSION}", "kind": "Queue", **obj}
        with api_errors(f"creating Queue {obj['metadata']['name']}", self.server):
            response = self._custom.create_cluster_custom_object(
                QUEUE_GROUP,
                QUEUE_VERSION,
                QUEUE_PLURAL,
                body,
                _preload_content=False,
                _request_timeout=self._timeout,
            )
        return _json(response)
