"""The rows of `kubectl gputopo gangs` (agent/cli/kubectl_gangs.py), from objects as listed."""

from __future__ import annotations

import pytest

from agent.cli.kubectl_gangs import (
    COMPOSITE_API,
    HEADER,
    NOT_FOUND,
    build_gangs,
    gang_json,
    gang_row,
)
from agent.kube.client import UPSTREAM_VERSIONS

UPSTREAM_API = "scheduling.k8s.io/v1beta1"


def ours(name, min_member=None, *, namespace="default", annotations=None, phase=None, spec=None):
    body = {"minMember": min_member} if min_member is not None else {}
    obj = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
        "spec": body if spec is None else spec,
    }
    return obj | ({"status": {"phase": phase}} if phase else {})


def upstream(name, min_count=None, *, version="v1beta1", topology=None, reason=None, spec=None):
    policy = {"basic": {}} if min_count is None else {"gang": {"minCount": min_count}}
    body = {"schedulingPolicy": policy}
    if topology:
        body["schedulingConstraints"] = {"topology": [{"key": topology}]}
    obj = {
        "apiVersion": f"scheduling.k8s.io/{version}",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": body if spec is None else spec,
    }
    if reason:
        kind = "PodGroupScheduled" if version == "v1alpha2" else "PodGroupInitiallyScheduled"
        obj["status"] = {"conditions": [{"type": "Other", "reason": "Nope"}]}
        obj["status"]["conditions"].append({"type": kind, "status": "False", "reason": reason})
    return obj


