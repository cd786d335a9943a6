"""The scheduler's `/metrics`, `/healthz` and `/readyz`, served by the agent's `MetricsServer`."""

from __future__ import annotations

import time
import urllib.request

from scheduler.cli.runtime import LeaseTiming
from tests.builders.scheduler import (
    create_pod,
    gpu_node,
    hold_lease,
    node_of,
    pod_body,
    running,
    set_pod_phase,
    wait_for,
)


def _get(port: int, path: str) -> tuple[int, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
        return reply.status, reply.read().decode()


def test_a_synced_scheduler_is_ready_and_serves_its_own_registry(fake_api) -> None:
    with running(fake_api) as runtime:
        port = runtime.server.port
        assert _get(port, "/readyz") == (200, "ok\n")
        assert _get(port, "/healthz") == (200, "ok\n")
        status, body = _get(port, "/metrics")
    assert status == 200
    assert "gputopo_scheduler_build_info{" in body
    assert "gputopo_scheduler_pending_pods" in body
    assert "gputopo_agent_" not in body


def test_pods_the_kubelet_refused_at_admission_are_counted_once_by_reason(
    fake_api, core_v1
) -> None:
    """Two schedulers took the same free GPUs: the kubelet fails the pod it saw second."""
    gpu_node(fake_api, "n1", gpus=8)
    with running(fake_api) as runtime:
        for name in ("late", "also-late", "fine"):
            create_pod(core_v1, pod_body(name, gpus=1))
            wait_for(lambda name=name: node_of(fake_api, name), 5, f"{name} bound")
        set_pod_phase(core_v1, "late", "Failed", reason="OutOfnvidia.com/gpu")
        set_pod_phase(core_v1, "late", "Failed", reason="OutOfnvidia.com/gpu")  # again: once
        set_pod_phase(core_v1, "fine", "Failed", reason="Error")  # its own failure: not counted
        # the informer applies events in order: once this one is counted, so are those above
        set_pod_phase(core_v1, "also-late", "Failed", reason="UnexpectedAdmissionError")

        def counted_both() -> str | None:
            body = _get(runtime.server.port, "/metrics")[1]
            return body if 'reason="UnexpectedAdmissionError"' in body else None

        body = wait_for(counted_both, 5, "the second rejection counted")
    samples = [line for line in body.splitlines() if line.startswith(REJECTIONS + "{")]
    assert sorted(samples) == [
        REJECTIONS + '{reason="OutOfnvidia.com/gpu"} 1.0',
        REJECTIONS + '{reason="UnexpectedAdmissionError"} 1.0',
    ]


REJECTIONS = "gputopo_scheduler_admission_rejections_total"


def test_state_views_are_read_per_scrape(fake_api, core_v1) -> None:
    """Pending age by reason, GPUs by model/kind/state, and counters that start at zero."""
    gpu_node(fake_api, "n1", gpus=8, labels={"nvidia.com/gpu.product": "Tesla-T4"})
    with running(fake_api) as runtime:
        create_pod(core_v1, pod_body("one", gpus=1))
        create_pod(core_v1, pod_body("too-big", gpus=16))
        wait_for(lambda: node_of(fake_api, "one"), 5, "one bound")
        sample = runtime.metrics.registry.get_sample_value
        ages = wait_for(lambda: runtime.scheduler.pending_ages(time.time()), 5, "too-big waits")
        (reason,) = ages
        age = sample("gputopo_scheduler_pending_oldest_seconds", {"reason": reason})
        assert age is not None
        assert 0 <= age < 60
        gpus = "gputopo_scheduler_gpus"
        assert sample(gpus, {"model": "Tesla-T4", "kind": "whole", "state": "allocated"}) == 1
        assert sample(gpus, {"model": "Tesla-T4", "kind": "whole", "state": "free"}) == 7
        assert sample("gputopo_scheduler_fragmented_gpus", {"model": "Tesla-T4"}) == 0
        assert sample("gputopo_scheduler_schedule_attempts_total", {"result": "error"}) == 0
        assert sample("gputopo_scheduler_preemption_victims_total", {"reason": "reclaim"}) == 0


CLUSTER_GAUGES = (
    "gputopo_scheduler_gpus",
    "gputopo_scheduler_fragmented_gpus",
    "gputopo_scheduler_pending_pods",
    "gputopo_scheduler_pending_oldest_seconds",
    "gputopo_scheduler_queue_used",
    "gputopo_scheduler_queue_pending_units",
)


def test_a_standby_replica_exports_no_cluster_gauge_until_it_leads(fake_api, core_v1) -> None:
    """Two replicas see the same cluster: only the leader's GPUs and pending pods are reported,
    so a sum over replicas (the dashboard) counts them once and an alert on them fires once."""
    gpu_node(fake_api, "n1", gpus=8, labels={"nvidia.com/gpu.product": "Tesla-T4"})
    hold_lease(fake_api, "the-other-replica")
    timing = LeaseTiming(duration=1.0, renew_deadline=0.6, retry_period=0.1)
    with running(fake_api, leader_elect=True, lease=timing) as standby:
        create_pod(core_v1, pod_body("too-big", gpus=16))
        wait_for(lambda: standby.scheduler.pending_reasons(), 5, "too-big seen pending")
        sample = standby.metrics.registry.get_sample_value
        whole_free = {"model": "Tesla-T4", "kind": "whole", "state": "free"}
        assert sample("gputopo_scheduler_leader") == 0
        assert sample("gputopo_scheduler_pending_pods", {"reason": "queued"}) is None
        assert sample("gputopo_scheduler_gpus", whole_free) is None
        families = {m.name: m.samples for m in standby.metrics.registry.collect()}
        assert [name for name in CLUSTER_GAUGES if families.get(name)] == []
        assert sample("gputopo_scheduler_schedule_attempts_total", {"result": "error"}) == 0
        hold_lease(fake_api, "")  # the other replica let go: this one leads
        wait_for(standby.fence.may_bind, 5, "the lease taken over")
        (reason,) = wait_for(standby.scheduler.pending_reasons, 5, "too-big pending")
        assert sample("gputopo_scheduler_pending_pods", {"reason": reason}) == 1
        assert sample("gputopo_scheduler_gpus", whole_free) == 8
