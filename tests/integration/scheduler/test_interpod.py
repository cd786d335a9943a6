"""Inter-pod affinity, anti-affinity and topology spread end to end: the pods are created through
the real client against the fake API server, the scheduler binds them (or says why not), and a
pod refused by anti-affinity starts once the pod in its way is deleted."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders.scheduler import (
    bound_pods,
    create_pod,
    delete_pod,
    gpu_node,
    node_of,
    pod_body,
    running,
    scheduled_condition,
    wait_for,
)

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def anti(app: str, key: str = HOST) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
    return {"podAntiAffinity": {REQUIRED: [term]}}


def test_replicas_with_anti_affinity_take_a_node_each_and_the_extra_one_waits(fake_api, core_v1):
    for name in ("n1", "n2", "n3"):
        gpu_node(fake_api, name)
    with running(fake_api):
        for i in range(4):
            body = pod_body(f"web-{i}", gpus=1, labels={"app": "web"}, affinity=anti("web"))
            create_pod(core_v1, body)
        wait_for(lambda: len(bound_pods(fake_api)) == 3, 10, "three replicas bound")
        waiting = next(f"web-{i}" for i in range(4) if f"web-{i}" not in bound_pods(fake_api))
        condition = wait_for(lambda: scheduled_condition(fake_api, waiting), 10, "condition")
        assert condition["message"] == (
            "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules."
        )  # (no victim: every replica has the same priority)
        assert sorted(bound_pods(fake_api).values()) == ["n1", "n2", "n3"]
        gone = next(iter(bound_pods(fake_api)))
        freed = bound_pods(fake_api)[gone]
        delete_pod(core_v1, gone)
        assert wait_for(lambda: node_of(fake_api, waiting), 15, "the fourth after a delete") == (
            freed
        )


def test_a_running_pods_anti_affinity_keeps_matching_pods_away(fake_api, core_v1):
    gpu_node(fake_api, "n1")
    gpu_node(fake_api, "n2")
    holder = pod_body(
        "quiet",
        gpus=2,
        scheduler="default-scheduler",
        node="n1",
        labels={"app": "quiet"},
        affinity=anti("noisy"),
    )
    create_pod(core_v1, holder)
    with running(fake_api):
        # binpacking alone would put both on n1, whose GPUs are already in use
        create_pod(core_v1, pod_body("noisy", gpus=1, labels={"app": "noisy"}))
        create_pod(core_v1, pod_body("calm", gpus=1, labels={"app": "calm"}))
        assert wait_for(lambda: node_of(fake_api, "noisy"), 10, "noisy bound") == "n2"
        assert wait_for(lambda: node_of(fake_api, "calm"), 10, "calm bound") == "n1"


def test_spread_over_zones_overrides_binpacking(fake_api, core_v1):
    gpu_node(fake_api, "a1", labels={ZONE: "a"})
    gpu_node(fake_api, "b1", labels={ZONE: "b"})
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "infer"}},
        }
    ]
    with running(fake_api):
        for i in range(4):
            body = pod_body(
                f"infer-{i}", gpus=1, labels={"app": "infer"}, topologySpreadConstraints=spread
            )
            create_pod(core_v1, body)
            wait_for(lambda i=i: node_of(fake_api, f"infer-{i}"), 10, f"infer-{i} bound")
    placed = sorted(bound_pods(fake_api).values())
    assert placed == ["a1", "a1", "b1", "b1"]


def exclusive(label: str, group: str, key: str, every_namespace: bool) -> dict[str, Any]:
    """What JobSet's and LeaderWorkerSet's pod webhooks write for their exclusive-topology
    annotation: the group's pods together in one domain of `key` and no other group's there.
    JobSet's terms read every namespace (an empty namespace selector); LeaderWorkerSet's the
    pod's own."""
    wide = {"namespaceSelector": {}} if every_namespace else {}
    together = {
        "labelSelector": {
            "matchExpressions": [{"key": label, "operator": "In", "values": [group]}]
        },
        "topologyKey": key,
        **wide,
    }
    alone = {
        "labelSelector": {
            "matchExpressions": [
                {"key": label, "operator": "Exists"},
                {"key": label, "operator": "NotIn", "values": [group]},
            ]
        },
        "topologyKey": key,
        **wide,
    }
    return {"podAffinity": {REQUIRED: [together]}, "podAntiAffinity": {REQUIRED: [alone]}}


