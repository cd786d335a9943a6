"""PATCH in every content type the client sends, and server-side apply."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client import ApiException

from tests.builders.fakeapi import make_nrt, make_pod, status_body
from tests.fakeapi.patch import json_patch, merge_patch, strategic_merge

NRT = ("topology.node.k8s.io", "v1alpha2", "noderesourcetopologies")
APPLY = "application/apply-patch+yaml"


@pytest.mark.parametrize(
    ("target", "patch", "expected"),
    [
        pytest.param(
            {"a": 1, "b": {"c": 2}},
            {"b": {"d": 3}},
            {"a": 1, "b": {"c": 2, "d": 3}},
            id="nested merge",
        ),
        pytest.param({"a": 1, "b": 2}, {"a": None}, {"b": 2}, id="null deletes"),
        pytest.param({"l": [1, 2]}, {"l": [3]}, {"l": [3]}, id="lists replace"),
    ],
)
def test_merge_patch(target, patch, expected):
    assert merge_patch(target, patch) == expected


def test_strategic_merge_merges_conditions_by_type_and_replaces_taints():
    node = {
        "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "False"},
                {"type": "DiskPressure", "status": "False"},
            ]
        },
    }
    patch = {
        "spec": {"taints": [{"key": "b", "effect": "NoSchedule"}]},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "DiskPressure", "$patch": "delete"},
            ]
        },
    }
    result = strategic_merge(node, patch)
    assert result["spec"]["taints"] == [{"key": "b", "effect": "NoSchedule"}]
    assert result["status"]["conditions"] == [{"type": "Ready", "status": "True"}]


def test_strategic_merge_directives():
    target = {"metadata": {"finalizers": ["x"], "labels": {"a": "1", "b": "2"}}}
    patch = {"metadata": {"finalizers": ["y"], "labels": {"$patch": "replace", "c": "3"}}}
    assert strategic_merge(target, patch) == {
        "metadata": {"finalizers": ["x", "y"], "labels": {"c": "3"}}
    }
    dropped = strategic_merge(target, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]}})
    assert dropped["metadata"]["finalizers"] == []


@pytest.mark.parametrize(
    ("ops", "expected"),
    [
        pytest.param(
            [{"op": "add", "path": "/a/-", "value": 3}],
            {"a": [1, 2, 3], "b": {"c": "x"}},
            id="append",
        ),
        pytest.param([{"op": "remove", "path": "/b/c"}], {"a": [1, 2], "b": {}}, id="remove"),
        pytest.param(
            [{"op": "replace", "path": "/a/0", "value": 9}],
            {"a": [9, 2], "b": {"c": "x"}},
            id="replace",
        ),
        pytest.param(
            [{"op": "move", "from": "/b/c", "path": "/d"}],
            {"a": [1, 2], "b": {}, "d": "x"},
            id="move",
        ),
        pytest.param(
            [{"op": "copy", "from": "/b", "path": "/e"}],
            {"a": [1, 2], "b": {"c": "x"}, "e": {"c": "x"}},
            id="copy",
        ),
        pytest.param(
            [{"op": "add", "path": "/b/a~1b", "value": 1}],
            {"a": [1, 2], "b": {"c": "x", "a/b": 1}},
            id="escaped",
        ),
    ],
)
def test_json_patch(ops, expected):
    assert json_patch({"a": [1, 2], "b": {"c": "x"}}, ops) == expected


def test_failed_json_patch_test_op_is_422_and_writes_nothing(core_v1):
    core_v1.create_node({"metadata": {"name": "n1", "labels": {"a": "1"}}})
    ops = [
        {"op": "test", "path": "/metadata/labels/a", "value": "2"},
        {"op": "replace", "path": "/metadata/labels/a", "value": "3"},
    ]
    with pytest.raises(ApiException) as err:
        core_v1.patch_node("n1", ops)
    assert err.value.status == 422
    assert core_v1.read_node("n1").metadata.labels == {"a": "1"}


def test_client_dict_patches_are_strategic_for_builtins(fake_api, core_v1):
    core_v1.create_namespaced_pod("default", make_pod("p1"))
    core_v1.patch_namespaced_pod_status(
        "p1",
        "default",
        {
            "status": {
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
                ]
            }
        },
    )
    core_v1.patch_namespaced_pod_status(
        "p1", "default", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    )
    pod = core_v1.read_namespaced_pod("p1", "default")
    assert sorted(c.type for c in pod.status.conditions) == ["PodScheduled", "Ready"]
    types = {r.content_type for r in fake_api.requests_matching("PATCH")}
    assert types == {"application/strategic-merge-patch+json"}


def test_custom_objects_take_merge_patch_but_not_strategic(custom_objects, kube_client):
    custom_objects.create_cluster_custom_object(*NRT, make_nrt("n1", zones=2))
    patched = custom_objects.patch_cluster_custom_object(
        *NRT, "n1", {"zones": [{"name": "node-0", "type": "Node"}]}
    )
    assert len(patched["zones"]) == 1
    with pytest.raises(ApiException) as err:
        custom_objects.patch_cluster_custom_object(
            *NRT, "n1", {"zones": []}, _content_type="application/strategic-merge-patch+json"
        )
    assert err.value.status == 415


def test_server_side_apply_creates_then_replaces_what_the_manager_owns(fake_api, custom_objects):
    first = make_nrt("n1", zones=2)
    first["attributes"] = [{"name": "a", "value": "1"}]
    resp = custom_objects.patch_cluster_custom_object(
        *NRT,
        "n1",
        first,
        field_manager="gputopo-agent",
        force=True,
        _content_type=APPLY,
        _preload_content=False,
    )
    assert (
        resp.status == 201
    )  # created: the typed call returns None for a 201 to PATCH, as with a real server
    made = custom_objects.get_cluster_custom_object(*NRT, "n1")
    assert made["metadata"]["uid"]
    assert len(made["zones"]) == 2
    second = make_nrt("n1", zones=1)
    del second["attributes"]
    applied = custom_objects.patch_cluster_custom_object(
        *NRT, "n1", second, field_manager="gputopo-agent", force=True, _content_type=APPLY
    )
    assert (len(applied["zones"]), "attributes" in applied) == (1, False)
    managers = [(m["manager"], m["operation"]) for m in applied["metadata"]["managedFields"]]
    assert managers == [("gputopo-agent", "Apply")]
    assert fake_api.requests[-1].query == {"fieldManager": "gputopo-agent", "force": "true"}


def test_server_side_apply_conflicts_with_another_manager_unless_forced(custom_objects):
    custom_objects.patch_cluster_custom_object(
        *NRT, "n1", make_nrt("n1", zones=2), field_manager="nfd", _content_type=APPLY
    )
    with pytest.raises(ApiException) as err:
        custom_objects.patch_cluster_custom_object(
            *NRT, "n1", make_nrt("n1", zones=1), field_manager="gputopo-agent", _content_type=APPLY
        )
    assert err.value.status == 409
    assert 'conflict with "nfd"' in status_body(err.value)["message"]
    forced = custom_objects.patch_cluster_custom_object(
        *NRT,
        "n1",
        make_nrt("n1", zones=1),
        field_manager="gputopo-agent",
        force=True,
        _content_type=APPLY,
    )
    assert len(forced["zones"]) == 1


def test_server_side_apply_needs_a_field_manager(custom_objects):
    with pytest.raises(ApiException) as err:
        custom_objects.patch_cluster_custom_object(*NRT, "n1", make_nrt("n1"), _content_type=APPLY)
    assert err.value.status == 400


def test_apply_of_node_labels_keeps_other_owners_labels(core_v1):
    core_v1.create_node({"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}}})
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1", "labels": {"nvidia.com/gpu.count": "8"}},
    }
    core_v1.patch_node("n1", body, field_manager="gputopo-agent", _content_type=APPLY)
    body["metadata"]["labels"] = {"nvidia.com/gpu.product": "A100"}
    node = core_v1.patch_node("n1", body, field_manager="gputopo-agent", _content_type=APPLY)
    assert node.metadata.labels == {
        "kubernetes.io/hostname": "n1",
        "nvidia.com/gpu.product": "A100",
    }


def test_updates_record_their_manager_and_apply_conflicts_with_it(fake_api, custom_objects):
    custom_objects.create_cluster_custom_object(*NRT, make_nrt("n1", zones=2))
    entries = custom_objects.get_cluster_custom_object(*NRT, "n1")["metadata"]["managedFields"]
    assert [(e["manager"], e["operation"]) for e in entries] == [("OpenAPI-Generator", "Update")]
    with pytest.raises(ApiException) as err:
        custom_objects.patch_cluster_custom_object(
            *NRT, "n1", make_nrt("n1", zones=1), field_manager="gputopo-agent", _content_type=APPLY
        )
    assert 'conflict with "OpenAPI-Generator"' in status_body(err.value)["message"]
    custom_objects.patch_cluster_custom_object(
        *NRT,
        "n1",
        make_nrt("n1", zones=1),
        field_manager="gputopo-agent",
        force=True,
        _content_type=APPLY,
    )
    managers = {
        e["manager"]: e["fieldsV1"]
        for e in custom_objects.get_cluster_custom_object(*NRT, "n1")["metadata"]["managedFields"]
    }
    assert "f:zones" in managers["gputopo-agent"]
    assert "f:zones" not in managers.get("OpenAPI-Generator", {})


def test_apply_of_unchanged_values_shares_ownership_without_conflict(custom_objects):
    custom_objects.create_cluster_custom_object(*NRT, make_nrt("n1", zones=2))
    custom_objects.patch_cluster_custom_object(
        *NRT, "n1", make_nrt("n1", zones=2), field_manager="gputopo-agent", _content_type=APPLY
    )
    entries = custom_objects.get_cluster_custom_object(*NRT, "n1")["metadata"]["managedFields"]
    assert sorted(e["manager"] for e in entries) == ["OpenAPI-Generator", "gputopo-agent"]


def test_patch_with_field_manager_owns_the_labels_it_set(core_v1):
    core_v1.create_node({"metadata": {"name": "n1"}})
    core_v1.patch_node(
        "n1", {"metadata": {"labels": {"nvidia.com/gpu.count": "8"}}}, field_manager="gputopo-agent"
    )
    entries = core_v1.read_node("n1").metadata.managed_fields
    mine = [e for e in entries if e.manager == "gputopo-agent"]
    assert [(e.operation, e.fields_v1) for e in mine] == [
        ("Update", {"f:metadata": {"f:labels": {"f:nvidia.com/gpu.count": {}}}})
    ]


def test_reapplying_the_same_configuration_writes_nothing(fake_api, custom_objects):
    apply = {"field_manager": "gputopo-agent", "force": True, "_content_type": APPLY}
    custom_objects.patch_cluster_custom_object(*NRT, "n1", make_nrt("n1", zones=2), **apply)
    before = fake_api.get_object("noderesourcetopologies", "n1")
    again = custom_objects.patch_cluster_custom_object(*NRT, "n1", make_nrt("n1", zones=2), **apply)
    assert again["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert again["metadata"]["managedFields"] == before["metadata"]["managedFields"]
