"""scheduling.k8s.io Workloads and PodGroups as the fake serves them (what 1.37.2 was seen to
do), through the real client."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client import ApiClient, ApiException, ApisApi, CustomObjectsApi, SchedulingV1Api

from tests.builders.fakeapi import status_body
from tests.builders.workloads import (
    PODGROUPS,
    child_podgroup,
    composite_podgroup,
    create_workload_pod,
    upstream_podgroup,
    workload_135,
    workload_pod,
)
from tests.fakeapi.workloads import PROTECTION_FINALIZER

GROUP = "scheduling.k8s.io"
COMPOSITE_PLURAL = "compositepodgroups"


@pytest.fixture
def custom(fake_api, kube_client: ApiClient) -> CustomObjectsApi:
    fake_api.serve_workload_api(("v1beta1", "v1alpha3"))
    return CustomObjectsApi(kube_client)


def _create(custom: CustomObjectsApi, body: dict[str, Any], plural: str = "podgroups") -> Any:
    version = body["apiVersion"].rpartition("/")[2]
    return custom.create_namespaced_custom_object(GROUP, version, "default", plural, body)


def _refused(custom: CustomObjectsApi, body: dict[str, Any], status: int = 422) -> str:
    with pytest.raises(ApiException) as err:
        _create(custom, body)
    assert err.value.status == status
    return str(status_body(err.value)["message"])


def test_discovery_lists_the_versions_asked_and_prefers_v1(custom, kube_client) -> None:
    groups = {g.name: g for g in ApisApi(kube_client).get_api_versions().groups}
    found = groups[GROUP]
    assert [v.version for v in found.versions] == ["v1", "v1beta1", "v1alpha3"]
    assert found.preferred_version.version == "v1"
    names = {r.name for r in custom.get_api_resources(GROUP, "v1beta1").resources}
    assert {"podgroups", "podgroups/status", "workloads"} <= names
    with pytest.raises(ApiException) as err:
        custom.get_api_resources(GROUP, "v1alpha2")
    assert err.value.status == 404


def test_a_new_podgroup_is_defaulted_admitted_and_protected(custom) -> None:
    body = upstream_podgroup("g", 2)
    body["status"] = {"conditions": [{"type": "PodGroupInitiallyScheduled", "status": "True"}]}
    created = _create(custom, body)
    assert created["spec"]["disruptionMode"] == {"single": {}}
    assert created["spec"]["priority"] == 0
    assert created["metadata"]["finalizers"] == [PROTECTION_FINALIZER]
    assert "status" not in created or not created["status"]


def test_priority_comes_from_the_class(custom, kube_client) -> None:
    SchedulingV1Api(kube_client).create_priority_class({"metadata": {"name": "hi"}, "value": 50})
    created = _create(custom, upstream_podgroup("g", 2, priorityClassName="hi"))
    assert created["spec"]["priority"] == 50
    message = _refused(custom, upstream_podgroup("h", 2, priority=5), status=403)
    assert "priority set in the pod group (5) must match the priority computed (0)" in message
    message = _refused(custom, upstream_podgroup("s", 2, priorityClassName="system-node-critical"))
    assert "spec.priority: Invalid value: 2000001000: must be less than or equal to" in message


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        pytest.param(
            {"gang": {"minCount": 2}, "basic": {}},
            'spec.schedulingPolicy: Invalid value: "{basic, gang}": must specify exactly one of',
            id="both",
        ),
        pytest.param(
            {}, 'spec.schedulingPolicy: Invalid value: "": must specify one of', id="none"
        ),
        pytest.param(
            {"gang": {"minCount": 0}},
            "spec.schedulingPolicy.gang.minCount: Required value",
            id="minCount 0",
        ),
    ],
)
def test_the_scheduling_policy_is_a_union(custom, policy, expected) -> None:
    body = upstream_podgroup("g", 2)
    body["spec"]["schedulingPolicy"] = policy
    assert expected in _refused(custom, body)


def test_status_is_written_only_through_its_subresource(custom, fake_api) -> None:
    _create(custom, upstream_podgroup("g", 2))
    condition = {
        "type": "PodGroupInitiallyScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "waiting",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    custom.patch_namespaced_custom_object_status(
        GROUP, "v1beta1", "default", "podgroups", "g", {"status": {"conditions": [condition]}}
    )
    custom.patch_namespaced_custom_object(
        GROUP, "v1beta1", "default", "podgroups", "g", {"status": {"conditions": []}}
    )
    stored = fake_api.get_object(PODGROUPS, "g", "default") or {}
    assert stored["status"]["conditions"] == [condition]


def test_an_unmodelled_union_member_raises(custom) -> None:
    body = upstream_podgroup("g", 2)
    body["spec"]["schedulingPolicy"] = {"elastic": {}}
    with pytest.raises(ApiException) as err:
        _create(custom, body)
    assert err.value.status == 500
    assert "spec.schedulingPolicy.elastic is not modelled" in status_body(err.value)["message"]


def _claims(*entries: dict[str, str]) -> dict[str, Any]:
    return upstream_podgroup("g", 2, resourceClaims=list(entries))


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        pytest.param(
            [{"name": "a"}],
            'spec.resourceClaims[0]: Invalid value: "": must specify one of: '
            "`resourceClaimName`, `resourceClaimTemplateName`",
            id="naming nothing",
        ),
        pytest.param(
            [{"name": "a", "resourceClaimName": "x", "resourceClaimTemplateName": "t"}],
            "must specify exactly one of: `resourceClaimName`, `resourceClaimTemplateName`",
            id="naming both",
        ),
        pytest.param(
            [{"resourceClaimName": "x"}],
            "spec.resourceClaims[0].name: Required value",
            id="no name",
        ),
        pytest.param(
            [{"name": "a", "resourceClaimName": "x"}, {"name": "a", "resourceClaimName": "y"}],
            'spec.resourceClaims[1]: Duplicate value: {"name":"a"}',
            id="a name twice",
        ),
        pytest.param(
            [{"name": f"c{i}", "resourceClaimName": "x"} for i in range(5)],
            "spec.resourceClaims: Too many: 5: must have at most 4 items",
            id="five",
        ),
    ],
)
def test_group_claims_are_checked_with_the_gate(custom, entries, expected) -> None:
    assert expected in _refused(custom, _claims(*entries))


def test_group_claims_are_immutable_and_their_statuses_name_them(custom, fake_api) -> None:
    _create(custom, _claims({"name": "a", "resourceClaimTemplateName": "t"}))
    with pytest.raises(ApiException) as err:
        custom.patch_namespaced_custom_object(
            GROUP, "v1beta1", "default", "podgroups", "g", {"spec": {"resourceClaims": []}}
        )
    assert (
        "spec.resourceClaims: Invalid value: field is immutable"
        in status_body(err.value)["message"]
    )
    made = {"resourceClaimStatuses": [{"name": "a", "resourceClaimName": "g-a-xyz"}]}
    custom.patch_namespaced_custom_object_status(
        GROUP, "v1beta1", "default", "podgroups", "g", {"status": made}
    )
    stored = fake_api.get_object(PODGROUPS, "g", "default") or {}
    assert stored["status"]["resourceClaimStatuses"] == made["resourceClaimStatuses"]
    wrong = {"resourceClaimStatuses": [{"name": "b", "resourceClaimName": "g-b"}]}
    with pytest.raises(ApiException) as err:
        custom.patch_namespaced_custom_object_status(
            GROUP, "v1beta1", "default", "podgroups", "g", {"status": wrong}
        )
    assert (
        "must match the name of an entry in `spec.resourceClaims`"
        in status_body(err.value)["message"]
    )


def test_without_the_gate_group_claims_are_dropped(fake_api, kube_client) -> None:
    fake_api.serve_workload_api(("v1beta1",), claims_gate=False)
    created = _create(CustomObjectsApi(kube_client), _claims({"name": "a"}))
    assert "resourceClaims" not in created["spec"]


def test_a_workload_templates_claims_are_not_modelled(custom) -> None:
    template = {"name": "t", "schedulingPolicy": {"basic": {}}, "resourceClaims": [{"name": "a"}]}
    body = {
        "apiVersion": f"{GROUP}/v1beta1",
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "default"},
        "spec": {"podGroupTemplates": [template]},
    }
    with pytest.raises(ApiException) as err:
        _create(custom, body, plural="workloads")
    assert err.value.status == 500
    assert "resourceClaims (a Workload's) are not modelled" in status_body(err.value)["message"]


# -- 1.35: v1alpha1 Workloads, named by pods' spec.workloadRef ------------------------------------


@pytest.fixture
def api_135(fake_api, kube_client: ApiClient) -> CustomObjectsApi:
    fake_api.serve_workload_api(("v1alpha1",))
    return CustomObjectsApi(kube_client)


def _workload_refused(custom: CustomObjectsApi, body: dict[str, Any]) -> str:
    with pytest.raises(ApiException) as err:
        _create(custom, body, "workloads")
    assert err.value.status == 422
    return str(status_body(err.value)["message"])


def test_1_35_serves_workloads_alone(api_135) -> None:
    names = {r.name for r in api_135.get_api_resources(GROUP, "v1alpha1").resources}
    assert names == {"workloads"}
    created = _create(api_135, workload_135("w", workers=2, tasks=None), "workloads")
    assert [g["name"] for g in created["spec"]["podGroups"]] == ["workers", "tasks"]
    assert "finalizers" not in created["metadata"]


@pytest.mark.parametrize(
    ("groups", "expected"),
    [
        ([], "spec.podGroups: Required value: must have at least one item"),
        ([{"name": f"g{i}", "policy": {"basic": {}}} for i in range(9)], "Too many: 9"),
        (
            [{"name": "a", "policy": {"basic": {}}}, {"name": "a", "policy": {"basic": {}}}],
            'spec.podGroups[1].name: Duplicate value: "a"',
        ),
        ([{"name": "A", "policy": {"basic": {}}}], 'spec.podGroups[0].name: Invalid value: "A"'),
        ([{"name": "a", "policy": {}}], "spec.podGroups[0].policy: Required value: exactly one"),
        (
            [{"name": "a", "policy": {"basic": {}, "gang": {"minCount": 1}}}],
            "but multiple fields are set",
        ),
        (
            [{"name": "a", "policy": {"gang": {"minCount": 0}}}],
            "spec.podGroups[0].policy.gang.minCount: Invalid value: 0: must be greater than zero",
        ),
    ],
)
def test_a_1_35_workload_is_validated(api_135, groups: list[Any], expected: str) -> None:
    body = workload_135("w")
    body["spec"]["podGroups"] = groups
    assert expected in _workload_refused(api_135, body)


def test_a_1_35_workloads_pod_groups_are_immutable(api_135) -> None:
    _create(api_135, workload_135("w", workers=2), "workloads")
    changed = workload_135("w", workers=3)
    with pytest.raises(ApiException) as err:
        api_135.replace_namespaced_custom_object(
            GROUP, "v1alpha1", "default", "workloads", "w", changed
        )
    assert err.value.status == 422
    message = status_body(err.value)["message"]
    assert message.startswith(
        'Workload.scheduling.k8s.io "w" is invalid: podGroups: Invalid value: '
    )
    assert message.endswith(": field is immutable")


def test_a_pods_workload_ref_is_checked_where_served_and_dropped_elsewhere(
    fake_api, kube_client: ApiClient
) -> None:
    create_workload_pod(kube_client, workload_pod("p", "w", "workers"))
    assert "workloadRef" not in fake_api.get_object("pods", "p", "default")["spec"]
    fake_api.serve_workload_api(("v1alpha1",))
    create_workload_pod(kube_client, workload_pod("q", "w", "workers", "0"))
    kept = fake_api.get_object("pods", "q", "default")["spec"]["workloadRef"]
    assert kept == {"name": "w", "podGroup": "workers", "podGroupReplicaKey": "0"}
    with pytest.raises(ApiException) as err:
        create_workload_pod(kube_client, workload_pod("r", "w", "Workers"))
    assert err.value.status == 422
    assert (
        'spec.workloadRef.podGroup: Invalid value: "Workers"' in status_body(err.value)["message"]
    )


def test_1_35_beside_a_later_version_is_not_modelled(fake_api) -> None:
    with pytest.raises(NotImplementedError, match="v1alpha1"):
        fake_api.serve_workload_api(("v1beta1", "v1alpha1"))


def test_on_136_disruption_mode_is_a_string_defaulted_to_pod(fake_api, kube_client) -> None:
    fake_api.serve_workload_api(("v1alpha2",))
    custom = CustomObjectsApi(kube_client)
    created = _create(custom, upstream_podgroup("g", 2, version="v1alpha2"))
    assert created["spec"]["disruptionMode"] == "Pod"
    whole = _create(
        custom, upstream_podgroup("h", 2, version="v1alpha2", disruptionMode="PodGroup")
    )
    assert whole["spec"]["disruptionMode"] == "PodGroup"
    message = _refused(custom, upstream_podgroup("i", 2, version="v1alpha2", disruptionMode="All"))
    assert 'spec.disruptionMode: Unsupported value: "All": supported values: "Pod", "PodGroup"' in (
        message
    )


# -- CompositePodGroups (1.37 alpha, the CompositePodGroup gate) ----------------------------------


@pytest.fixture
def with_composites(fake_api, kube_client: ApiClient) -> CustomObjectsApi:
    fake_api.serve_workload_api(("v1beta1", "v1alpha3"), composite_gate=True)
    return CustomObjectsApi(kube_client)


def test_composites_are_served_in_v1alpha3_only_with_the_gate(custom, fake_api) -> None:
    """Without the gate a PodGroup's parent is dropped (as 1.37.2 drops it)."""
    names = {r.name for r in custom.get_api_resources(GROUP, "v1alpha3").resources}
    assert "compositepodgroups" not in names
    created = _create(custom, child_podgroup("leaf", 1, "job"))
    assert "parentCompositePodGroupName" not in created["spec"]
    fake_api.registry.remove(GROUP, "podgroups")
    fake_api.registry.remove(GROUP, "workloads")
    fake_api.serve_workload_api(("v1beta1", "v1alpha3"), composite_gate=True)
    names = {r.name for r in custom.get_api_resources(GROUP, "v1alpha3").resources}
    assert {"compositepodgroups", "compositepodgroups/status"} <= names
    beta = {r.name for r in custom.get_api_resources(GROUP, "v1beta1").resources}
    assert "compositepodgroups" not in beta


