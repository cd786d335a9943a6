"""Garbage collection, finalizers, concurrent binds and the pod-by-node index."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from kubernetes.client import ApiException

from tests.builders.fakeapi import (
    binding_model,
    make_binding,
    make_nrt,
    make_pod,
    pod_model,
)

NRT = ("topology.node.k8s.io", "v1alpha2", "noderesourcetopologies")


def _owned_nrt(node_name: str, node_uid: str) -> dict[str, Any]:
    nrt = make_nrt(node_name)
    nrt["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid}
    ]
    return nrt


def test_deleting_a_node_collects_the_nrt_it_owns(fake_api, core_v1, custom_objects):
    node = core_v1.create_node({"metadata": {"name": "n1"}})
    custom_objects.create_cluster_custom_object(*NRT, _owned_nrt("n1", node.metadata.uid))
    custom_objects.create_cluster_custom_object(*NRT, make_nrt("n2"))
    core_v1.delete_node("n1")
    names = [
        o["metadata"]["name"] for o in custom_objects.list_cluster_custom_object(*NRT)["items"]
    ]
    assert names == ["n2"]


def test_orphan_propagation_keeps_dependents_without_the_reference(core_v1, custom_objects):
    node = core_v1.create_node({"metadata": {"name": "n1"}})
    custom_objects.create_cluster_custom_object(*NRT, _owned_nrt("n1", node.metadata.uid))
    core_v1.delete_node("n1", propagation_policy="Orphan")
    kept = custom_objects.get_cluster_custom_object(*NRT, "n1")
    assert kept["metadata"]["ownerReferences"] == []


def test_finalizers_hold_an_object_until_they_are_removed(core_v1):
    core_v1.create_node({"metadata": {"name": "n1", "finalizers": ["example.com/hold"]}})
    held = core_v1.delete_node("n1")
    assert held["metadata"]["deletionTimestamp"]
    assert core_v1.read_node("n1").metadata.deletion_timestamp is not None
    core_v1.patch_node("n1", [{"op": "remove", "path": "/metadata/finalizers"}])
    with pytest.raises(ApiException) as err:
        core_v1.read_node("n1")
    assert err.value.status == 404


def test_delete_precondition_on_resource_version(core_v1):
    core_v1.create_node({"metadata": {"name": "n1"}})
    with pytest.raises(ApiException) as err:
        core_v1.delete_node("n1", body={"preconditions": {"resourceVersion": "1"}})
    assert err.value.status == 409
    assert core_v1.read_node("n1").metadata.name == "n1"


def test_concurrent_binds_of_the_same_pods_succeed_exactly_once_each(fake_api, kube_client):
    from kubernetes.client import CoreV1Api

    core = CoreV1Api(kube_client)
    pods = [f"p{n}" for n in range(20)]
    for name in pods:
        core.create_namespaced_pod("default", pod_model(name))
    codes: list[int] = []
    lock = threading.Lock()
    start = threading.Barrier(4)

    def binder(node: str) -> None:
        start.wait()
        for name in pods:
            try:
                resp = core.create_namespaced_pod_binding(
                    name, "default", binding_model(name, node), _preload_content=False
                )
                code = int(resp.status)  # type: ignore[attr-defined]  # a raw response
            except ApiException as exc:
                code = exc.status
            with lock:
                codes.append(code)

    threads = [threading.Thread(target=binder, args=(f"n{k}",)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert sorted(codes) == [201] * 20 + [409] * 60
    winners = {p["spec"]["nodeName"] for p in fake_api.list_objects("pods", "default")}
    assert winners <= {"n0", "n1", "n2", "n3"}


def test_node_name_index_follows_binds_and_deletes(fake_api, core_v1):
    for n in range(6):
        core_v1.create_namespaced_pod("default", make_pod(f"p{n}"))
    for n in range(4):
        core_v1.create_namespaced_pod_binding(
            f"p{n}", "default", make_binding(f"p{n}", f"n{n % 2}"), _preload_content=False
        )
    core_v1.delete_namespaced_pod("p0", "default", grace_period_seconds=0)

    def on(node: str) -> list[str]:
        resp = core_v1.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={node}", _preload_content=False
        )
        return [p["metadata"]["name"] for p in json.loads(resp.data)["items"]]

    assert (on("n0"), on("n1"), on("")) == (["p2"], ["p1", "p3"], ["p4", "p5"])


def test_deleting_a_node_leaves_its_pods_until_podgc_fails_then_deletes_them(fake_api, core_v1):
    for name in ("n1", "n2"):
        fake_api.add_node(name)
    for n, node in enumerate(("n1", "n2", "n2")):
        core_v1.create_namespaced_pod("default", make_pod(f"p{n}", node=node))
    core_v1.create_namespaced_pod("default", make_pod("unbound"))
    start = core_v1.list_namespaced_pod("default").metadata.resource_version
    core_v1.delete_node("n2")
    # A real API server does not touch pods when their node goes: PodGC does, 40 s later.
    assert {p.metadata.name for p in core_v1.list_namespaced_pod("default").items} == {
        "p0",
        "p1",
        "p2",
        "unbound",
    }
    assert fake_api.collect_orphaned_pods() == ["default/p1", "default/p2"]
    resp = core_v1.list_namespaced_pod(
        "default", watch=True, resource_version=start, timeout_seconds=1, _preload_content=False
    )
    seen = [json.loads(line) for line in resp.read().splitlines() if line]
    p1 = [(e["type"], e["object"]["status"].get("phase")) for e in seen if _named(e, "p1")]
    failed = next(e["object"] for e in seen if _named(e, "p1") and e["type"] == "MODIFIED")
    condition = failed["status"]["conditions"][-1]
    assert p1 == [("MODIFIED", "Failed"), ("DELETED", "Failed")]
    assert (condition["type"], condition["reason"]) == ("DisruptionTarget", "DeletionByPodGC")
    assert condition["message"] == "PodGC: node no longer exists"
    assert {p.metadata.name for p in core_v1.list_namespaced_pod("default").items} == {
        "p0",
        "unbound",
    }


def _named(event: dict[str, Any], name: str) -> bool:
    return bool(event["object"]["metadata"]["name"] == name)