def pod(name, *, label=None, group=None, node=None, phase="Pending", namespace="default"):
    obj = {"metadata": {"name": name, "namespace": namespace, "labels": {}}, "spec": {}}
    if label:
        obj["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = label
    if group:
        obj["spec"]["schedulingGroup"] = {"podGroupName": group}
    if node:
        obj["spec"]["nodeName"] = node
    return obj | {"status": {"phase": phase}}


def rows(*args):
    return [gang_row(g) for g in build_gangs(*args)]


def test_both_kinds_with_their_members_counted():
    pods = [
        pod("a-0", label="train", node="n1", phase="Running"),
        pod("a-1", label="train"),
        pod("b-0", group="train", node="n2", phase="Running"),
        pod("b-1", group="train", node="n2", phase="Failed"),
        pod("lone"),
    ]
    groups = [
        ours("train", 2, annotations={"gputopo.io/topology-required": "rack"}, phase="Scheduling")
    ]
    got = rows(groups, [upstream("train", 2, topology="zone", reason="Unschedulable")],
               UPSTREAM_API, pods)  # fmt: skip
    assert got == [
        ("default", "train", "scheduling.k8s.io/v1beta1", "2", "2", "1", "0", "zone",
         "Unschedulable"),
        ("default", "train", "scheduling.x-k8s.io", "2", "2", "1", "1", "rack", "Scheduling"),
    ]  # fmt: skip
    assert len(HEADER) == len(got[0])


def test_basic_group_and_defaults():
    got = rows([ours("solo"), ours("pref", 3, annotations={"gputopo.io/topology-preferred": "h"})],
               [upstream("basic")], UPSTREAM_API, [])  # fmt: skip
    assert got == [
        ("default", "basic", UPSTREAM_API, "-", "0", "0", "0", "-", "-"),
        ("default", "pref", "scheduling.x-k8s.io", "3", "0", "0", "0", "h (preferred)", "-"),
        ("default", "solo", "scheduling.x-k8s.io", "1", "0", "0", "0", "-", "-"),
    ]


def test_a_basic_group_shows_its_topology_key():
    """As the scheduler reads it: a basic group's pods go one by one, in the domain of its
    placed pods."""
    got = rows(None, [upstream("web", topology="rack")], UPSTREAM_API, [])
    assert got == [("default", "web", UPSTREAM_API, "-", "0", "0", "0", "rack", "-")]


def test_the_v1alpha2_condition_is_read():
    got = rows(None, [upstream("g", 2, version="v1alpha2", reason="Scheduled")],
               "scheduling.k8s.io/v1alpha2", [])  # fmt: skip
    assert got == [("default", "g", "scheduling.k8s.io/v1alpha2", "2", "0", "0", "0", "-",
                    "Scheduled")]  # fmt: skip


@pytest.mark.parametrize(
    ("obj", "problem"),
    [
        (ours("g", spec={"minMember": "two"}), "spec.minMember: must be a non-negative integer"),
        (ours("g", spec=["x"]), "spec: must be an object"),
        (ours("g", 2, annotations={"gputopo.io/topology-required": ""}),
         "metadata.annotations[gputopo.io/topology-required]: must name a node label"),
        (upstream("g", 0), "spec.schedulingPolicy.gang.minCount: must be a positive integer"),
        (upstream("g", spec={"schedulingPolicy": {"basic": {}, "gang": {"minCount": 2}}}),
         "spec.schedulingPolicy: must set exactly one of basic, gang (got basic, gang)"),
        (upstream("g", spec={}), "spec.schedulingPolicy: must be an object"),
        (upstream("g", spec={"schedulingPolicy": {"gang": "x"}}),
         "spec.schedulingPolicy.gang.minCount: must be a positive integer, got None"),
        (upstream("g", 2, spec={"schedulingPolicy": {"gang": {"minCount": 2}},
                                "schedulingConstraints": {"topology": [{}]}}),
         "spec.schedulingConstraints.topology[0].key: must name a node label"),
        (upstream("g", spec={"schedulingPolicy": {"gang": {"minCount": 2}},
                             "schedulingConstraints": {"topology": "rack"}}),
         "spec.schedulingConstraints.topology: must be a list"),
        (upstream("g", spec="nonsense"), "spec: must be an object"),
    ],
)  # fmt: skip
def test_a_malformed_group_shows_its_problem_in_the_row(obj, problem):
    is_ours = obj["apiVersion"].startswith("scheduling.x-k8s.io")
    (gang,) = build_gangs([obj] if is_ours else None, None if is_ours else [obj], UPSTREAM_API, [])
    row = gang_row(gang)
    assert row[3] == "?"
    assert row[8].startswith("invalid: ")
    assert problem in row[8]
    assert gang_json(gang)["problem"] == row[8].removeprefix("invalid: ")


def test_pods_naming_a_missing_group_get_a_row():
    pods = [pod("x-0", group="gone", node="n1", phase="Running"), pod("y-0", label="lost")]
    got = rows([], None, None, pods)
    assert got == [
        ("default", "gone", "scheduling.k8s.io", "?", "1", "1", "0", "-", NOT_FOUND),
        ("default", "lost", "scheduling.x-k8s.io", "?", "1", "0", "1", "-", NOT_FOUND),
    ]


def test_json_of_a_gang():
    (gang,) = build_gangs(None, [upstream("g", 2, topology="rack")], UPSTREAM_API,
                          [pod("g-1", group="g"), pod("g-0", group="g", node="n")])  # fmt: skip
    assert gang_json(gang) == {
        "namespace": "default", "name": "g", "api": UPSTREAM_API, "minCount": 2, "basic": False,
        "pods": 2, "bound": 1, "pending": 1, "members": ["g-0", "g-1"],
        "topology": {"key": "rack", "required": True}, "status": None, "problem": None,
        "parent": None,
    }  # fmt: skip


def test_json_names_a_podgroups_parent_in_a_tree():
    child = upstream("w", 2)
    child["spec"]["parentCompositePodGroupName"] = "replica-0"
    (gang,) = build_gangs(None, [child], UPSTREAM_API, [])
    assert gang_json(gang)["parent"] == "replica-0"
    assert gang.problem is None


def test_the_versions_are_the_schedulers():
    pytest.importorskip("numpy")
    from scheduler.kubeapi.workloads import VERSIONS

    assert tuple(v for v, _ in VERSIONS) == UPSTREAM_VERSIONS


def workload(name, **pod_groups):
    groups = [
        {"name": g, "policy": {"basic": {}} if n is None else {"gang": {"minCount": n}}}
        for g, n in pod_groups.items()
    ]
    return {"metadata": {"name": name, "namespace": "default"}, "spec": {"podGroups": groups}}


def ref_pod(name, ref, *, node=None):
    obj = pod(name, node=node, phase="Running" if node else "Pending")
    obj["spec"]["workloadRef"] = ref
    return obj


def test_a_1_35_workload_has_a_row_per_pod_group_and_replica_key():
    pods = [
        ref_pod(
            "r0-a", {"name": "serve", "podGroup": "replica", "podGroupReplicaKey": "0"}, node="n"
        ),
        ref_pod("r0-b", {"name": "serve", "podGroup": "replica", "podGroupReplicaKey": "0"}),
        ref_pod("r1-a", {"name": "serve", "podGroup": "replica", "podGroupReplicaKey": "1"}),
        ref_pod("l-0", {"name": "late", "podGroup": "workers"}),
    ]
    listed = [workload("serve", replica=2, batch=None), {"metadata": {"name": "bad"}, "spec": {}}]
    api = "scheduling.k8s.io/v1alpha1"
    assert rows(None, listed, api, pods) == [
        ("default", "bad", api, "?", "0", "0", "0", "-",
         "invalid: spec.podGroups: must be a list of pod groups"),
        ("default", "late/workers", api, "?", "1", "0", "1", "-", NOT_FOUND),
        ("default", "serve/batch", api, "-", "0", "0", "0", "-", "-"),
        ("default", "serve/replica/0", api, "2", "2", "1", "1", "-", "-"),
        ("default", "serve/replica/1", api, "2", "1", "0", "1", "-", "-"),
    ]  # fmt: skip


def test_a_malformed_1_35_pod_group_names_its_field():
    body = workload("w")
    body["spec"]["podGroups"] = [{"name": "g", "policy": {"gang": {"minCount": 0}}}]
    (gang,) = build_gangs(None, [body], "scheduling.k8s.io/v1alpha1", [])
    assert (
        gang.problem == "spec.podGroups[0].policy.gang.minCount: must be a positive integer, got 0"
    )


def composite(name, min_groups=None, *, parent=None, topology=None, spec=None):
    policy = {"basic": {}} if min_groups is None else {"gang": {"minGroupCount": min_groups}}
    body = {"schedulingPolicy": policy}
    if parent:
        body["parentCompositePodGroupName"] = parent
    if topology:
        body["schedulingConstraints"] = {"topology": [{"key": topology}]}
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha3",
        "kind": "CompositePodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": body if spec is None else spec,
    }


