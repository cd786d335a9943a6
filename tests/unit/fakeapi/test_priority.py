"""PriorityClasses and the Priority admission plugin (kubernetes-api-notes.md, 12), through the
real client."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client import (
    ApiClient,
    ApiException,
    SchedulingV1Api,
    V1ObjectMeta,
    V1PriorityClass,
)

from tests.builders.fakeapi import make_pod, status_body


@pytest.fixture
def scheduling(kube_client: ApiClient) -> SchedulingV1Api:
    return SchedulingV1Api(kube_client)


def _class(name: str, value: int, **kw: Any) -> V1PriorityClass:
    return V1PriorityClass(metadata=V1ObjectMeta(name=name), value=value, **kw)


def _pod(name: str, **spec: Any) -> dict[str, Any]:
    pod = make_pod(name)
    pod["spec"].update(spec)
    return pod


def _forbidden(err: pytest.ExceptionInfo[ApiException]) -> str:
    body = status_body(err.value)
    assert (err.value.status, body["reason"], body["code"]) == (403, "Forbidden", 403)
    return str(body["message"])


def test_built_in_classes_exist(scheduling):
    listed = scheduling.list_priority_class()
    assert {(c.metadata.name, c.value, c.preemption_policy) for c in listed.items} == {
        ("system-cluster-critical", 2000000000, "PreemptLowerPriority"),
        ("system-node-critical", 2000001000, "PreemptLowerPriority"),
    }


def test_pod_gets_priority_and_preemption_policy_from_its_class(scheduling, core_v1):
    scheduling.create_priority_class(_class("high", 1000, preemption_policy="Never"))
    scheduling.create_priority_class(_class("low", 10))
    high = core_v1.create_namespaced_pod("default", _pod("a", priorityClassName="high"))
    low = core_v1.create_namespaced_pod("default", _pod("b", priorityClassName="low"))
    assert (high.spec.priority, high.spec.preemption_policy) == (1000, "Never")
    assert (low.spec.priority, low.spec.preemption_policy) == (10, "PreemptLowerPriority")


def test_built_in_class_applies_to_pods(core_v1):
    pod = core_v1.create_namespaced_pod(
        "kube-system", _pod("agent", priorityClassName="system-node-critical")
    )
    assert pod.spec.priority == 2000001000


def test_pod_naming_a_missing_class_is_forbidden(fake_api, core_v1):
    with pytest.raises(ApiException) as err:
        core_v1.create_namespaced_pod("default", _pod("p", priorityClassName="gold"))
    assert _forbidden(err) == 'pods "p" is forbidden: no PriorityClass with name gold was found'
    assert status_body(err.value)["details"] == {"name": "p", "kind": "pods"}
    assert fake_api.list_objects("pods") == []


def test_pod_without_a_class_gets_zero_or_the_global_default(scheduling, core_v1):
    plain = core_v1.create_namespaced_pod("default", _pod("a"))
    assert (plain.spec.priority, plain.spec.priority_class_name) == (0, None)
    assert plain.spec.preemption_policy == "PreemptLowerPriority"
    scheduling.create_priority_class(
        _class("batch", 5, global_default=True, preemption_policy="Never")
    )
    pod = core_v1.create_namespaced_pod("default", _pod("b"))
    assert (pod.spec.priority, pod.spec.priority_class_name) == (5, "batch")
    assert pod.spec.preemption_policy == "Never"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param(
            {"priorityClassName": "high", "priority": 7},
            "the integer value of priority (7) must not be provided in pod spec; priority "
            "admission controller computed 1000 from the given PriorityClass name",
            id="priority differs from the class",
        ),
        pytest.param(
            {"priority": 7},
            "the integer value of priority (7) must not be provided in pod spec; priority "
            "admission controller computed 0 from the given PriorityClass name",
            id="priority without a class",
        ),
        pytest.param(
            {"priorityClassName": "high", "preemptionPolicy": "Never"},
            "the string value of PreemptionPolicy (Never) must not be provided in pod spec; "
            "priority admission controller computed PreemptLowerPriority from the given "
            "PriorityClass name",
            id="preemption policy differs from the class",
        ),
    ],
)
def test_pod_sending_a_different_priority_is_forbidden(scheduling, core_v1, spec, message):
    scheduling.create_priority_class(_class("high", 1000))
    with pytest.raises(ApiException) as err:
        core_v1.create_namespaced_pod("default", _pod("p", **spec))
    assert _forbidden(err) == f'pods "p" is forbidden: {message}'


def test_pod_sending_the_computed_priority_is_accepted(scheduling, core_v1):
    scheduling.create_priority_class(_class("high", 1000))
    pod = core_v1.create_namespaced_pod(
        "default", _pod("p", priorityClassName="high", priority=1000)
    )
    assert pod.spec.priority == 1000


def test_generated_pod_names_show_the_prefix_in_the_error(core_v1):
    body = _pod("", priorityClassName="gold")
    body["metadata"] = {"generateName": "train-"}
    with pytest.raises(ApiException) as err:
        core_v1.create_namespaced_pod("default", body)
    assert _forbidden(err).startswith('pods "train-" is forbidden:')


def test_update_omitting_priority_keeps_it(scheduling, core_v1):
    scheduling.create_priority_class(_class("high", 1000))
    core_v1.create_namespaced_pod("default", _pod("p", priorityClassName="high"))
    patched = core_v1.patch_namespaced_pod(
        "p", "default", {"metadata": {"labels": {"x": "y"}}, "spec": {"priority": None}}
    )
    assert (patched.spec.priority, patched.metadata.labels) == (1000, {"x": "y"})


@pytest.mark.parametrize(
    ("pc", "message"),
    [
        pytest.param(
            _class("system-mine", 10),
            "metadata.name: Forbidden: priority class names with 'system-' prefix are reserved "
            "for system use only. error: system-mine is not a known system priority class",
            id="reserved prefix",
        ),
        pytest.param(
            _class("huge", 1000000001),
            "value: Forbidden: maximum allowed value of a user defined priority is 1000000000",
            id="above the user maximum",
        ),
        pytest.param(
            _class("odd", 1, preemption_policy="Sometimes"),
            'preemptionPolicy: Unsupported value: "Sometimes": supported values: "Never", '
            '"PreemptLowerPriority"',
            id="unknown preemption policy",
        ),
    ],
)
def test_invalid_classes_are_422(scheduling, pc, message):
    with pytest.raises(ApiException) as err:
        scheduling.create_priority_class(pc)
    assert err.value.status == 422
    assert status_body(err.value)["message"].endswith(message)


def test_only_one_global_default(scheduling):
    scheduling.create_priority_class(_class("a", 1, global_default=True))
    with pytest.raises(ApiException) as err:
        scheduling.create_priority_class(_class("b", 2, global_default=True))
    assert _forbidden(err) == (
        'priorityclasses.scheduling.k8s.io "b" is forbidden: PriorityClass a is already marked '
        "as default. Only one default can exist"
    )
    scheduling.create_priority_class(_class("b", 2))
    with pytest.raises(ApiException) as err:
        scheduling.patch_priority_class("b", {"globalDefault": True})
    assert err.value.status == 403
    same = scheduling.patch_priority_class("a", {"description": "the default"})
    assert (same.global_default, same.description) == (True, "the default")


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        pytest.param(
            {"value": 2}, "value: Forbidden: may not be changed in an update.", id="value"
        ),
        pytest.param(
            {"preemptionPolicy": "Never"},
            'preemptionPolicy: Invalid value: "Never": field is immutable',
            id="preemption policy",
        ),
    ],
)
def test_value_and_preemption_policy_are_immutable(scheduling, patch, message):
    scheduling.create_priority_class(_class("a", 1))
    with pytest.raises(ApiException) as err:
        scheduling.patch_priority_class("a", patch)
    assert err.value.status == 422
    assert message in status_body(err.value)["message"]


def test_system_classes_cannot_be_deleted_but_others_can(scheduling):
    with pytest.raises(ApiException) as err:
        scheduling.delete_priority_class("system-node-critical")
    assert _forbidden(err) == (
        'priorityclasses.scheduling.k8s.io "system-node-critical" is forbidden: this is a system '
        "priority class and cannot be deleted"
    )
    scheduling.create_priority_class(_class("a", 1))
    scheduling.delete_priority_class("a")
    names = {c.metadata.name for c in scheduling.list_priority_class().items}
    assert names == {"system-cluster-critical", "system-node-critical"}


def test_deleting_every_class_at_once_is_not_modelled(scheduling):
    with pytest.raises(ApiException) as err:
        scheduling.delete_collection_priority_class()
    assert err.value.status == 500
    assert "not modelled" in status_body(err.value)["message"]
