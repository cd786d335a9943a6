"""MPS metrics: clients per shared GPU from NVML, daemon up and restarts, build info."""

from __future__ import annotations

import platform

from agent.mps.metrics import MpsMetrics
from agent.nvml import fake_structs as fs


def _clients(metrics: MpsMetrics, gpu) -> float | None:
    labels = {"gpu": str(gpu.index), "uuid": str(gpu.uuid), "model": gpu.product}
    return metrics.registry.get_sample_value("gputopo_mps_gpu_clients", labels)


def test_clients_per_gpu_come_from_nvml(backend_for):
    backend, fake = backend_for("dgx-a100")
    gpus = backend.gpus()[:2]
    fake.set_mps_clients(1, [300, 301])
    metrics = MpsMetrics("1.2")
    metrics.observe_clients(gpus, backend.mps_clients)
    assert [_clients(metrics, g) for g in gpus] == [0, 2]
    fake.set_mps_clients(1, [])
    metrics.observe_clients(gpus, backend.mps_clients)
    assert _clients(metrics, gpus[1]) == 0


def test_a_gpu_that_cannot_list_its_clients_has_no_sample(backend_for):
    backend, fake = backend_for("single-t4")
    fake.fail("nvmlDeviceGetMPSComputeRunningProcesses", fs.NVML_ERROR_NOT_SUPPORTED)
    metrics = MpsMetrics()
    metrics.observe_clients(backend.gpus(), backend.mps_clients)
    assert _clients(metrics, backend.gpus()[0]) is None


def test_daemon_up_and_restarts_per_user():
    metrics = MpsMetrics("1.2")
    metrics.observe_daemon(1000, up=True)
    metrics.observe_daemon(1000, up=False)
    metrics.observe_daemon(1000, up=True, restarted=True)
    sample = metrics.registry.get_sample_value
    assert sample("gputopo_mps_daemon_up", {"uid": "1000"}) == 1
    assert sample("gputopo_mps_daemon_restarts_total", {"uid": "1000"}) == 1
    build = sample(
        "gputopo_mps_build_info", {"version": "1.2", "python_version": platform.python_version()}
    )
    assert build == 1