def child(name, min_count, parent):
    obj = upstream(name, min_count)
    obj["spec"]["parentCompositePodGroupName"] = parent
    return obj


def test_a_tree_root_row_counts_its_podgroups_pods_and_says_if_satisfied():
    """Root `job` (minGroupCount 2) over PodGroups a (2 pods, both bound) and b (minCount 1, its
    one pod pending): 3 pods, 2 bound, 1 pending, one of two groups satisfied; b's pod bound
    satisfies it."""
    groups = [child("a", 2, "job"), child("b", 1, "job")]
    pods = [
        pod("a-0", group="a", node="n1"),
        pod("a-1", group="a", node="n1"),
        pod("b-0", group="b"),
    ]
    found = build_gangs(None, groups, UPSTREAM_API, pods, [composite("job", 2, topology="rack")])
    root = next(g for g in found if g.name == "job")
    assert gang_row(root) == (
        "default", "job", COMPOSITE_API, "2", "3", "2", "1", "rack", "Waiting (1 of 2 groups)"
    )  # fmt: skip
    pods[2] = pod("b-0", group="b", node="n2")
    found = build_gangs(None, groups, UPSTREAM_API, pods, [composite("job", 2)])
    assert next(g for g in found if g.name == "job").status == "Satisfied"


def test_nested_composites_count_their_whole_tree():
    """A basic root over replica r (minGroupCount 2: a leader and a worker group): the root is
    satisfied once r is, and counts r's pods."""
    trees = [composite("root"), composite("r", 2, parent="root")]
    groups = [child("lead", 1, "r"), child("work", 2, "r")]
    pods = [pod("lead-0", group="lead", node="n"), pod("work-0", group="work", node="n")]
    found = {g.name: g for g in build_gangs(None, groups, UPSTREAM_API, pods, trees)}
    assert (found["r"].status, found["root"].status) == (
        "Waiting (1 of 2 groups)",
        "Waiting (0 of 1 groups)",
    )
    assert (found["root"].pods, found["root"].bound, gang_row(found["root"])[3]) == (2, 2, "-")
    pods.append(pod("work-1", group="work", node="n"))
    found = {g.name: g for g in build_gangs(None, groups, UPSTREAM_API, pods, trees)}
    assert (found["r"].status, found["root"].status) == ("Satisfied", "Satisfied")


def test_a_malformed_composite_and_a_cycle_are_rows_not_errors():
    bad = composite("bad", spec={"schedulingPolicy": {"gang": {"minGroupCount": 0}}})
    loop = [composite("x", 1, parent="y"), composite("y", 1, parent="x")]
    found = {g.name: g for g in build_gangs(None, [], UPSTREAM_API, [], [bad, *loop])}
    assert gang_row(found["bad"])[-1] == (
        "invalid: spec.schedulingPolicy.gang.minGroupCount: must be a positive integer, got 0"
    )
    assert (found["x"].status, found["y"].status) == ("Waiting (0 of 1 groups)",) * 2
