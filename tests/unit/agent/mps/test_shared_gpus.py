"""Which GPUs MPS serves (`--gpus`): all whole GPUs, or those named by index or UUID."""

from __future__ import annotations

import pytest

from agent.inventory import load_inventory
from agent.mps.shared_gpus import select_gpus


@pytest.fixture(scope="module")
def a100():
    return load_inventory("dgx-a100").gpus


@pytest.fixture(scope="module")
def mig():
    return load_inventory("dgx-a100-mig").gpus


def test_all_is_every_whole_gpu(a100, mig):
    assert [g.index for g in select_gpus(a100, "all")] == list(range(8))
    whole = [g.index for g in mig if not g.mig_devices and g.mig_mode.value != "enabled"]
    assert [g.index for g in select_gpus(mig, "all")] == whole


def test_indexes_and_uuids_name_gpus_once_in_index_order(a100):
    chosen = select_gpus(a100, f"3, {a100[1].uuid},1")
    assert [g.index for g in chosen] == [1, 3]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param("9", "no GPU '9' on this node", id="unknown"),
        pytest.param(" , ", "expected 'all' or GPU indexes/UUIDs", id="empty"),
    ],
)
def test_bad_gpu_lists_are_refused(a100, spec, message):
    with pytest.raises(ValueError, match=f"--gpus: {message}"):
        select_gpus(a100, spec)


def test_a_gpu_in_mig_mode_is_refused_by_name(mig):
    index = next(g.index for g in mig if g.mig_mode.value == "enabled")
    with pytest.raises(ValueError, match=f"GPU {index} is in MIG mode"):
        select_gpus(mig, str(index))
