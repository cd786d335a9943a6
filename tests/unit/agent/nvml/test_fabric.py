"""GPU fabric info (DESIGN §13): the real backend over the fake pynvml, fixture to node label."""

from __future__ import annotations

import ctypes
from typing import Any

import pynvml
import pytest
import yaml

from agent import labels as lb
from agent.errors import GpuLost
from agent.inventory import discover, load_inventory
from agent.model import FabricState, GpuFabric, NodeInventory
from agent.nvml import fake_structs as fs
from agent.nvml.fixture import dump, fixture_from_mapping, load_fixture
from agent.nvml.nvml_fabric import status_code, status_word
from tests.builders.nvml import BackendFor, node_doc, variant

CLUSTER = "5c1f0e7a-3d2b-4c8e-9a61-0b7d2e4f9c13"
OTHER = "0f6a4d2c-91b3-4e7a-8c5d-3a2b1c0d9e8f"
GB200_CLIQUE = f"{CLUSTER}.1"


def fabric(state: str = "completed", status: str = "success", **more: Any) -> dict[str, Any]:
    return {"clusterUuid": CLUSTER, "cliqueId": 1, "state": state, "status": status} | more


def with_fabric(*per_gpu: dict[str, Any] | None) -> dict[str, Any]:
    """A node of len(per_gpu) GPUs; None leaves a GPU without fabric info (NotSupported)."""
    doc = node_doc(gpus=len(per_gpu))
    for i, entry in enumerate(per_gpu):
        if entry is not None:
            doc = variant(doc, f"gpus[{i}].fabric", entry)
    return doc


def discovered(backend_for: BackendFor, doc: dict[str, Any]) -> NodeInventory:
    backend, _ = backend_for(fixture_from_mapping(doc))
    return discover(backend)


def test_gb200_fixture_labels_the_node_exactly_as_gfd_writes_the_clique() -> None:
    inventory = load_inventory("gb200-nvl72-node")
    assert lb.gfd_labels(inventory)[lb.CLIQUE] == "5c1f0e7a-3d2b-4c8e-9a61-0b7d2e4f9c13.1"
    assert lb.CLIQUE == "nvidia.com/gpu.clique"
    assert [g.fabric.clique for g in inventory.gpus if g.fabric] == [GB200_CLIQUE] * 4


@pytest.mark.parametrize(
    ("per_gpu", "clique"),
    [
        pytest.param((fabric(), fabric()), GB200_CLIQUE, id="complete"),
        pytest.param(
            (fabric(cliqueId=4_294_967_295), fabric(cliqueId=4_294_967_295)),
            f"{CLUSTER}.4294967295",
            id="complete, clique ID in decimal up to 2^32-1",
        ),
        pytest.param(
            (fabric(), fabric("inProgress")), GB200_CLIQUE, id="one GPU in progress, one complete"
        ),
        pytest.param((fabric("inProgress"), fabric("inProgress")), None, id="all in progress"),
        pytest.param((fabric("notStarted"), fabric("notStarted")), None, id="not started"),
        pytest.param((None, None), None, id="NotSupported (no fabric info)"),
        pytest.param(
            (fabric("notSupported"), fabric("notSupported")), None, id="state notSupported"
        ),
        pytest.param(
            (fabric(status="NotReady"), fabric(status="NotReady")), None, id="completed, failed"
        ),
        pytest.param(
            (fabric(clusterUuid="00000000-0000-0000-0000-000000000000"),) * 2,
            None,
            id="zero cluster UUID",
        ),
        pytest.param((fabric(), fabric(cliqueId=2)), None, id="two clique IDs disagree"),
        pytest.param((fabric(), fabric(clusterUuid=OTHER)), None, id="two clusters disagree"),
    ],
)
def test_node_clique_from_the_fabric_path(
    backend_for: BackendFor, per_gpu: tuple[dict[str, Any] | None, ...], clique: str | None
) -> None:
    inventory = discovered(backend_for, with_fabric(*per_gpu))
    assert inventory.nvlink_clique() == clique
    assert lb.gfd_labels(inventory).get(lb.CLIQUE) == clique
    expected = [None if f is None else fixture_from_mapping(with_fabric(f)) for f in per_gpu]
    assert [g.fabric for g in inventory.gpus] == [
        None if e is None else e.inventory.gpus[0].fabric for e in expected
    ]


def test_in_progress_gpu_reads_back_its_state_and_no_clique(backend_for: BackendFor) -> None:
    inventory = discovered(backend_for, with_fabric(fabric("inProgress", "NotReady")))
    assert inventory.gpus[0].fabric == GpuFabric(
        cluster_uuid=CLUSTER, clique_id=1, state=FabricState.IN_PROGRESS, status="NotReady"
    )
    assert inventory.gpus[0].fabric.clique is None


def test_recorded_h200_answers_not_supported_and_gets_no_clique() -> None:
    inventory = load_inventory("vm-h200")
    assert inventory.gpus[0].fabric is None
    assert lb.CLIQUE not in lb.gfd_labels(inventory)
    assert "fabric" not in dump(inventory)


