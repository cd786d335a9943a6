"""Each numbered behaviour of reference/kubernetes-api-notes.md that an API server shows (1-7)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client import (
    ApiException,
    CoreV1Api,
    CustomObjectsApi,
    V1CustomResourceDefinition,
    V1Node,
    V1Taint,
)
from pydantic import ValidationError

from tests.builders.fakeapi import (
    binding_model,
    make_binding,
    make_pod,
    model,
    pod_model,
    status_body,
)
from tests.fakeapi import FakeApiServer

NOT_READY = ("node.kubernetes.io/not-ready", "NoSchedule")


def test_note1_binding_answers_status_so_the_typed_call_raises_although_bound(fake_api, core_v1):
    fake_api.add_node("n1")
    core_v1.create_namespaced_pod("default", make_pod("p1", scheduler="gputopo-scheduler"))
    with pytest.raises(ValidationError, match="target"):
        core_v1.create_namespaced_pod_binding("p1", "default", make_binding("p1", "n1"))
    pod = core_v1.read_namespaced_pod("p1", "default")
    assert pod.spec.node_name == "n1"
    scheduled = [c for c in pod.status.conditions if c.type == "PodScheduled"]
    assert [(c.status, c.last_transition_time is not None) for c in scheduled] == [("True", True)]


def test_note1_binding_without_preload_returns_201_and_a_status_body(fake_api, core_v1):
    core_v1.create_namespaced_pod("default", make_pod("p1"))
    resp = core_v1.create_namespaced_pod_binding(
        "p1", "default", make_binding("p1", "n1"), _preload_content=False
    )
    assert resp.status == 201
    assert resp.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }


def test_note2_second_binding_of_a_bound_pod_is_409_conflict(fake_api, core_v1):
    core_v1.create_namespaced_pod("default", make_pod("p1"))
    core_v1.create_namespaced_pod_binding(
        "p1", "default", make_binding("p1", "n1"), _preload_content=False
    )
    with pytest.raises(ApiException) as err:
        core_v1.create_namespaced_pod_binding(
            "p1", "default", make_binding("p1", "n2"), _preload_content=False
        )
    assert err.value.status == 409
    message = status_body(err.value)["message"]
    assert message.endswith('pod p1 is already assigned to node "n1"')
    assert core_v1.read_namespaced_pod("p1", "default").spec.node_name == "n1"


def test_binding_a_missing_pod_is_404(core_v1):
    with pytest.raises(ApiException) as err:
        core_v1.create_namespaced_pod_binding(
            "ghost", "default", make_binding("ghost", "n1"), _preload_content=False
        )
    assert err.value.status == 404


def test_note3_status_sent_with_create_node_is_dropped(core_v1):
    body = V1Node.from_dict(
        {
            "metadata": {"name": "n1"},
            "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}},
        }
    )
    created = core_v1.create_node(body)
    assert created.status.capacity is None
    assert core_v1.read_node("n1").status.allocatable is None
    core_v1.patch_node_status("n1", {"status": {"capacity": {"nvidia.com/gpu": "8"}}})
    assert core_v1.read_node("n1").status.capacity == {"nvidia.com/gpu": "8"}


def test_note3_spec_changes_through_the_status_subresource_are_ignored(core_v1):
    core_v1.create_node({"metadata": {"name": "n1"}})
    core_v1.patch_node_status(
        "n1", {"spec": {"unschedulable": True}, "status": {"capacity": {"cpu": "4"}}}
    )
    node = core_v1.read_node("n1")
    assert (node.spec.unschedulable, node.status.capacity) == (None, {"cpu": "4"})


def test_note4_new_nodes_carry_the_not_ready_taint(core_v1):
    created = core_v1.create_node({"metadata": {"name": "n1"}})
    assert [(t.key, t.effect) for t in created.spec.taints] == [NOT_READY]


def test_note4_make_node_ready_removes_the_taint_and_reports_ready(fake_api, core_v1):
    taint = V1Taint(key="gputopo.io/dedicated", effect="NoSchedule")
    core_v1.create_node({"metadata": {"name": "n1"}, "spec": {"taints": [taint.to_dict()]}})
    fake_api.make_node_ready("n1", capacity={"cpu": "16", "nvidia.com/gpu": "8"})
    node = core_v1.read_node("n1")
    assert [t.key for t in node.spec.taints] == ["gputopo.io/dedicated"]
    assert node.status.allocatable == {"cpu": "16", "nvidia.com/gpu": "8"}
    ready = [c.status for c in node.status.conditions if c.type == "Ready"]
    assert ready == ["True"]


def _bound_pod(core_v1: CoreV1Api, name: str) -> None:
    core_v1.create_namespaced_pod("default", pod_model(name))
    core_v1.create_namespaced_pod_binding(
        name, "default", binding_model(name, "n1"), _preload_content=False
    )


def test_note5_deleting_a_bound_pod_leaves_it_terminating(fake_api, core_v1):
    _bound_pod(core_v1, "p1")
    answered = core_v1.delete_namespaced_pod("p1", "default")
    assert answered.metadata.deletion_timestamp is not None
    pod = core_v1.read_namespaced_pod("p1", "default")
    assert (
        pod.metadata.deletion_timestamp is not None,
        pod.metadata.deletion_grace_period_seconds,
    ) == (True, 30)
    assert fake_api.complete_pod_deletions() == 1
    with pytest.raises(ApiException) as err:
        core_v1.read_namespaced_pod("p1", "default")
    assert err.value.status == 404


def test_note5_grace_period_zero_deletes_a_bound_pod_at_once(core_v1):
    _bound_pod(core_v1, "p1")
    core_v1.delete_namespaced_pod("p1", "default", grace_period_seconds=0)
    assert core_v1.list_namespaced_pod("default").items == []


def test_note5_unbound_pods_are_deleted_at_once(core_v1):
    core_v1.create_namespaced_pod("default", make_pod("p1"))
    answered = core_v1.delete_namespaced_pod("p1", "default")
    assert answered.metadata.name == "p1"
    assert core_v1.list_namespaced_pod("default").items == []


def test_note5_a_terminating_pod_cannot_be_bound(core_v1):
    _bound_pod(core_v1, "p1")
    core_v1.delete_namespaced_pod("p1", "default")
    with pytest.raises(ApiException) as err:
        core_v1.create_namespaced_pod_binding(
            "p1", "default", make_binding("p1", "n2"), _preload_content=False
        )
    assert err.value.status == 409


def _crd(group: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}", "annotations": annotations},
        "spec": {
            "group": group,
            "names": {"plural": "widgets", "kind": "Widget"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object"}},
                }
            ],
        },
    }


@pytest.mark.parametrize(
    ("group", "annotations", "accepted"),
    [
        pytest.param("demo.k8s.io", {}, False, id="k8s.io group, no annotation"),
        pytest.param("x.kubernetes.io", {}, False, id="kubernetes.io group, no annotation"),
        pytest.param(
            "demo.k8s.io",
            {"api-approved.kubernetes.io": "unapproved, testing"},
            True,
            id="annotated",
        ),
        pytest.param("scheduling.x-k8s.io", {}, True, id="x-k8s.io is not protected"),
    ],
)
def test_note6_protected_crd_groups_need_the_approval_annotation(
    kube_client, group, annotations, accepted
):
    from kubernetes.client import ApiextensionsV1Api

    ext = ApiextensionsV1Api(kube_client)
    crd = model(V1CustomResourceDefinition, _crd(group, annotations))
    if not accepted:
        with pytest.raises(ApiException) as err:
            ext.create_custom_resource_definition(crd)
        assert err.value.status == 422
        assert "api-approved.kubernetes.io" in status_body(err.value)["message"]
        return
    ext.create_custom_resource_definition(crd)
    widgets = CustomObjectsApi(kube_client)
    made: Any = widgets.create_namespaced_custom_object(
        group,
        "v1",
        "default",
        "widgets",
        {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w"}},
    )
    assert made["metadata"]["uid"]


def test_note7_scheduler_name_is_immutable(core_v1):
    core_v1.create_namespaced_pod("default", make_pod("p1", scheduler="gputopo-scheduler"))
    with pytest.raises(ApiException) as err:
        core_v1.patch_namespaced_pod(
            "p1", "default", {"spec": {"schedulerName": "default-scheduler"}}
        )
    assert err.value.status == 422
    assert "Forbidden" in status_body(err.value)["message"]
    assert core_v1.read_namespaced_pod("p1", "default").spec.scheduler_name == "gputopo-scheduler"


def test_note7_node_name_cannot_be_set_by_update_but_can_at_creation(core_v1):
    core_v1.create_namespaced_pod("default", make_pod("p1"))
    with pytest.raises(ApiException) as err:
        core_v1.patch_namespaced_pod("p1", "default", {"spec": {"nodeName": "n1"}})
    assert err.value.status == 422
    created = core_v1.create_namespaced_pod("default", make_pod("p2", node="n1"))
    assert created.spec.node_name == "n1"


def test_fake_server_pins_its_default_namespaces():
    fake = FakeApiServer(install_crds=False, namespaces=("team-a",))
    assert [ns["metadata"]["name"] for ns in fake.list_objects("namespaces")] == ["team-a"]
