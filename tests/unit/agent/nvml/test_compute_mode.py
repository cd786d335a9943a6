"""Compute mode and MPS clients through the real backend over the fake pynvml (what
`gputopo-agent mps` reads and sets), and the fake's own answers checked against pynvml's names."""

from __future__ import annotations

import pynvml
import pytest

from agent.errors import NvmlError
from agent.model import GpuUuid
from agent.nvml import fake_structs as fs
from agent.nvml.backend import ComputeMode
from tests.builders.nvml import BackendFor


@pytest.mark.parametrize("mode", list(ComputeMode), ids=lambda m: m.value)
def test_the_fakes_compute_mode_constants_are_pynvmls(mode: ComputeMode) -> None:
    name = f"NVML_COMPUTEMODE_{mode.value}"
    assert getattr(fs, name) == getattr(pynvml, name)


def test_a_gpu_starts_in_default_and_keeps_the_mode_set(backend_for: BackendFor) -> None:
    backend, fake = backend_for("dgx-a100")
    first, second = (g.uuid for g in backend.gpus()[:2])
    assert backend.compute_mode(first) is ComputeMode.DEFAULT
    backend.set_compute_mode(first, ComputeMode.EXCLUSIVE_PROCESS)
    assert backend.compute_mode(first) is ComputeMode.EXCLUSIVE_PROCESS
    assert backend.compute_mode(second) is ComputeMode.DEFAULT
    assert fake.compute_modes[0] == pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS


def test_setting_the_mode_without_permission_names_the_gpu(backend_for: BackendFor) -> None:
    backend, fake = backend_for("single-t4")
    uuid = backend.gpus()[0].uuid
    fake.fail("nvmlDeviceSetComputeMode", fs.NVML_ERROR_NO_PERMISSION)
    with pytest.raises(NvmlError, match=f"nvmlDeviceSetComputeMode\\({uuid}.*Insufficient") as e:
        backend.set_compute_mode(uuid, ComputeMode.EXCLUSIVE_PROCESS)
    assert e.value.code == fs.NVML_ERROR_NO_PERMISSION
    assert backend.compute_mode(uuid) is ComputeMode.DEFAULT


def test_a_mig_device_has_no_compute_mode_of_its_own(backend_for: BackendFor) -> None:
    backend, _ = backend_for("dgx-a100-mig")
    mig = next(m for g in backend.gpus() for m in g.mig_devices)
    with pytest.raises(NvmlError, match="Invalid Argument"):
        backend.compute_mode(GpuUuid(str(mig.uuid)))


def test_mps_clients_are_counted_per_gpu(backend_for: BackendFor) -> None:
    backend, fake = backend_for("dgx-a100")
    first, second = (g.uuid for g in backend.gpus()[:2])
    fake.set_mps_clients(0, [4100, 4101, 4102])
    assert (backend.mps_clients(first), backend.mps_clients(second)) == (3, 0)


def test_mps_clients_are_none_where_the_driver_cannot_list_them(backend_for: BackendFor) -> None:
    backend, fake = backend_for("single-t4")
    fake.fail("nvmlDeviceGetMPSComputeRunningProcesses", fs.NVML_ERROR_NOT_SUPPORTED)
    assert backend.mps_clients(backend.gpus()[0].uuid) is None
