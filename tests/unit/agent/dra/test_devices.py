from __future__ import annotations

from dataclasses import replace

import pytest

from agent.dra.devices import (
    NVML_UNHEALTHY,
    PCI_BUS_ID,
    PCIE_ROOT,
    DeviceType,
    dra_devices,
    semver,
    unhealthy_devices,
)
from agent.inventory import discover
from agent.nvml.fixture import load_fixture
from tests.builders.deviceplugin import make_inventory


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param("9.0", "9.0.0", id="compute capability"),
        pytest.param("535.104.05", "535.104.5", id="driver with a leading zero"),
        pytest.param("550.54.15", "550.54.15", id="driver"),
        pytest.param("570", "570.0.0", id="major only"),
    ],
)
def test_semver(text, want):
    assert semver(text) == want


def test_whole_gpus_of_dgx_h100_carry_nvidia_and_gputopo_attributes():
    inventory = load_fixture("dgx-h100").inventory
    devices = dra_devices(inventory, range(8), {0: "pci0000:00"})
    assert [d.name for d in devices] == [f"gpu-{g.minor}" for g in inventory.gpus]
    first, gpu = devices[0], inventory.gpus[0]
    assert first.type is DeviceType.GPU
    assert first.attributes["uuid"] == {"string": gpu.uuid}
    assert first.attributes["productName"] == {"string": gpu.product}
    assert first.attributes["architecture"] == {"string": "Hopper"}
    assert first.attributes["cudaComputeCapability"] == {"version": "9.0.0"}
    assert first.attributes["driverVersion"] == {"version": semver(inventory.driver_version)}
    cuda = inventory.cuda_driver_version
    assert first.attributes["cudaDriverVersion"] == {
        "version": f"{cuda // 1000}.{cuda % 1000 // 10}.0"
    }
    assert first.attributes[PCIE_ROOT] == {"string": "pci0000:00"}
    assert PCIE_ROOT not in devices[1].attributes
    assert first.attributes[PCI_BUS_ID]["string"].count(":") == 2
    assert first.capacity == {"memory": f"{gpu.usable_memory_mib}Mi"}
    assert {d.attributes["nvlinkIsland"]["int"] for d in devices} == {0}


def test_cuda_version_is_published_as_nvml_says_it_and_not_when_unsaid():
    inventory = load_fixture("dgx-h100").inventory
    (device,) = dra_devices(replace(inventory, cuda_driver_version=12080), [0])
    assert device.attributes["cudaDriverVersion"] == {"version": "12.8.0"}
    (device,) = dra_devices(replace(inventory, cuda_driver_version=0), [0])
    assert "cudaDriverVersion" not in device.attributes


def test_only_the_gpus_given_to_dra_are_published():
    devices = dra_devices(make_inventory(4, nvlinks=0), [1, 3])
    assert [d.name for d in devices] == ["gpu-1", "gpu-3"]
    assert [d.attributes["nvlinkIsland"]["int"] for d in devices] == [1, 3]


def test_a_gpu_in_mig_mode_is_published_as_its_mig_devices():
    inventory = make_inventory(2, mig={0: ["3g.40gb", "1g.10gb+me"]})
    devices = dra_devices(inventory, range(2))
    assert [d.name for d in devices] == ["gpu-0-mig-3g-40gb-0", "gpu-0-mig-1g-10gb-me-4", "gpu-1"]
    mig = devices[0]
    assert mig.type is DeviceType.MIG
    assert mig.attributes["profile"] == {"string": "3g.40gb"}
    assert mig.attributes["parentUUID"] == {"string": inventory.gpus[0].uuid}
    assert mig.gpu_uuid == inventory.gpus[0].uuid
    assert mig.capacity == {"memory": "40192Mi", "multiprocessors": "42"}
    assert devices[1].capacity == {"memory": "9856Mi", "multiprocessors": "14"}


def test_a_mig_device_nvml_gave_no_sm_count_publishes_memory_alone():
    inventory = make_inventory(1, mig={0: ["7g.80gb"]})
    gpu = inventory.gpus[0]
    unsaid = replace(gpu, mig_devices=(replace(gpu.mig_devices[0], multiprocessors=0),))
    devices = dra_devices(replace(inventory, gpus=(unsaid,)), [0])
    assert devices[0].capacity == {"memory": "80896Mi"}


def test_mig_devices_read_through_nvml_publish_their_profiles_multiprocessors(backend_for):
    backend, _ = backend_for("dgx-a100-mig")
    inventory = discover(backend)
    devices = dra_devices(inventory, [2])
    assert [(d.attributes["profile"]["string"], d.capacity) for d in devices] == [
        ("4g.40gb", {"memory": "40192Mi", "multiprocessors": "56"}),
        ("3g.40gb", {"memory": "40192Mi", "multiprocessors": "42"}),
    ]


MPS_DOWN = "MPS control daemon down for uid 1000 (exited)"


@pytest.mark.parametrize(
    ("xid_on", "mps_down", "want"),
    [
        pytest.param((), None, {}, id="all well"),
        pytest.param((), MPS_DOWN, {"gpu-1": MPS_DOWN}, id="MPS down: the share, not the rest"),
        pytest.param((0,), None, {"gpu-0": NVML_UNHEALTHY}, id="an Xid on a whole GPU"),
        pytest.param(
            (1,), MPS_DOWN, {"gpu-1": NVML_UNHEALTHY}, id="an Xid on a share says the Xid"
        ),
        pytest.param(
            (2,),
            MPS_DOWN,
            {"gpu-1": MPS_DOWN, "gpu-2-mig-3g-40gb-0": NVML_UNHEALTHY},
            id="an Xid on a MIG parent marks its MIG device",
        ),
    ],
)
def test_unhealthy_devices_are_the_xid_ones_and_the_shares_while_mps_is_down(
    xid_on, mps_down, want
):
    inventory = make_inventory(3, mig={2: ["3g.40gb"]})
    devices = dra_devices(inventory, range(3), shared={1: 4})
    uuids = {inventory.gpus[i].uuid for i in xid_on}
    assert unhealthy_devices(devices, uuids, mps_down) == want
