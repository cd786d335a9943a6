"""Upstream PodGroups (scheduling.k8s.io) read as gangs, the condition written on them, and the
pod's group read from spec.schedulingGroup (DESIGN §15)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.objkey import key_of, object_key
from scheduler.placement import TopologyConstraint
from scheduler.runtime.cluster.cache import WORKLOADS, ClusterCache
from scheduler.runtime.cluster.groups import WorkloadGang, group_key, workload_gang
from scheduler.runtime.cluster.podinfo import read_pod
from scheduler.runtime.cluster.upstream import (
    condition_type,
    initially_scheduled,
    members_disagree,
    parse_upstream_group,
    parse_workload_group,
)
from tests.builders.pods import pod
from tests.builders.workloads import upstream_podgroup

LEVELS = ("topology.kubernetes.io/zone", "gputopo.io/rack")


def _read(**spec: Any) -> Any:
    body = upstream_podgroup("g", 3)
    body["spec"].update(spec)
    return parse_upstream_group(body, levels=LEVELS)


def test_a_basic_group_keeps_its_topology_constraint() -> None:
    group = _read(
        schedulingPolicy={"basic": {}},
        schedulingConstraints={"topology": [{"key": "gputopo.io/rack"}]},
    )
    assert group.error is None
    assert (group.basic, group.min_member) == (True, 1)
    assert group.topology is not None
    assert (group.topology.label, group.topology.required) == ("gputopo.io/rack", True)


def test_a_gang_reads_every_field() -> None:
    group = _read(
        schedulingConstraints={"topology": [{"key": "gputopo.io/rack"}]},
        priorityClassName="high",
        priority=1000,
        disruptionMode={"all": {}},
        preemptionPolicy="Never",
    )
    assert group.error is None
    assert (group.key, group.min_member, group.basic) == (
        group_key("default", "g", upstream=True),
        3,
        False,
    )
    assert group.topology == TopologyConstraint(label="gputopo.io/rack", required=True)
    assert (group.priority, group.whole, group.never_preempts) == (1000, True, True)
    assert group.title == "PodGroup default/g (scheduling.k8s.io)"


@pytest.mark.parametrize(("mode", "whole"), [("Pod", False), ("PodGroup", True)])
def test_a_136_disruption_mode_is_a_string(mode, whole) -> None:
    """Kubernetes 1.36 (`v1alpha2`) stores `disruptionMode` as `Pod` (its default) or
    `PodGroup`, where 1.37 has the union `{single: {}}` or `{all: {}}` (seen on a real 1.36.3
    server: `scripts/realk8s/check-1.36.sh`)."""
    body = upstream_podgroup("g", 3, version="v1alpha2", disruptionMode=mode)
    group = parse_upstream_group(body, levels=LEVELS)
    assert group.error is None
    assert group.whole is whole


def test_basic_is_no_gang_and_priority_without_a_class_is_the_members() -> None:
    group = _read(schedulingPolicy={"basic": {}}, priority=0, disruptionMode={"single": {}})
    assert (group.error, group.basic, group.min_member, group.priority) == (None, True, 1, None)
    assert group.whole is False


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        pytest.param(
            {"schedulingPolicy": {"elastic": {}}},
            "spec.schedulingPolicy: must set exactly one of basic, gang (got elastic)",
            id="unknown policy",
        ),
        pytest.param(
            {"schedulingPolicy": {"gang": {"minCount": 0}}},
            "spec.schedulingPolicy.gang.minCount: must be a positive integer, got 0",
            id="minCount 0",
        ),
        pytest.param(
            {"schedulingPolicy": {"gang": {}}},
            "spec.schedulingPolicy.gang.minCount",
            id="no minCount",
        ),
        pytest.param(
            {"disruptionMode": "Whole"},
            "spec.disruptionMode: must be Pod or PodGroup, got 'Whole'",
            id="unknown 1.36 string mode",
        ),
        pytest.param(
            {"disruptionMode": {"single": {}, "all": {}}},
            "spec.disruptionMode: must set exactly one of single, all (got all, single)",
            id="two modes",
        ),
        pytest.param(
            {"schedulingConstraints": {"topology": [{"key": "a"}, {"key": "b"}]}},
            "spec.schedulingConstraints.topology: at most one",
            id="two keys",
        ),
        pytest.param(
            {"schedulingConstraints": {"topology": [{"key": "example.com/pod"}]}},
            "spec.schedulingConstraints.topology[0].key: example.com/pod is not a configured "
            "topology level",
            id="unknown level",
        ),
        pytest.param(
            {"priorityClassName": "high", "priority": "x"},
            "spec.priority: must be an integer",
            id="bad priority",
        ),
        pytest.param(
            {"preemptionPolicy": "Sometimes"},
            "spec.preemptionPolicy: must be one of",
            id="bad policy",
        ),
        pytest.param(
            {"resourceClaims": [{"name": "c"}]},
            "spec.resourceClaims[0]: must set exactly one of resourceClaimName, "
            "resourceClaimTemplateName",
            id="group claim naming nothing",
        ),
        pytest.param(
            {
                "resourceClaims": [
                    {"name": "c", "resourceClaimName": "x", "resourceClaimTemplateName": "t"}
                ]
            },
            "spec.resourceClaims[0]: must set exactly one of",
            id="group claim naming both",
        ),
        pytest.param(
            {
                "resourceClaims": [
                    {"name": "c", "resourceClaimName": "x"},
                    {"name": "c", "resourceClaimName": "y"},
                ]
            },
            "spec.resourceClaims[1].name: 'c' named twice",
            id="group claim twice",
        ),
        pytest.param(
            {"resourceClaims": [{"resourceClaimName": "x"}]},
            "spec.resourceClaims[0].name: must name the claim",
            id="group claim without a name",
        ),
        pytest.param(
            {"parentCompositePodGroupName": ["cpg"]},
            "spec.parentCompositePodGroupName: must be a name",
            id="parent not a name",
        ),
    ],
)
def test_a_malformed_or_unsupported_group_names_the_object_and_field(spec, field) -> None:
    error = _read(**spec).error
    assert error is not None
    assert error.startswith("invalid PodGroup default/g (scheduling.k8s.io): ")
    assert field in error


_VALUES = st.none() | st.booleans() | st.integers(-2, 3) | st.sampled_from(["", "x", "Never"])
_UNIONS = st.dictionaries(
    st.sampled_from(["gang", "basic", "all", "single", "elastic"]),
    st.none() | st.just({}) | st.fixed_dictionaries({"minCount": _VALUES}),
    max_size=2,
)
_SPECS = st.dictionaries(
    st.sampled_from(
        ["schedulingPolicy", "disruptionMode", "priority", "priorityClassName", "preemptionPolicy"]
    ),
    _VALUES | _UNIONS,
) | st.fixed_dictionaries(
    {
        "schedulingConstraints": st.fixed_dictionaries(
            {"topology": st.lists(_UNIONS | st.just({"key": "gputopo.io/rack"}), max_size=2)}
        )
    }
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_SPECS)
def test_reading_never_raises_and_a_usable_group_has_a_positive_minimum(spec) -> None:
    group = parse_upstream_group({"metadata": {"name": "g"}, "spec": spec})
    assert group.error is not None or group.min_member >= 1
    assert group.error is None or group.error.startswith("invalid PodGroup default/g")


@pytest.mark.parametrize(
    ("api_version", "expected"),
    [
        pytest.param("scheduling.k8s.io/v1beta1", "PodGroupInitiallyScheduled", id="1.37 beta"),
        pytest.param("scheduling.k8s.io/v1alpha3", "PodGroupInitiallyScheduled", id="1.37 alpha"),
        pytest.param("scheduling.k8s.io/v1alpha2", "PodGroupScheduled", id="1.36"),
    ],
)
def test_the_condition_type_follows_the_version(api_version, expected) -> None:
    assert condition_type({"apiVersion": api_version}) == expected


def test_the_condition_waits_then_turns_true_and_stays() -> None:
    group = _read()
    assert initially_scheduled(group, bound=0, complete=False, waiting="", now="t0") is None
    waiting = initially_scheduled(group, bound=0, complete=False, waiting="no room", now="t1")
    assert waiting == {
        "type": "PodGroupInitiallyScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "no room",
        "lastTransitionTime": "t1",
    }
    obj = {**group.obj, "status": {"conditions": [waiting]}}
    group = parse_upstream_group(obj, levels=LEVELS)
    again = initially_scheduled(group, bound=0, complete=False, waiting="still none", now="t2")
    assert again is not None
    assert (again["message"], again["lastTransitionTime"]) == ("still none", "t1")
    done = initially_scheduled(group, bound=3, complete=True, waiting="", now="t3")
    assert done is not None
    assert (done["status"], done["reason"], done["lastTransitionTime"]) == (
        "True",
        "Scheduled",
        "t3",
    )
    group = parse_upstream_group({**group.obj, "status": {"conditions": [done]}}, levels=LEVELS)
    assert initially_scheduled(group, bound=1, complete=False, waiting="lost one", now="t4") == done


def test_group_claims_are_read_by_name_and_what_they_name() -> None:
    group = _read(
        resourceClaims=[
            {"name": "nvl", "resourceClaimName": "shared-nvl"},
            {"name": "scratch", "resourceClaimTemplateName": "two-gpus"},
        ]
    )
    assert group.error is None
    assert [(c.name, c.claim_name, c.template_name) for c in group.claims] == [
        ("nvl", "shared-nvl", None),
        ("scratch", None, "two-gpus"),
    ]
    assert group.claims[0].matches({"name": "nvl", "resourceClaimName": "shared-nvl"})
    assert not group.claims[0].matches({"name": "other", "resourceClaimName": "shared-nvl"})
    assert not group.claims[1].matches({"name": "scratch", "resourceClaimName": "two-gpus"})


def test_an_unusable_group_reads_as_a_scheduler_error() -> None:
    group = _read(resourceClaims=[{"name": "c"}])
    found = initially_scheduled(group, bound=0, complete=False, waiting="", now="t")
    assert found is not None
    assert (found["status"], found["reason"]) == ("False", "SchedulerError")


def _pod(**meta_and_spec: Any) -> dict[str, Any]:
    body = pod("p")
    body["metadata"]["labels"] = meta_and_spec.pop("labels", {})
    body["spec"].update(meta_and_spec)
    return body


def test_a_pod_joins_the_upstream_group_it_names() -> None:
    info = read_pod(_pod(schedulerName="s", schedulingGroup={"podGroupName": "g"}), "s")
    assert info.error is None
    assert info.group_key == group_key("default", "g", upstream=True)
    assert info.group_key != group_key("default", "g")


def test_a_pod_naming_both_apis_is_refused() -> None:
    body = _pod(
        schedulerName="s",
        schedulingGroup={"podGroupName": "up"},
        labels={"scheduling.x-k8s.io/pod-group": "ours"},
    )
    info = read_pod(body, "s")
    assert info.group_key is None
    assert info.error is not None
    assert "names two pod groups, ours (label scheduling.x-k8s.io/pod-group" in info.error
    assert "up (spec.schedulingGroup.podGroupName, scheduling.k8s.io)" in info.error


def test_a_pod_of_a_1_35_workload_joins_its_pod_group_and_replica() -> None:
    ref = {"name": "w", "podGroup": "workers"}
    plain = read_pod(_pod(schedulerName="s", workloadRef=ref), "s")
    replica = read_pod(_pod(schedulerName="s", workloadRef={**ref, "podGroupReplicaKey": "1"}), "s")
    assert plain.error is None
    assert replica.error is None
    assert plain.group_key == "default/w/workers@workloads.scheduling.k8s.io"
    assert replica.group_key == "default/w/workers/1@workloads.scheduling.k8s.io"
    gang = workload_gang(replica.group_key)
    assert gang == WorkloadGang("default", "w", "workers", "1")
    assert gang.key == replica.group_key
    assert workload_gang(group_key("default", "w", upstream=True)) is None


@pytest.mark.parametrize(
    ("ref", "field"),
    [
        ({"podGroup": "g"}, "spec.workloadRef.name: must be a name, got None"),
        ({"name": "w", "podGroup": ""}, "spec.workloadRef.podGroup: must be a name"),
        ({"name": "w", "podGroup": "g", "podGroupReplicaKey": 3}, "podGroupReplicaKey: must be"),
        ("w", "spec.workloadRef: must be an object"),
    ],
)
def test_a_malformed_workload_ref_names_the_field(ref: object, field: str) -> None:
    info = read_pod(_pod(schedulerName="s", workloadRef=ref), "s")
    assert info.group_key is None
    assert info.error is not None
    assert field in info.error


def test_a_pod_naming_a_workload_and_a_podgroup_is_refused() -> None:
    body = _pod(
        schedulerName="s",
        schedulingGroup={"podGroupName": "up"},
        workloadRef={"name": "w", "podGroup": "g", "podGroupReplicaKey": "0"},
    )
    info = read_pod(body, "s")
    assert info.error is not None
    assert (
        "names two pod groups, up (spec.schedulingGroup.podGroupName, scheduling.k8s.io) and "
        "w/g/0 (spec.workloadRef, scheduling.k8s.io/v1alpha1)" in info.error
    )


def _workload(**groups: object) -> dict[str, Any]:
    return {
        "metadata": {"name": "w", "namespace": "default", "uid": "u1"},
        "spec": {
            "podGroups": [{"name": name, "policy": policy} for name, policy in groups.items()]
        },
    }


def test_a_workload_pod_group_reads_as_a_gang_or_basic() -> None:
    workload = _workload(workers={"gang": {"minCount": 4}}, tasks={"basic": {}})
    gang = parse_workload_group(workload, WorkloadGang("default", "w", "workers", "0"))
    assert gang.error is None
    assert (gang.min_member, gang.basic, gang.uid) == (4, False, "u1")
    assert gang.key == "default/w/workers/0@workloads.scheduling.k8s.io"
    assert gang.title == (
        "pod group workers of Workload default/w (scheduling.k8s.io/v1alpha1, replica key 0)"
    )
    assert (gang.min_field, gang.kind, gang.upstream) == ("minCount", "Workload", False)
    basic = parse_workload_group(workload, WorkloadGang("default", "w", "tasks", ""))
    assert (basic.error, basic.basic, basic.min_member) == (None, True, 1)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"podGroups": [{"name": "x", "policy": {"basic": {}}}]}, "no pod group 'workers'"),
        ({"podGroups": "workers"}, "spec.podGroups: must be a list"),
        (
            {"podGroups": [{"name": "workers", "policy": {"basic": {}, "gang": {"minCount": 2}}}]},
            "spec.podGroups[0].policy: must set exactly one of basic, gang (got basic, gang)",
        ),
        (
            {"podGroups": [{"name": "workers", "policy": {"gang": {"minCount": 0}}}]},
            "spec.podGroups[0].policy.gang.minCount: must be a positive integer, got 0",
        ),
        ({"podGroups": [{"name": "workers"}]}, "spec.podGroups[0].policy: must be an object"),
    ],
)
def test_a_malformed_workload_names_the_object_and_field(spec: dict[str, Any], field: str) -> None:
    workload = {"metadata": {"name": "w", "namespace": "default"}, "spec": spec}
    group = parse_workload_group(workload, WorkloadGang("default", "w", "workers", ""))
    assert group.error is not None
    assert group.error.startswith("invalid Workload default/w: ")
    assert field in group.error


def test_the_cache_reads_a_workloads_gangs_when_both_the_workload_and_members_are_known() -> None:
    cache = ClusterCache("s")
    ref = {"name": "w", "podGroup": "workers", "podGroupReplicaKey": "0"}
    member = _pod(schedulerName="s", workloadRef=ref)
    cache.upsert_pod(member)
    gkey = cache.pods[key_of(member)].group_key
    assert gkey is not None
    assert gkey not in cache.groups
    [group] = cache.upsert_workload(_workload(workers={"gang": {"minCount": 2}}))
    assert (group.key, group.min_member) == (gkey, 2)
    assert cache.groups[gkey] is group
    assert list(cache.keys_of(WORKLOADS)) == ["default/w"]
    assert list(cache.keys_of("podgroups")) == []  # never listed as our PodGroups
    # a member of another replica arriving later finds the Workload
    other = _pod(schedulerName="s", workloadRef={**ref, "podGroupReplicaKey": "1"})
    other["metadata"]["name"] = "q"
    cache.upsert_pod(other)
    assert cache.groups[cache.pods[key_of(other)].group_key].min_member == 2  # type: ignore[index]
    assert len(cache.delete_workload(object_key("default", "w"))) == 2
    assert gkey not in cache.groups
    assert list(cache.keys_of(WORKLOADS)) == []


def _spec(**spec: Any) -> dict[str, Any]:
    return {"spec": spec}


_LEAD = "all pods in a single pod group should have the same"


@pytest.mark.parametrize(
    ("root", "pods", "expected"),
    [
        pytest.param(_spec(priority=0), [_spec(), _spec(priority=0)], None, id="all at 0"),
        pytest.param(
            _spec(priority=1000),
            [_spec(priority=1000), _spec()],
            f"{_LEAD} priority as the pod group's priority, got 0 and 1000",
            id="a pod without the group's class",
        ),
        pytest.param(
            _spec(),
            [_spec(priority=5)],
            f"{_LEAD} priority as the pod group's priority, got 5 and 0",
            id="a group without priority counts 0",
        ),
        pytest.param(
            _spec(),
            [_spec(schedulerName="gputopo-scheduler"), _spec()],
            f'{_LEAD} .spec.schedulerName set, got: "default-scheduler" and "gputopo-scheduler"',
            id="two schedulers",
        ),
        pytest.param(
            _spec(),
            [_spec(), _spec(preemptionPolicy="Never")],
            f"{_LEAD} preemption policy, got Never and PreemptLowerPriority",
            id="two preemption policies",
        ),
        pytest.param(
            _spec(preemptionPolicy="Never"),
            [_spec()],
            f"{_LEAD} preemption policy as the pod group's preemption policy, "
            "got PreemptLowerPriority and Never",
            id="the group's preemption policy, not the pod's",
        ),
    ],
)
def test_members_disagree_as_kube_scheduler_words_it(
    root: dict[str, Any], pods: list[dict[str, Any]], expected: str | None
) -> None:
    assert members_disagree(root, pods) == expected


def test_on_1_36_only_the_scheduler_name_is_checked() -> None:
    """kube-scheduler 1.36 (PodGroups `v1alpha2`) checks the pods' schedulerName alone."""
    root = {"apiVersion": "scheduling.k8s.io/v1alpha2", "spec": {"priority": 1000}}
    assert members_disagree(root, [_spec(), _spec(preemptionPolicy="Never")]) is None
    assert members_disagree(root, [_spec(), _spec(schedulerName="x")]) == (
        f'{_LEAD} .spec.schedulerName set, got: "x" and "default-scheduler"'
    )


def test_a_refused_gang_reads_scheduler_error_with_why() -> None:
    group = _read()
    why = f"{_LEAD} priority as the pod group's priority, got 0 and 1000"
    condition = initially_scheduled(
        group, bound=0, complete=False, waiting=why, now="t", refused=True
    )
    assert condition is not None
    assert (condition["reason"], condition["message"]) == ("SchedulerError", why)
    waiting = initially_scheduled(group, bound=0, complete=False, waiting=why, now="t")
    assert waiting is not None
    assert waiting["reason"] == "Unschedulable"
