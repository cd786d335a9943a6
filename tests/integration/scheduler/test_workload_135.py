"""Kubernetes 1.35's gangs (`scheduling.k8s.io/v1alpha1` Workloads, pods naming a pod group in
`spec.workloadRef`, DESIGN §15) against the fake API server serving that API alone, with the
real client: discovery, minCount, replica keys, a Workload that comes late or lacks the pod
group, `basic`, and a pod that names two gangs."""

from __future__ import annotations

import time

import pytest

from tests.builders.scheduler import (
    bound_pods,
    create_pod,
    gpu_node,
    pod_body,
    running,
    scheduled_condition,
    wait_for,
)
from tests.builders.workloads import (
    WORKLOADS,
    create_workload,
    create_workload_pod,
    workload_135,
    workload_pod,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def api_135(fake_api):
    fake_api.serve_workload_api(("v1alpha1",))
    return fake_api


def _message(fake, name: str) -> str:
    return str((scheduled_condition(fake, name) or {}).get("message") or "")


def _waits_with(fake, name: str, text: str) -> None:
    wait_for(lambda: text in _message(fake, name), 5, f"{name} to wait with {text!r}")


def test_the_1_35_api_is_discovered_and_a_gang_waits_for_min_count(
    api_135, core_v1, custom_objects, kube_client
):
    gpu_node(api_135, "n1", gpus=8)
    with running(api_135) as runtime:
        assert runtime.upstream is not None
        assert (runtime.upstream.version, runtime.upstream.plural) == ("v1alpha1", "workloads")
        create_workload(custom_objects, workload_135("train", workers=3))
        for i in range(2):
            create_workload_pod(kube_client, workload_pod(f"w{i}", "train", "workers", gpus=2))
        _waits_with(
            api_135,
            "w0",
            "waiting for pod group workers of Workload default/train "
            "(scheduling.k8s.io/v1alpha1): fewer than minCount (3) pods exist",
        )
        create_pod(core_v1, pod_body("solo", gpus=2))  # the waiting gang holds nothing
        wait_for(lambda: "solo" in bound_pods(api_135), 5, "the single pod to bind")
        assert not {"w0", "w1"} & set(bound_pods(api_135))
        create_workload_pod(kube_client, workload_pod("w2", "train", "workers", gpus=2))
        wait_for(lambda: {"w0", "w1", "w2"} <= set(bound_pods(api_135)), 5, "the gang")
    # 1.35's Workload has no status: nothing is written on it
    assert not [r for r in api_135.writes() if "/workloads/" in r.path]


def test_each_replica_key_is_its_own_gang(api_135, core_v1, custom_objects, kube_client):
    gpu_node(api_135, "n1", gpus=8)
    create_workload(custom_objects, workload_135("serve", replica=2))
    for name, key in (("r0-a", "0"), ("r0-b", "0"), ("r1-a", "1")):
        create_workload_pod(kube_client, workload_pod(name, "serve", "replica", key, gpus=1))
    with running(api_135):
        wait_for(lambda: {"r0-a", "r0-b"} <= set(bound_pods(api_135)), 5, "replica 0")
        _waits_with(api_135, "r1-a", "replica key 1): fewer than minCount (2) pods exist")
        assert "r1-a" not in bound_pods(api_135)
        create_workload_pod(kube_client, workload_pod("r1-b", "serve", "replica", "1", gpus=1))
        wait_for(lambda: {"r1-a", "r1-b"} <= set(bound_pods(api_135)), 5, "replica 1")


def test_members_wait_for_their_workload_and_its_pod_group(
    api_135, core_v1, custom_objects, kube_client
):
    gpu_node(api_135, "n1", gpus=8)
    with running(api_135):
        for i in range(2):
            create_workload_pod(kube_client, workload_pod(f"m{i}", "late", "workers", gpus=1))
        _waits_with(api_135, "m0", 'Workload "default/late" (scheduling.k8s.io/v1alpha1) not found')
        create_workload(custom_objects, workload_135("late", leader=1))
        _waits_with(
            api_135,
            "m1",
            "invalid Workload default/late: spec.podGroups: no pod group 'workers' (pods name "
            "it in spec.workloadRef.podGroup; the Workload has leader)",
        )
        assert not {"m0", "m1"} & set(bound_pods(api_135))
        api_135.delete_object(WORKLOADS, "late", "default")
        _waits_with(api_135, "m0", 'Workload "default/late" (scheduling.k8s.io/v1alpha1) not found')
        create_workload(custom_objects, workload_135("late", workers=2))
        wait_for(lambda: {"m0", "m1"} <= set(bound_pods(api_135)), 5, "the gang once it exists")
    assert {bound_pods(api_135)[name] for name in ("m0", "m1")} == {"n1"}


def test_a_basic_pod_group_places_its_pods_one_by_one(
    api_135, core_v1, custom_objects, kube_client
):
    gpu_node(api_135, "n1", gpus=2)
    create_workload(custom_objects, workload_135("batch", tasks=None))
    for i in range(3):
        create_workload_pod(kube_client, workload_pod(f"t{i}", "batch", "tasks", gpus=1))
    with running(api_135):
        wait_for(lambda: len(set(bound_pods(api_135)) & {"t0", "t1", "t2"}) == 2, 5, "two")
        time.sleep(0.3)
        assert len(set(bound_pods(api_135)) & {"t0", "t1", "t2"}) == 2  # the node holds two


def test_a_pod_naming_a_workload_and_our_pod_group_is_refused(
    api_135, core_v1, custom_objects, kube_client
):
    gpu_node(api_135, "n1", gpus=8)
    create_workload(custom_objects, workload_135("train", workers=1))
    both = workload_pod(
        "both", "train", "workers", gpus=1, labels={"scheduling.x-k8s.io/pod-group": "ours"}
    )
    create_workload_pod(kube_client, both)
    with running(api_135):
        _waits_with(
            api_135,
            "both",
            "names two pod groups, ours (label scheduling.x-k8s.io/pod-group, "
            "scheduling.x-k8s.io) and train/workers (spec.workloadRef, "
            "scheduling.k8s.io/v1alpha1)",
        )
        assert "both" not in bound_pods(api_135)


def test_without_the_1_35_api_the_field_is_dropped_and_the_pod_is_no_gang(
    fake_api, core_v1, kube_client
):
    gpu_node(fake_api, "n1", gpus=8)
    create_workload_pod(kube_client, workload_pod("plain", "train", "workers", gpus=1))
    assert "workloadRef" not in fake_api.get_object("pods", "plain", "default")["spec"]
    with running(fake_api) as runtime:
        assert runtime.upstream is None
        wait_for(lambda: "plain" in bound_pods(fake_api), 5, "the pod, as a single pod")