@pytest.mark.parametrize(
    ("label", "namespaces"),
    [
        pytest.param("jobset.sigs.k8s.io/job-key", ("default", "team"), id="JobSet"),
        pytest.param("leaderworkerset.sigs.k8s.io/group-key", ("default",), id="LeaderWorkerSet"),
    ],
)
def test_exclusive_placement_gives_each_group_its_own_rack(fake_api, core_v1, label, namespaces):
    rack = "gputopo.io/rack"
    for name, value in (("a1", "ra"), ("a2", "ra"), ("b1", "rb"), ("b2", "rb")):
        gpu_node(fake_api, name, labels={rack: value})
    core_v1.create_namespace({"metadata": {"name": "team"}}, _preload_content=False)
    groups = list(zip(("x", "y"), namespaces * 2, strict=False))
    with running(fake_api):
        for group, namespace in groups:
            for i in range(3):
                body = pod_body(
                    f"{group}-{i}",
                    gpus=4,
                    namespace=namespace,
                    labels={label: group},
                    affinity=exclusive(label, group, rack, len(namespaces) > 1),
                )
                create_pod(core_v1, body)
        wait_for(
            lambda: sum(len(bound_pods(fake_api, ns)) for ns in set(namespaces)) == 6,
            10,
            "both groups bound",
        )
    racks = {"a1": "ra", "a2": "ra", "b1": "rb", "b2": "rb"}
    placed = {
        name: racks[node]
        for ns in set(namespaces)
        for name, node in bound_pods(fake_api, ns).items()
    }
    x = {placed[f"x-{i}"] for i in range(3)}
    y = {placed[f"y-{i}"] for i in range(3)}
    assert len(x) == 1
    assert len(y) == 1
    assert x != y


def test_preferred_anti_affinity_spreads_then_shares_nodes(fake_api, core_v1):
    for name in ("n1", "n2"):
        gpu_node(fake_api, name)
    soft = {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "labelSelector": {"matchLabels": {"app": "serve"}},
                        "topologyKey": HOST,
                    },
                }
            ]
        }
    }
    with running(fake_api):
        for i in range(3):
            body = pod_body(f"serve-{i}", gpus=1, labels={"app": "serve"}, affinity=soft)
            create_pod(core_v1, body)
            wait_for(lambda i=i: node_of(fake_api, f"serve-{i}"), 10, f"serve-{i} bound")
    placed = bound_pods(fake_api)
    assert {placed["serve-0"], placed["serve-1"]} == {"n1", "n2"}  # apart while it can
    assert placed["serve-2"] in {"n1", "n2"}  # a preference: the third still binds


def test_a_namespace_selector_reads_the_namespaces_labels_as_they_change(fake_api, core_v1):
    """Anti-affinity to `app=db` pods in namespaces labelled `team=data`: the pod avoids the node
    of such a pod, waits while every node has one, and starts once the namespace's label is
    taken away (a namespace event tries the waiting pods again)."""
    for name in ("n1", "n2"):
        gpu_node(fake_api, name)
    core_v1.create_namespace(
        {"metadata": {"name": "data", "labels": {"team": "data"}}}, _preload_content=False
    )
    term = {
        "labelSelector": {"matchLabels": {"app": "db"}},
        "namespaceSelector": {"matchLabels": {"team": "data"}},
        "topologyKey": HOST,
    }
    apart = {"podAntiAffinity": {REQUIRED: [term]}}
    with running(fake_api):
        create_pod(core_v1, pod_body("db-0", namespace="data", labels={"app": "db"}, node="n1"))
        create_pod(core_v1, pod_body("db-1", labels={"app": "db"}, node="n2"))  # not team data
        create_pod(core_v1, pod_body("solo-0", gpus=1, affinity=apart))
        assert wait_for(lambda: node_of(fake_api, "solo-0"), 10, "solo-0 bound") == "n2"
        create_pod(core_v1, pod_body("db-2", namespace="data", labels={"app": "db"}, node="n2"))
        create_pod(core_v1, pod_body("solo-1", gpus=1, affinity=apart))
        condition = wait_for(lambda: scheduled_condition(fake_api, "solo-1"), 10, "condition")
        assert condition["message"] == (
            "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules."
        )
        core_v1.patch_namespace(
            "data", {"metadata": {"labels": {"team": None}}}, _preload_content=False
        )
        assert wait_for(lambda: node_of(fake_api, "solo-1"), 15, "solo-1 after the relabel")
