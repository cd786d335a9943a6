"""Small builders for objects the fake API server tests send."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from kubernetes.client import ApiException, V1Binding, V1Namespace, V1ObjectMeta, V1Pod

M = TypeVar("M")


def model(cls: type[M], data: dict[str, Any]) -> M:
    """A typed client model from a plain dict, for typed call sites."""
    made: M | None = cls.from_dict(data)  # type: ignore[attr-defined]
    assert made is not None
    return made


def make_pod(
    name: str,
    *,
    gpus: int = 0,
    scheduler: str | None = None,
    node: str | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "registry.example/train:1.0"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    spec: dict[str, Any] = {"containers": [container]}
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }


def make_binding(pod: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def make_pdb(
    name: str,
    *,
    match_labels: dict[str, str] | None = None,
    min_available: int | str | None = None,
    max_unavailable: int | str | None = None,
) -> dict[str, Any]:
    """A `policy/v1` PodDisruptionBudget selecting `match_labels` (no selector when None)."""
    spec: dict[str, Any] = {}
    if match_labels is not None:
        spec["selector"] = {"matchLabels": match_labels}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": spec,
    }


def make_eviction(
    pod: str, *, grace: int | None = None, dry_run: bool = False, namespace: str = "default"
) -> dict[str, Any]:
    """A `policy/v1` Eviction of `pod`, with `deleteOptions` when a grace or dry run is given."""
    eviction: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": namespace},
    }
    options: dict[str, Any] = {}
    if grace is not None:
        options["gracePeriodSeconds"] = grace
    if dry_run:
        options["dryRun"] = ["All"]
    if options:
        eviction["deleteOptions"] = options
    return eviction


def make_nrt(node: str, zones: int = 1, version: str = "v1alpha2") -> dict[str, Any]:
    return {
        "apiVersion": f"topology.node.k8s.io/{version}",
        "kind": "NodeResourceTopology",
        "metadata": {"name": node},
        "topologyPolicies": ["None"],
        "zones": [{"name": f"node-{n}", "type": "Node"} for n in range(zones)],
        "attributes": [{"name": "topologyManagerPolicy", "value": "none"}],
    }


def make_gadget_crd(schema: dict[str, Any]) -> dict[str, Any]:
    """A cluster-scoped `Gadget` (example.com/v1) CRD whose one version has `schema`."""
    version = {"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"plural": "gadgets", "kind": "Gadget"},
            "scope": "Cluster",
            "versions": [version],
        },
    }


def make_podgroup(name: str, min_member: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": min_member},
    }


def pod_model(name: str, **kwargs: Any) -> V1Pod:
    """`make_pod` as the client's typed model, for typed call sites."""
    model = V1Pod.from_dict(make_pod(name, **kwargs))
    assert model is not None
    return model


def binding_model(pod: str, node: str) -> V1Binding:
    model = V1Binding.from_dict(make_binding(pod, node))
    assert model is not None
    return model


def namespace_model(name: str) -> V1Namespace:
    return V1Namespace(metadata=V1ObjectMeta(name=name))


def status_body(err: ApiException) -> dict[str, Any]:
    """The `Status` object an API error carried."""
    body: dict[str, Any] = json.loads(err.body or "{}")
    return body
