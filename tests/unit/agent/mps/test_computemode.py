"""The shared GPUs' compute mode: set while MPS serves them, restored after, over the real
backend and the fake pynvml."""

from __future__ import annotations

import pytest

from agent.mps.computemode import ComputeModeKeeper, wanted_mode
from agent.nvml import fake_structs as fs
from agent.nvml.backend import ComputeMode

EP, DEFAULT = ComputeMode.EXCLUSIVE_PROCESS, ComputeMode.DEFAULT


@pytest.mark.parametrize(
    ("users", "exclusive", "wanted"),
    [
        pytest.param(1, True, EP, id="one user: EXCLUSIVE_PROCESS"),
        pytest.param(2, True, DEFAULT, id="two users: two MPS servers need DEFAULT"),
        pytest.param(1, False, None, id="opted out: left alone"),
        pytest.param(3, False, None, id="opted out, several users: left alone"),
    ],
)
def test_wanted_mode(users, exclusive, wanted):
    assert wanted_mode(users=users, exclusive_process=exclusive) is wanted


@pytest.fixture
def gpus(backend_for):
    backend, fake = backend_for("dgx-a100")
    return backend, fake, [g.uuid for g in backend.gpus()[:2]]


def test_apply_sets_the_shared_gpus_and_restore_puts_back_what_was_there(gpus, tmp_path):
    backend, fake, shared = gpus
    fake.compute_modes[1] = fs.NVML_COMPUTEMODE_PROHIBITED
    keeper = ComputeModeKeeper(backend, shared, tmp_path / "record.json", EP)
    assert keeper.apply() == []
    assert [backend.compute_mode(u) for u in shared] == [EP, EP]
    assert fake.compute_modes[2] == fs.NVML_COMPUTEMODE_DEFAULT  # not shared: untouched
    assert keeper.restore() == []
    assert [backend.compute_mode(u) for u in shared] == [DEFAULT, ComputeMode.PROHIBITED]
    assert not (tmp_path / "record.json").exists()


def test_a_killed_supervisors_successor_restores_the_original_mode(gpus, tmp_path):
    backend, _, shared = gpus
    record = tmp_path / "record.json"
    ComputeModeKeeper(backend, shared, record, EP).apply()  # then killed: no restore
    successor = ComputeModeKeeper(backend, shared, record, EP)
    successor.apply()
    successor.restore()
    assert [backend.compute_mode(u) for u in shared] == [DEFAULT, DEFAULT]


def test_opting_out_changes_nothing(gpus, tmp_path):
    backend, fake, shared = gpus
    fake.compute_modes[0] = fs.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
    keeper = ComputeModeKeeper(backend, shared, tmp_path / "record.json", None)
    assert keeper.apply() == keeper.restore() == []
    assert [backend.compute_mode(u) for u in shared] == [EP, DEFAULT]


def test_nvml_refusing_the_change_is_a_problem_naming_the_gpu_not_a_stop(gpus, tmp_path):
    backend, fake, shared = gpus
    fake.fail("nvmlDeviceSetComputeMode", fs.NVML_ERROR_NO_PERMISSION, gpu=0)
    keeper = ComputeModeKeeper(backend, shared, tmp_path / "record.json", EP)
    (problem,) = keeper.apply()
    assert problem.startswith(f"GPU {shared[0]}: cannot set compute mode EXCLUSIVE_PROCESS")
    assert "Insufficient Permissions" in problem
    assert backend.compute_mode(shared[1]) is EP  # the other GPU still set
