"""Upstream gang objects (`scheduling.k8s.io` PodGroups, pods naming them) for the fake API
server and the real one, and readers of what the scheduler wrote on them."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from tests.builders.scheduler import pod_body
from tests.fakeapi import FakeApiServer

GROUP = "scheduling.k8s.io"
PODGROUPS = f"podgroups.{GROUP}"  # the fake's name of the upstream kind
OURS = "podgroups.scheduling.x-k8s.io"  # ... and of ours


def upstream_podgroup(
    name: str,
    min_count: int | None = None,
    *,
    namespace: str = "default",
    version: str = "v1beta1",
    topology: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A PodGroup: a gang of `min_count`, else `basic`; `topology`: a required node label."""
    policy = {"basic": {}} if min_count is None else {"gang": {"minCount": min_count}}
    body_spec: dict[str, Any] = {"schedulingPolicy": policy, **spec}
    if topology is not None:
        body_spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": body_spec,
    }


def create_upstream_podgroup(custom: client.CustomObjectsApi, body: dict[str, Any]) -> None:
    version = body["apiVersion"].rpartition("/")[2]
    namespace = body["metadata"]["namespace"]
    custom.create_namespaced_custom_object(
        GROUP, version, namespace, "podgroups", body, _preload_content=False
    )


def member_pod(name: str, group: str, gpus: int = 1, **kw: Any) -> dict[str, Any]:
    """A pod of gputopo-scheduler in upstream PodGroup `group`."""
    return pod_body(name, gpus=gpus, schedulingGroup={"podGroupName": group}, **kw)


def upstream_condition(
    fake: FakeApiServer, name: str, kind: str = "PodGroupInitiallyScheduled"
) -> dict[str, Any] | None:
    group = fake.get_object(PODGROUPS, name, "default") or {}
    for condition in (group.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return dict(condition)
    return None


WORKLOADS = f"workloads.{GROUP}"  # the fake's name of 1.35's Workloads


def workload_135(name: str, **pod_groups: int | None) -> dict[str, Any]:
    """A 1.35 Workload (`v1alpha1`): each keyword a pod group, a gang of that minCount or, for
    None, `basic`."""
    groups = [
        {"name": group, "policy": {"basic": {}} if count is None else {"gang": {"minCount": count}}}
        for group, count in pod_groups.items()
    ]
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"podGroups": groups},
    }


def create_workload(custom: client.CustomObjectsApi, body: dict[str, Any]) -> None:
    version = body["apiVersion"].rpartition("/")[2]
    custom.create_namespaced_custom_object(
        GROUP, version, body["metadata"]["namespace"], "workloads", body, _preload_content=False
    )


def create_workload_pod(api: client.ApiClient, body: dict[str, Any]) -> None:
    """Create a pod with `spec.workloadRef`, which the client's models (1.37's) no longer know:
    the body as JSON, unchecked by them."""
    method, url, headers, sent, _ = api.param_serialize(
        "POST",
        "/api/v1/namespaces/{namespace}/pods",
        path_params={"namespace": body["metadata"]["namespace"]},
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body=body,
        auth_settings=["BearerToken"],  # the client's own credentials, as its API calls send
    )
    response = api.call_api(method, url, header_params=headers, body=sent)
    response.read()
    if response.status >= 300:
        raise client.ApiException(http_resp=response)


def workload_pod(
    name: str, workload: str, pod_group: str, replica: str = "", gpus: int = 1, **kw: Any
) -> dict[str, Any]:
    """A pod of gputopo-scheduler in a 1.35 Workload's pod group (`spec.workloadRef`)."""
    ref = {"name": workload, "podGroup": pod_group}
    if replica:
        ref["podGroupReplicaKey"] = replica
    return pod_body(name, gpus=gpus, workloadRef=ref, **kw)


COMPOSITES = f"compositepodgroups.{GROUP}"  # the fake's name of 1.37's CompositePodGroups
_WORKLOAD_REF = {"workloadName": "train", "templateName": "replica"}


def composite_podgroup(
    name: str,
    min_groups: int | None = None,
    *,
    parent: str | None = None,
    topology: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A CompositePodGroup (`v1alpha3`): a gang of `min_groups` children, else `basic`, under
    `parent` (None: a root); `topology`: a required node label for the whole tree."""
    policy = {"basic": {}} if min_groups is None else {"gang": {"minGroupCount": min_groups}}
    body_spec: dict[str, Any] = {
        "schedulingPolicy": policy,
        "workloadRef": dict(_WORKLOAD_REF),
        **spec,
    }
    if parent is not None:
        body_spec["parentCompositePodGroupName"] = parent
    if topology is not None:
        body_spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    return {
        "apiVersion": f"{GROUP}/v1alpha3",
        "kind": "CompositePodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": body_spec,
    }


def child_podgroup(name: str, min_count: int | None, parent: str, **kw: Any) -> dict[str, Any]:
    """An upstream PodGroup under CompositePodGroup `parent` (with the `workloadRef` the API
    server then requires)."""
    return upstream_podgroup(
        name,
        min_count,
        parentCompositePodGroupName=parent,
        workloadRef=dict(_WORKLOAD_REF),
        **kw,
    )


def create_composite(custom: client.CustomObjectsApi, body: dict[str, Any]) -> None:
    custom.create_namespaced_custom_object(
        GROUP,
        "v1alpha3",
        body["metadata"]["namespace"],
        "compositepodgroups",
        body,
        _preload_content=False,
    )
