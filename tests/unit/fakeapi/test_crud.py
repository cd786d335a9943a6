"""get/list/create/replace/delete through the real client: Status errors, selectors, versions."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client import (
    ApiException,
    CoordinationV1Api,
    CoreV1Api,
    CoreV1Event,
    EventsV1Api,
    EventsV1Event,
    V1CustomResourceDefinitionVersion,
    V1Lease,
    V1LeaseSpec,
    V1ObjectMeta,
)

from tests.builders.fakeapi import (
    make_binding,
    make_gadget_crd,
    make_nrt,
    make_pod,
    make_podgroup,
    model,
    namespace_model,
    pod_model,
)

NRT = ("topology.node.k8s.io", "v1alpha2", "noderesourcetopologies")


def _status(err: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(str(err.value.body))
    return body


def test_missing_object_is_404_with_a_notfound_status(core_v1):
    with pytest.raises(ApiException) as err:
        core_v1.read_namespaced_pod("ghost", "default")
    body = _status(err)
    assert err.value.status == 404
    assert {k: body[k] for k in ("kind", "apiVersion", "status", "reason", "code")} == {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": "NotFound",
        "code": 404,
    }
    assert body["message"] == 'pods "ghost" not found'


def test_create_twice_is_409_already_exists(core_v1):
    core_v1.create_namespaced_pod("default", make_pod("p1"))
    with pytest.raises(ApiException) as err:
        core_v1.create_namespaced_pod("default", make_pod("p1"))
    assert (err.value.status, _status(err)["reason"]) == (409, "AlreadyExists")


def test_create_assigns_uid_timestamp_and_resource_version(core_v1):
    pod = core_v1.create_namespaced_pod("default", make_pod("p1"))
    assert pod.metadata.uid
    assert pod.metadata.creation_timestamp is not None
    assert int(pod.metadata.resource_version) > 0
    assert (pod.status.phase, pod.spec.scheduler_name) == ("Pending", "default-scheduler")


def test_generate_name_gets_a_random_suffix(core_v1):
    body = make_pod("")
    body["metadata"] = {"generateName": "job-"}
    pod = core_v1.create_namespaced_pod("default", body)
    assert pod.metadata.name.startswith("job-")
    assert len(pod.metadata.name) == len("job-") + 5


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"metadata": {"name": "p"}, "spec": {"containers": []}}, id="no containers"),
        pytest.param(
            {
                "metadata": {"name": "Bad_Name"},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            },
            id="bad name",
        ),
        pytest.param(
            {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}, id="no image"
        ),
        pytest.param(
            {
                "metadata": {"name": "p"},
                "spec": {
                    "containers": [
                        {
                            "name": "c",
                            "image": "i",
                            "resources": {"requests": {"nvidia.com/gpu": "1"}},
                        }
                    ]
                },
            },
            id="extended resource without limit",
        ),
    ],
)
def test_garbage_is_422_invalid(core_v1, body):
    with pytest.raises(ApiException) as err:
        core_v1.create_namespaced_pod("default", body)
    assert (err.value.status, _status(err)["reason"]) == (422, "Invalid")
    assert core_v1.list_namespaced_pod("default").items == []


def test_replace_with_stale_resource_version_is_409_conflict(core_v1):
    core_v1.create_node({"metadata": {"name": "n1"}})
    first = core_v1.read_node("n1")
    core_v1.patch_node("n1", {"metadata": {"labels": {"a": "1"}}})
    first.metadata.labels = {"b": "2"}
    with pytest.raises(ApiException) as err:
        core_v1.replace_node("n1", first)
    assert (err.value.status, _status(err)["reason"]) == (409, "Conflict")
    fresh = core_v1.read_node("n1")
    fresh.metadata.labels = {"b": "2"}
    replaced = core_v1.replace_node("n1", fresh)
    assert replaced.metadata.labels == {"b": "2"}
    assert int(replaced.metadata.resource_version) > int(fresh.metadata.resource_version)


def test_patch_with_a_stale_resource_version_precondition_is_409(core_v1):
    core_v1.create_node({"metadata": {"name": "n1"}})
    with pytest.raises(ApiException) as err:
        core_v1.patch_node("n1", {"metadata": {"resourceVersion": "1", "labels": {"a": "1"}}})
    assert err.value.status == 409


def test_an_update_that_changes_nothing_keeps_the_resource_version(core_v1):
    core_v1.create_node({"metadata": {"name": "n1", "labels": {"a": "1"}}})
    before = core_v1.read_node("n1").metadata.resource_version
    after = core_v1.patch_node("n1", {"metadata": {"labels": {"a": "1"}}}).metadata.resource_version
    assert after == before


def test_delete_missing_is_404_and_delete_node_answers_a_status(core_v1):
    with pytest.raises(ApiException) as err:
        core_v1.delete_node("ghost")
    assert err.value.status == 404
    core_v1.create_node({"metadata": {"name": "n1"}})
    status = core_v1.delete_node("n1")
    assert (status["status"], status["details"]["name"]) == ("Success", "n1")


def test_create_in_a_missing_namespace_is_404(core_v1):
    with pytest.raises(ApiException) as err:
        core_v1.create_namespaced_pod("nowhere", make_pod("p1"))
    assert (err.value.status, _status(err)["message"]) == (404, 'namespaces "nowhere" not found')


def test_namespace_deletion_removes_its_objects(core_v1):
    core_v1.create_namespace({"metadata": {"name": "team-a"}})
    core_v1.create_namespaced_pod("team-a", make_pod("p1"))
    core_v1.delete_namespace("team-a")
    assert core_v1.list_pod_for_all_namespaces().items == []


def _pods(core: CoreV1Api) -> None:
    core.create_namespace(namespace_model("ml"))
    core.create_namespaced_pod(
        "default", pod_model("a", scheduler="gputopo-scheduler", labels={"app": "x", "tier": "1"})
    )
    core.create_namespaced_pod("default", pod_model("b", labels={"app": "y"}))
    core.create_namespaced_pod(
        "ml", pod_model("c", scheduler="gputopo-scheduler", node="n1", labels={"app": "x"})
    )


@pytest.mark.parametrize(
    ("labels", "fields", "expected"),
    [
        pytest.param("", "", ["a", "b", "c"], id="everything"),
        pytest.param("app=x", "", ["a", "c"], id="label equals"),
        pytest.param("app!=x", "", ["b"], id="label not equals"),
        pytest.param("app in (x, y),tier", "", ["a"], id="set and exists"),
        pytest.param("app notin (y),!tier", "", ["c"], id="notin and does not exist"),
        pytest.param("", "spec.schedulerName=gputopo-scheduler", ["a", "c"], id="schedulerName"),
        pytest.param("", "spec.nodeName=", ["a", "b"], id="unbound pods"),
        pytest.param("", "spec.nodeName=n1", ["c"], id="pods on a node"),
        pytest.param(
            "", "spec.schedulerName=gputopo-scheduler,spec.nodeName=", ["a"], id="pending for us"
        ),
        pytest.param("app=x", "metadata.name!=a", ["c"], id="both selectors"),
    ],
)
def test_list_selectors(core_v1, labels, fields, expected):
    _pods(core_v1)
    listed = core_v1.list_pod_for_all_namespaces(label_selector=labels, field_selector=fields)
    assert [p.metadata.name for p in listed.items] == expected
    assert int(listed.metadata.resource_version) >= max(
        int(p.metadata.resource_version) for p in listed.items
    )


@pytest.mark.parametrize(
    ("labels", "fields"),
    [
        pytest.param("", "spec.containers=x", id="unsupported field"),
        pytest.param("a in (x", "", id="unbalanced set"),
        pytest.param("", "garbage", id="field without operator"),
    ],
)
def test_bad_selectors_are_400(core_v1, labels, fields):
    with pytest.raises(ApiException) as err:
        core_v1.list_pod_for_all_namespaces(label_selector=labels, field_selector=fields)
    assert err.value.status == 400


def test_namespaced_list_sees_only_its_namespace(core_v1):
    _pods(core_v1)
    assert [p.metadata.name for p in core_v1.list_namespaced_pod("ml").items] == ["c"]


def test_list_pages_with_limit_and_continue(core_v1):
    for n in range(5):
        core_v1.create_node({"metadata": {"name": f"n{n}"}})
    first = core_v1.list_node(limit=2)
    assert ([n.metadata.name for n in first.items], first.metadata.remaining_item_count) == (
        ["n0", "n1"],
        3,
    )
    second = core_v1.list_node(limit=10, _continue=first.metadata._continue)
    assert [n.metadata.name for n in second.items] == ["n2", "n3", "n4"]
    assert second.metadata._continue is None


def test_pod_status_subresource_keeps_spec_and_labels(core_v1):
    core_v1.create_namespaced_pod("default", make_pod("p1", labels={"a": "1"}))
    core_v1.patch_namespaced_pod_status(
        "p1", "default", {"metadata": {"labels": {"a": "2"}}, "status": {"phase": "Running"}}
    )
    pod = core_v1.read_namespaced_pod("p1", "default")
    assert (pod.status.phase, pod.metadata.labels) == ("Running", {"a": "1"})


def test_pod_defaults_requests_from_limits_and_qos(core_v1):
    body = make_pod("p1")
    body["spec"]["containers"][0]["resources"] = {
        "limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"}
    }
    pod = core_v1.create_namespaced_pod("default", body)
    assert pod.spec.containers[0].resources.requests == {
        "cpu": "1",
        "memory": "1Gi",
        "nvidia.com/gpu": "2",
    }
    assert pod.status.qos_class == "Guaranteed"


def test_container_ports_default_their_protocol_and_on_the_host_network_their_host_port(core_v1):
    for name, host in (("plain", False), ("host", True)):
        body = make_pod(name)
        body["spec"]["hostNetwork"] = host
        body["spec"]["containers"][0]["ports"] = [{"containerPort": 8080}]
        port = core_v1.create_namespaced_pod("default", body).spec.containers[0].ports[0]
        assert (port.protocol, port.host_port) == ("TCP", 8080 if host else None)


def test_scheduling_gates_can_only_be_removed(core_v1):
    body = make_pod("p1")
    body["spec"]["schedulingGates"] = [{"name": "wait"}]
    core_v1.create_namespaced_pod("default", body)
    with pytest.raises(ApiException) as err:
        core_v1.patch_namespaced_pod(
            "p1", "default", {"spec": {"schedulingGates": [{"name": "wait"}, {"name": "more"}]}}
        )
    assert err.value.status == 422
    ungated = core_v1.patch_namespaced_pod(
        "p1", "default", [{"op": "remove", "path": "/spec/schedulingGates"}]
    )
    assert ungated.spec.scheduling_gates is None


def test_leases_conflict_on_stale_resource_version(kube_client):
    leases = CoordinationV1Api(kube_client)
    lease = V1Lease(
        metadata=V1ObjectMeta(name="gputopo-scheduler"),
        spec=V1LeaseSpec(holder_identity="a", lease_duration_seconds=15),
    )
    created = leases.create_namespaced_lease("kube-system", lease)
    assert created.spec is not None
    created.spec.holder_identity = "b"
    leases.replace_namespaced_lease("gputopo-scheduler", "kube-system", created)
    created.spec.holder_identity = "c"
    with pytest.raises(ApiException) as err:
        leases.replace_namespaced_lease("gputopo-scheduler", "kube-system", created)
    assert err.value.status == 409
    read = leases.read_namespaced_lease("gputopo-scheduler", "kube-system")
    assert read.spec is not None
    assert read.spec.holder_identity == "b"


def test_events_core_and_events_k8s_io(kube_client, fake_api):
    core_event = {
        "metadata": {"generateName": "p1."},
        "involvedObject": {"kind": "Pod", "name": "p1"},
        "reason": "FailedScheduling",
        "message": "no GPUs",
        "type": "Warning",
    }
    new_event = {
        "metadata": {"name": "e2"},
        "eventTime": "2024-01-01T00:00:00.000000Z",
        "reportingController": "gputopo",
        "reportingInstance": "x",
        "action": "Binding",
        "reason": "Scheduled",
        "regarding": {"kind": "Pod", "name": "p1"},
    }
    core = CoreV1Api(kube_client)
    core.create_namespaced_event("default", model(CoreV1Event, core_event))
    EventsV1Api(kube_client).create_namespaced_event("default", model(EventsV1Event, new_event))
    listed = core.list_namespaced_event(
        "default", field_selector="involvedObject.name=p1,reason=FailedScheduling"
    )
    assert [e.message for e in listed.items] == ["no GPUs"]
    stored = fake_api.get_object("events.events.k8s.io", "e2", "default")
    assert stored["reason"] == "Scheduled"


def test_nrt_is_cluster_scoped_and_served_in_both_versions(custom_objects):
    custom_objects.create_cluster_custom_object(*NRT, make_nrt("n1", zones=2))
    old = custom_objects.get_cluster_custom_object(
        "topology.node.k8s.io", "v1alpha1", "noderesourcetopologies", "n1"
    )
    assert (old["apiVersion"], len(old["zones"])) == ("topology.node.k8s.io/v1alpha1", 2)
    listed = custom_objects.list_cluster_custom_object(*NRT)
    assert [(i["kind"], i["metadata"]["name"]) for i in listed["items"]] == [
        ("NodeResourceTopology", "n1")
    ]


def test_podgroup_status_is_a_subresource(custom_objects):
    group = make_podgroup("gang", 4)
    group["status"] = {"phase": "Running"}
    created = custom_objects.create_namespaced_custom_object(
        "scheduling.x-k8s.io", "v1alpha1", "default", "podgroups", group
    )
    assert "status" not in created
    custom_objects.patch_namespaced_custom_object_status(
        "scheduling.x-k8s.io",
        "v1alpha1",
        "default",
        "podgroups",
        "gang",
        {"status": {"phase": "Scheduled", "scheduled": 4}},
    )
    read = custom_objects.get_namespaced_custom_object(
        "scheduling.x-k8s.io", "v1alpha1", "default", "podgroups", "gang"
    )
    assert (read["status"]["phase"], read["spec"]["minMember"]) == ("Scheduled", 4)


def test_unknown_resource_path_is_404(custom_objects):
    with pytest.raises(ApiException) as err:
        custom_objects.list_cluster_custom_object("example.com", "v1", "things")
    assert err.value.status == 404


def test_binding_sets_the_field_selector_view(core_v1):
    core_v1.create_namespaced_pod("default", make_pod("p1"))
    core_v1.create_namespaced_pod_binding(
        "p1", "default", make_binding("p1", "n7"), _preload_content=False
    )
    assert [
        p.metadata.name
        for p in core_v1.list_pod_for_all_namespaces(field_selector="spec.nodeName=n7").items
    ] == ["p1"]


def _strict_crd() -> dict[str, Any]:
    item = {"type": "object", "properties": {"n": {"type": "integer"}}}
    schema = {
        "type": "object",
        "required": ["spec"],
        "properties": {
            "metadata": {"type": "object"},
            "spec": {
                "type": "object",
                "required": ["size"],
                "properties": {
                    "size": {"type": "integer", "minimum": 1, "maximum": 64},
                    "tag": {"type": "string", "pattern": "^[a-z]+$"},
                    "mode": {"type": "string", "enum": ["fast", "slow"]},
                    "quantity": {"x-kubernetes-int-or-string": True},
                    "labels": {
                        "type": "object",
                        "additionalProperties": {"type": "string"},
                        "maxProperties": 3,
                        "x-kubernetes-validations": [
                            {"rule": "self.all(k, k.startsWith('x'))", "message": "x keys only"}
                        ],
                    },
                    "items": {"type": "array", "items": item},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                },
            },
        },
    }
    return make_gadget_crd(schema)


GADGETS = ("example.com", "v1", "gadgets")


def test_custom_resources_are_pruned_to_the_crd_schema(fake_api, custom_objects):
    fake_api.register_crd(_strict_crd())
    body = {
        "apiVersion": "example.com/v1",
        "kind": "Gadget",
        "metadata": {"name": "g", "labels": {"a": "b"}},
        "spec": {
            "size": 3,
            "quantity": "1Gi",
            "typo": True,
            "labels": {"x": "y"},
            "items": [{"n": 1, "junk": 2}],
            "free": {"anything": {"goes": 1}},
            "mode": None,
        },
        "extra": "dropped",
    }
    made = custom_objects.create_cluster_custom_object(*GADGETS, body)
    assert made["spec"] == {
        "size": 3,
        "quantity": "1Gi",
        "labels": {"x": "y"},
        "items": [{"n": 1}],
        "free": {"anything": {"goes": 1}},
    }
    assert ("extra" in made, made["metadata"]["labels"]) == (False, {"a": "b"})


def test_absent_properties_get_their_schema_default(fake_api, custom_objects):
    crd = _strict_crd()
    props = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    props["properties"]["weight"] = {"type": "integer", "minimum": 1, "default": 1}
    fake_api.register_crd(crd)
    body: dict[str, Any] = {
        "apiVersion": "example.com/v1",
        "kind": "Gadget",
        "metadata": {"name": "g"},
    }
    made = custom_objects.create_cluster_custom_object(*GADGETS, {**body, "spec": {"size": 2}})
    assert made["spec"] == {"size": 2, "weight": 1}
    body["metadata"]["name"] = "h"
    kept = custom_objects.create_cluster_custom_object(
        *GADGETS, {**body, "spec": {"size": 2, "weight": 5}}
    )
    assert kept["spec"]["weight"] == 5


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({"size": "three"}, id="wrong type"),
        pytest.param({"mode": "fast"}, id="required field missing"),
        pytest.param({"size": 1, "mode": "medium"}, id="not in enum"),
        pytest.param({"size": 1, "quantity": 1.5}, id="int-or-string given a float"),
        pytest.param({"size": 0}, id="below minimum"),
        pytest.param({"size": 65}, id="above maximum"),
        pytest.param({"size": 1, "tag": "A1"}, id="pattern mismatch"),
        pytest.param({"size": 1, "labels": {"a": "b"}}, id="validation rule false"),
        pytest.param({"size": 1, "labels": {f"x{n}": "b" for n in range(4)}}, id="maxProperties"),
    ],
)
def test_custom_resources_breaking_the_schema_are_422(fake_api, custom_objects, spec):
    fake_api.register_crd(_strict_crd())
    body = {
        "apiVersion": "example.com/v1",
        "kind": "Gadget",
        "metadata": {"name": "g"},
        "spec": spec,
    }
    with pytest.raises(ApiException) as err:
        custom_objects.create_cluster_custom_object(*GADGETS, body)
    assert (err.value.status, _status(err)["reason"]) == (422, "Invalid")
    assert fake_api.list_objects("gadgets") == []


def test_updating_a_crd_keeps_its_objects_and_serves_new_versions(
    fake_api, kube_client, custom_objects
):
    from kubernetes.client import ApiextensionsV1Api

    fake_api.register_crd(_strict_crd())
    body = {
        "apiVersion": "example.com/v1",
        "kind": "Gadget",
        "metadata": {"name": "g"},
        "spec": {"size": 2},
    }
    custom_objects.create_cluster_custom_object(*GADGETS, body)
    ext = ApiextensionsV1Api(kube_client)
    crd = ext.read_custom_resource_definition("gadgets.example.com")
    v2 = crd.spec.versions[0].to_dict()
    v2.update(name="v2", storage=False)
    crd.spec.versions.append(model(V1CustomResourceDefinitionVersion, v2))
    ext.replace_custom_resource_definition("gadgets.example.com", crd)
    read = custom_objects.get_cluster_custom_object("example.com", "v2", "gadgets", "g")
    assert (read["apiVersion"], read["spec"]) == ("example.com/v2", {"size": 2})
