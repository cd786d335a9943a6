"""Agent metrics: registry values."""

from __future__ import annotations

import time

import pytest

from agent.metrics import AgentMetrics, MetricsSnapshot
from agent.nvml.backend import GpuTelemetry
from agent.quantity import MIB
from tests.builders.topology import dgx_h100, gpu_uuid


def _sample(metrics: AgentMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_per_gpu_gauges_follow_the_snapshot() -> None:
    metrics = AgentMetrics("1.2.3")
    assert (
        _sample(
            metrics,
            "gputopo_agent_gpu_healthy",
            gpu="0",
            uuid=gpu_uuid(0),
            model="NVIDIA H100 80GB HBM3",
        )
        is None
    )
    tele = {
        gpu_uuid(0): GpuTelemetry(
            utilization_percent=50, memory_used_mib=1024, temperature_c=40, power_w=300.5
        )
    }
    metrics.update(
        MetricsSnapshot(
            inventory=dgx_h100(),
            unhealthy=frozenset({gpu_uuid(3)}),
            telemetry=tele,
            allocated={0: 1},
        )
    )
    g0 = {"gpu": "0", "uuid": gpu_uuid(0), "model": "NVIDIA H100 80GB HBM3"}
    g3 = {**g0, "gpu": "3", "uuid": gpu_uuid(3)}
    assert _sample(metrics, "gputopo_agent_gpu_healthy", **g0) == 1.0
    assert _sample(metrics, "gputopo_agent_gpu_healthy", **g3) == 0.0
    assert _sample(metrics, "gputopo_agent_gpu_utilization_ratio", **g0) == 0.5
    assert _sample(metrics, "gputopo_agent_gpu_memory_used_bytes", **g0) == 1024 * MIB
    assert _sample(metrics, "gputopo_agent_gpu_memory_total_bytes", **g3) == 81559 * MIB
    assert _sample(metrics, "gputopo_agent_gpu_power_watts", **g0) == 300.5
    assert _sample(metrics, "gputopo_agent_gpu_allocated_devices", **g0) == 1.0
    assert _sample(metrics, "gputopo_agent_gpu_allocated_devices", **g3) == 0.0
    assert _sample(metrics, "gputopo_agent_gpu_utilization_ratio", **g3) is None  # no telemetry
    assert (
        _sample(
            metrics,
            "gputopo_agent_build_info",
            version="1.2.3",
            python_version=__import__("platform").python_version(),
        )
        == 1.0
    )


def test_rpc_and_publish_observations() -> None:
    metrics = AgentMetrics()
    metrics.observe_rpc("Allocate", "nvidia.com/gpu", 0.002)
    metrics.observe_rpc("Allocate", "nvidia.com/gpu", 0.004, code="INVALID_ARGUMENT")
    ticks = iter([10.0, 10.25])
    with (
        pytest.raises(RuntimeError),
        metrics.time_rpc("ListAndWatch", "nvidia.com/gpu", clock=lambda: next(ticks)),
    ):
        raise RuntimeError("boom")
    ok = {"method": "Allocate", "resource": "nvidia.com/gpu", "code": "OK"}
    assert _sample(metrics, "gputopo_agent_deviceplugin_rpc_duration_seconds_count", **ok) == 1.0
    assert (
        _sample(
            metrics,
            "gputopo_agent_deviceplugin_rpc_errors_total",
            method="Allocate",
            resource="nvidia.com/gpu",
        )
        == 1.0
    )
    unknown = {"method": "ListAndWatch", "resource": "nvidia.com/gpu", "code": "UNKNOWN"}
    assert (
        _sample(metrics, "gputopo_agent_deviceplugin_rpc_duration_seconds_sum", **unknown) == 0.25
    )
    metrics.observe_publish(0.02, ok=True)
    metrics.observe_publish(0.0, ok=False)
    assert _sample(metrics, "gputopo_agent_publish_writes_total") == 1.0
    assert _sample(metrics, "gputopo_agent_publish_failures_total") == 1.0
    assert _sample(metrics, "gputopo_agent_publish_duration_seconds_count") == 1.0


def test_device_plugin_counts_are_read_per_scrape_as_counters() -> None:
    metrics = AgentMetrics("t")
    xids: dict[tuple[str, int], int] = {}
    registrations = {("nvidia.com/gpu", "error"): 2, ("nvidia.com/gpu", "ok"): 1}
    metrics.watch_device_plugin(lambda: xids, lambda: registrations)
    assert _sample(metrics, "gputopo_agent_xid_events_total", uuid=gpu_uuid(3), xid="79") is None
    xids[(gpu_uuid(3), 79)] = 2
    assert _sample(metrics, "gputopo_agent_xid_events_total", uuid=gpu_uuid(3), xid="79") == 2
    name = "gputopo_agent_deviceplugin_registrations_total"
    assert _sample(metrics, name, resource="nvidia.com/gpu", result="error") == 2
    assert _sample(metrics, name, resource="nvidia.com/gpu", result="ok") == 1


@pytest.mark.parametrize(
    ("serving", "sample"),
    [
        pytest.param(None, None, id="no sharing.mps: absent"),
        pytest.param(True, 1.0, id="MPS serves"),
        pytest.param(False, 0.0, id="MPS down"),
    ],
)
def test_mps_serving_is_read_per_scrape(serving, sample) -> None:
    metrics = AgentMetrics("t")
    metrics.watch_device_plugin(dict, dict, lambda: serving)
    assert _sample(metrics, "gputopo_agent_mps_serving") == sample


def test_a_publisher_pass_stamps_the_wall_clock() -> None:
    metrics = AgentMetrics("t")
    name = "gputopo_agent_publish_last_success_timestamp_seconds"
    assert _sample(metrics, name) == 0
    before = time.time()
    metrics.publish_passed()
    stamp = _sample(metrics, name)
    assert stamp is not None
    assert before <= stamp <= time.time()