def test_a_new_composite_is_defaulted_and_admitted(with_composites) -> None:
    created = _create(with_composites, composite_podgroup("job", 2), COMPOSITE_PLURAL)
    assert created["spec"]["disruptionMode"] == {"single": {}}
    assert created["spec"]["priority"] == 0
    assert "finalizers" not in created["metadata"]
    leaf = _create(with_composites, child_podgroup("leaf", 1, "job"))
    assert leaf["spec"]["parentCompositePodGroupName"] == "job"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(
            {"schedulingPolicy": {"gang": {}}},
            "spec.schedulingPolicy.gang.minGroupCount: Required value",
            id="no minGroupCount",
        ),
        pytest.param(
            {"schedulingPolicy": {"gang": {"minGroupCount": -1}}},
            "spec.schedulingPolicy.gang.minGroupCount: Invalid value: -1",
            id="negative",
        ),
        pytest.param(
            {"workloadRef": None},
            "spec.workloadRef: Required value",
            id="no workloadRef",
        ),
        pytest.param(
            {"workloadRef": {"workloadName": "train"}},
            "spec.workloadRef.templateName: Required value",
            id="no template",
        ),
    ],
)
def test_a_malformed_composite_is_refused(with_composites, spec, expected) -> None:
    body = composite_podgroup("job", 2)
    body["spec"].update(spec)
    body["spec"] = {k: v for k, v in body["spec"].items() if v is not None}
    with pytest.raises(ApiException) as err:
        _create(with_composites, body, COMPOSITE_PLURAL)
    assert err.value.status == 422
    assert expected in str(status_body(err.value)["message"])


