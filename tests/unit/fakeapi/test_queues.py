"""Queue (scheduling.gputopo.io) and ElasticQuota (scheduling.x-k8s.io) through the real client:
served like the other CRDs, with status subresources."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import watch
from kubernetes.client import ApiException, CustomObjectsApi

from tests.builders.fakeapi import status_body

QUEUES = ("scheduling.gputopo.io", "v1alpha1", "queues")
EQ = ("scheduling.x-k8s.io", "v1alpha1")


def _queue(name: str, gpus: int, **spec: Any) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": gpus}
    return {
        "apiVersion": "scheduling.gputopo.io/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"min": limits, "max": limits, **spec},
    }


def _quota(name: str, lo: str, hi: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": name},
        "spec": {"min": {"nvidia.com/gpu": lo}, "max": {"nvidia.com/gpu": hi}},
    }


def _events(custom: CustomObjectsApi, rv: str) -> list[tuple[str, str]]:
    w: Any = watch.Watch()  # type: ignore[no-untyped-call]
    stream = w.stream(
        custom.list_cluster_custom_object, *QUEUES, resource_version=rv, timeout_seconds=1
    )
    return [(e["type"], e["object"]["metadata"]["name"]) for e in stream]


def test_queue_is_cluster_scoped_and_listed(custom_objects):
    custom_objects.create_cluster_custom_object(*QUEUES, _queue("team-a", 8, weight=2))
    listed = custom_objects.list_cluster_custom_object(*QUEUES)
    assert [(q["kind"], q["metadata"]["name"], q["spec"]["weight"]) for q in listed["items"]] == [
        ("Queue", "team-a", 2)
    ]
    with pytest.raises(ApiException) as err:
        custom_objects.list_namespaced_custom_object(QUEUES[0], QUEUES[1], "default", QUEUES[2])
    assert (err.value.status, status_body(err.value)["reason"]) == (404, "NotFound")


def test_queue_changes_are_watched(custom_objects):
    rv = custom_objects.list_cluster_custom_object(*QUEUES)["metadata"]["resourceVersion"]
    custom_objects.create_cluster_custom_object(*QUEUES, _queue("team-a", 8))
    custom_objects.patch_cluster_custom_object(*QUEUES, "team-a", {"spec": {"paused": True}})
    custom_objects.delete_cluster_custom_object(*QUEUES, "team-a")
    assert _events(custom_objects, rv) == [
        ("ADDED", "team-a"),
        ("MODIFIED", "team-a"),
        ("DELETED", "team-a"),
    ]


def test_queue_status_is_a_subresource(custom_objects):
    body = _queue("team-a", 8)
    body["status"] = {"used": {"nvidia.com/gpu": 3}}
    created = custom_objects.create_cluster_custom_object(*QUEUES, body)
    assert "status" not in created
    used = {"used": {"nvidia.com/gpu": 4}, "pending": {"units": 1, "resources": {}}}
    custom_objects.patch_cluster_custom_object_status(
        *QUEUES, "team-a", {"status": used, "spec": {"paused": True}}
    )
    custom_objects.patch_cluster_custom_object(
        *QUEUES, "team-a", {"spec": {"weight": 3}, "status": {"used": {"nvidia.com/gpu": 99}}}
    )
    read = custom_objects.get_cluster_custom_object(*QUEUES, "team-a")
    assert read["status"] == used
    assert read["spec"] == {**_queue("team-a", 8)["spec"], "weight": 3}


def test_elasticquota_is_namespaced_with_a_status_subresource(custom_objects):
    custom_objects.create_namespaced_custom_object(
        *EQ, "default", "elasticquotas", _quota("q", "4", "8")
    )
    custom_objects.patch_namespaced_custom_object_status(
        *EQ, "default", "elasticquotas", "q", {"status": {"used": {"nvidia.com/gpu": "2"}}}
    )
    custom_objects.replace_namespaced_custom_object(
        *EQ,
        "default",
        "elasticquotas",
        "q",
        custom_objects.get_namespaced_custom_object(*EQ, "default", "elasticquotas", "q")
        | {"status": {}, "spec": _quota("q", "6", "8")["spec"]},
    )
    read = custom_objects.get_namespaced_custom_object(*EQ, "default", "elasticquotas", "q")
    assert read["status"] == {"used": {"nvidia.com/gpu": "2"}}
    assert read["spec"]["min"] == {"nvidia.com/gpu": "6"}
    listed = custom_objects.list_cluster_custom_object(*EQ, "elasticquotas")
    assert [(q["metadata"]["namespace"], q["metadata"]["name"]) for q in listed["items"]] == [
        ("default", "q")
    ]


def test_installed_queue_crd_keeps_malformed_quantities(custom_objects):
    """The installed CRD keeps every field: the scheduler must judge a bad queue itself."""
    bad = _queue("bad", 8)
    bad["spec"]["max"] = {"nvidia.com/gpu": "lots"}
    created = custom_objects.create_cluster_custom_object(*QUEUES, bad)
    assert created["spec"]["max"] == {"nvidia.com/gpu": "lots"}
