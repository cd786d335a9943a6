"""Malformed PodGroups, NRTs and pods: a clear event each, and the scheduler carries on."""

from __future__ import annotations

import urllib.request

from tests.builders.scheduler import (
    create_pod,
    create_podgroup,
    events_for,
    gpu_node,
    node_of,
    pod_body,
    podgroup,
    running,
    scheduled_condition,
    wait_for,
)

NRT = ("topology.node.k8s.io", "v1alpha2", "noderesourcetopologies")


def reasons(fake_api, name: str, namespace: str = "default") -> dict[str, str]:
    return {e["reason"]: e["message"] for e in events_for(fake_api, name, namespace)}


def test_malformed_podgroup(fake_api, core_v1, custom_objects):
    gpu_node(fake_api, "n1")
    with running(fake_api):
        create_podgroup(custom_objects, podgroup("bad", "eight"))
        create_pod(
            core_v1, pod_body("m-0", gpus=1, labels={"scheduling.x-k8s.io/pod-group": "bad"})
        )
        found = wait_for(lambda: reasons(fake_api, "bad").get("InvalidPodGroup"), 5, "group event")
        condition = wait_for(lambda: scheduled_condition(fake_api, "m-0"), 5, "member condition")
        create_pod(core_v1, pod_body("fine", gpus=1))
        wait_for(lambda: node_of(fake_api, "fine"), 5, "an ordinary pod still binds")
    assert "invalid PodGroup default/bad: spec.minMember" in found
    assert "invalid PodGroup default/bad" in condition["message"]
    assert node_of(fake_api, "m-0") is None


def test_malformed_nrt(fake_api, core_v1, custom_objects):
    gpu_node(fake_api, "n1")
    bad = {
        "apiVersion": "topology.node.k8s.io/v1alpha2",
        "kind": "NodeResourceTopology",
        "metadata": {"name": "n1"},
        "zones": [{"name": "gpu-0", "type": "GPU", "costs": "not a list"}],
    }
    custom_objects.create_cluster_custom_object(*NRT, bad, _preload_content=False)
    with running(fake_api):
        message = wait_for(
            lambda: reasons(fake_api, "n1").get("InvalidNodeResourceTopology"), 5, "NRT event"
        )
        create_pod(core_v1, pod_body("p", gpus=2))
        assert wait_for(lambda: node_of(fake_api, "p"), 5, "bound by counts") == "n1"
    assert message.startswith("NodeResourceTopology n1:")


def test_malformed_pod(fake_api, core_v1):
    gpu_node(fake_api, "n1")
    broken = pod_body("broken", resources={"cpu": "lots"})
    fake_api.put_object("pods", broken)  # bypasses validation, as a buggy admission chain might
    with running(fake_api) as rt:
        message = wait_for(lambda: reasons(fake_api, "broken").get("FailedScheduling"), 5, "event")
        create_pod(core_v1, pod_body("fine", gpus=1))
        wait_for(lambda: node_of(fake_api, "fine"), 5, "an ordinary pod still binds")
        assert rt.scheduler.pending_reasons() == {"invalid": 1}
    assert message.startswith("invalid pod: pod default/broken: spec.containers[0]")


def test_metrics_health_and_readiness(fake_api, core_v1):
    gpu_node(fake_api, "n1")
    with running(fake_api) as rt:
        create_pod(core_v1, pod_body("p", gpus=1))
        create_pod(core_v1, pod_body("too-big", gpus=9))
        wait_for(lambda: node_of(fake_api, "p"), 5, "p bound")
        wait_for(lambda: rt.scheduler.pending_reasons().get("unschedulable"), 5, "too-big parked")
        base = f"http://127.0.0.1:{rt.server.port}"
        with urllib.request.urlopen(base + "/metrics", timeout=5) as resp:
            text = resp.read().decode()
        with urllib.request.urlopen(base + "/healthz", timeout=5) as resp:
            health = resp.status
        with urllib.request.urlopen(base + "/readyz", timeout=5) as resp:
            ready = resp.status
    assert (health, ready) == (200, 200)
    assert 'gputopo_scheduler_schedule_attempts_total{result="scheduled"} 1.0' in text
    assert 'gputopo_scheduler_pending_pods{reason="unschedulable"} 1.0' in text
    assert "gputopo_scheduler_scheduling_cycle_duration_seconds_bucket" in text
    assert 'gputopo_scheduler_build_info{version="' in text


def test_malformed_spread_constraint(fake_api, core_v1):
    """A spread constraint no API server would admit (`maxSkew: 0`), put past validation: the
    pod waits as invalid naming the field, and the scheduler carries on."""
    gpu_node(fake_api, "n1")
    spread = [{"maxSkew": 0, "topologyKey": "kubernetes.io/hostname"}]
    fake_api.put_object("pods", pod_body("skewed", gpus=1, topologySpreadConstraints=spread))
    with running(fake_api) as rt:
        message = wait_for(lambda: reasons(fake_api, "skewed").get("FailedScheduling"), 5, "event")
        create_pod(core_v1, pod_body("fine", gpus=1))
        wait_for(lambda: node_of(fake_api, "fine"), 5, "an ordinary pod still binds")
        assert rt.scheduler.pending_reasons() == {"invalid": 1}
    assert message == (
        "invalid pod: pod default/skewed: spec.topologySpreadConstraints[0].maxSkew: "
        "must be an integer >= 1"
    )