def test_a_child_podgroup_needs_a_workload_ref_and_keeps_its_parent(with_composites) -> None:
    body = child_podgroup("leaf", 1, "job")
    del body["spec"]["workloadRef"]
    assert (
        "spec.workloadRef: Required value: must be set when parentCompositePodGroupName is set"
        in _refused(with_composites, body)
    )
    _create(with_composites, child_podgroup("leaf", 1, "job"))
    stored = with_composites.get_namespaced_custom_object(
        GROUP, "v1beta1", "default", "podgroups", "leaf"
    )
    stored["spec"]["parentCompositePodGroupName"] = "other"
    with pytest.raises(ApiException) as err:
        with_composites.replace_namespaced_custom_object(
            GROUP, "v1beta1", "default", "podgroups", "leaf", stored
        )
    assert err.value.status == 422
    assert "spec.parentCompositePodGroupName: Invalid value: null: field is immutable" in str(
        status_body(err.value)["message"]
    )


def test_a_composites_spec_is_immutable(with_composites) -> None:
    _create(with_composites, composite_podgroup("job", 2), COMPOSITE_PLURAL)
    stored = with_composites.get_namespaced_custom_object(
        GROUP, "v1alpha3", "default", COMPOSITE_PLURAL, "job"
    )
    stored["spec"]["schedulingPolicy"] = {"gang": {"minGroupCount": 3}}
    with pytest.raises(ApiException) as err:
        with_composites.replace_namespaced_custom_object(
            GROUP, "v1alpha3", "default", COMPOSITE_PLURAL, "job", stored
        )
    assert err.value.status == 422
    assert "spec.schedulingPolicy: Invalid value: null: field is immutable" in str(
        status_body(err.value)["message"]
    )