def test_fake_answers_not_supported_without_fabric_and_for_a_mig_handle(
    backend_for: BackendFor,
) -> None:
    _, fake = backend_for(fixture_from_mapping(with_fabric(None)))
    info = fs.c_nvmlGpuFabricInfo_v2_t()
    with pytest.raises(fs.NVMLError) as raised:
        fake.nvmlDeviceGetGpuFabricInfoV(fake.nvmlDeviceGetHandleByIndex(0), ctypes.byref(info))
    assert raised.value.value == fs.NVML_ERROR_NOT_SUPPORTED
    _, mig_fake = backend_for("dgx-a100-mig")
    mig = mig_fake.nvmlDeviceGetMigDeviceHandleByIndex(mig_fake.nvmlDeviceGetHandleByIndex(0), 0)
    with pytest.raises(fs.NVMLError) as raised:
        mig_fake.nvmlDeviceGetGpuFabricInfoV(mig, ctypes.byref(info))
    assert raised.value.value == fs.NVML_ERROR_NOT_SUPPORTED


def test_fake_checks_the_struct_version_like_nvml(backend_for: BackendFor) -> None:
    _, fake = backend_for(fixture_from_mapping(with_fabric(fabric())))
    info = fs.c_nvmlGpuFabricInfo_v2_t()
    info.version = 0x01000024
    with pytest.raises(fs.NVMLError) as raised:
        fake.nvmlDeviceGetGpuFabricInfoV(fake.nvmlDeviceGetHandleByIndex(0), ctypes.byref(info))
    assert raised.value.value == fs.NVML_ERROR_ARGUMENT_VERSION_MISMATCH


@pytest.mark.parametrize(
    "code",
    [fs.NVML_ERROR_FUNCTION_NOT_FOUND, fs.NVML_ERROR_ARGUMENT_VERSION_MISMATCH],
    ids=["no such function", "struct version not taken"],
)
def test_a_driver_without_the_call_gives_no_fabric(backend_for: BackendFor, code: int) -> None:
    backend, fake = backend_for(fixture_from_mapping(with_fabric(fabric())))
    fake.fail("nvmlDeviceGetGpuFabricInfoV", code)
    assert discover(backend).gpus[0].fabric is None


def test_a_lost_gpu_during_the_fabric_read_is_not_hidden(backend_for: BackendFor) -> None:
    backend, fake = backend_for(fixture_from_mapping(with_fabric(fabric())))
    fake.fail("nvmlDeviceGetGpuFabricInfoV", fs.NVML_ERROR_GPU_IS_LOST)
    with pytest.raises(GpuLost, match="nvmlDeviceGetGpuFabricInfoV"):
        discover(backend)


def test_fake_struct_has_the_layout_of_pynvml() -> None:
    ours, theirs = fs.c_nvmlGpuFabricInfo_v2_t, pynvml.c_nvmlGpuFabricInfo_v2_t
    assert [name for name, *_ in ours._fields_] == [name for name, *_ in theirs._fields_]
    assert ctypes.sizeof(ours) == ctypes.sizeof(theirs)
    assert ours().version == theirs().version == pynvml.nvmlGpuFabricInfo_v2
    states = [getattr(pynvml, f"NVML_GPU_FABRIC_STATE_{s}") for s in ("NOT_SUPPORTED", "COMPLETED")]
    assert states == [fs.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED, fs.NVML_GPU_FABRIC_STATE_COMPLETED]


@pytest.mark.parametrize(
    ("code", "word"), [(0, "success"), (27, "NotReady"), (3, "NotSupported"), (999, "Unknown")]
)
def test_status_words_round_trip(code: int, word: str) -> None:
    assert status_word(code) == word
    assert status_code(word) == code


def test_an_unknown_status_code_reads_as_unknown() -> None:
    assert status_word(12345) == "Unknown"


def test_record_writes_the_fabric_and_replays_it() -> None:
    doc = with_fabric(fabric(), fabric("inProgress", "NotReady"), None)
    inventory = fixture_from_mapping(doc).inventory
    text = dump(inventory)
    assert "fabric: {clusterUuid: 5c1f0e7a-3d2b-4c8e-9a61-0b7d2e4f9c13, cliqueId: 1" in text
    assert text.count("fabric:") == 2
    assert fixture_from_mapping(yaml.safe_load(text)).inventory == inventory


def test_a_bare_state_defaults_to_a_zero_uuid_and_success() -> None:
    gpu = fixture_from_mapping(with_fabric({"state": "notStarted"})).inventory.gpus[0]
    assert gpu.fabric == GpuFabric(state=FabricState.NOT_STARTED)


def test_builtin_gb200_fixture_is_what_its_comment_says() -> None:
    inventory = load_fixture("gb200-nvl72-node").inventory
    assert [g.product for g in inventory.gpus] == ["NVIDIA GB200"] * 4
    assert {c for row in inventory.links.cells() for c in row} == {"X", "NV18"}
    assert [g.numa_node for g in inventory.gpus] == [0, 0, 1, 1]
