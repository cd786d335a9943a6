"""Allocate and GetPreferredAllocation decisions (model level, no gRPC)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from agent.inventory import load_inventory
from agent.model import NodeInventory
from deviceplugin.allocation import Allocator, PreferredRequest
from deviceplugin.cdi import CdiRegistry
from deviceplugin.errors import DeviceUnavailableError, InvalidRequestError
from deviceplugin.resources import Resource, build_resources
from deviceplugin.settings import (
    DeviceIdStrategy,
    DeviceListStrategy,
    SharedResource,
    TimeSlicing,
)
from tests.builders.clock import FakeClock
from tests.builders.deviceplugin import make_inventory, settings


def setup(inventory: NodeInventory, **overrides: Any) -> tuple[Allocator, dict[str, Resource]]:
    s = settings(**overrides)
    resources = {r.name: r for r in build_resources(inventory, s)}
    return Allocator(s, inventory), resources


def test_envvar_lists_uuids_in_request_order():
    inventory = make_inventory(4)
    allocator, res = setup(inventory)
    ids = [inventory.gpus[2].uuid, inventory.gpus[0].uuid]
    (alloc,) = allocator.allocate(res["nvidia.com/gpu"], frozenset(), [ids])
    assert alloc.envs == {"NVIDIA_VISIBLE_DEVICES": ",".join(ids)}
    assert alloc.mounts == ()
    assert alloc.cdi_devices == ()


def test_volume_mounts_as_nvidia_does():
    inventory = make_inventory(2)
    allocator, res = setup(inventory, device_list_strategies=(DeviceListStrategy.VOLUME_MOUNTS,))
    uuid = inventory.gpus[1].uuid
    (alloc,) = allocator.allocate(res["nvidia.com/gpu"], frozenset(), [[uuid]])
    assert alloc.envs == {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}
    assert [(m.host_path, m.container_path) for m in alloc.mounts] == [
        ("/dev/null", f"/var/run/nvidia-container-devices/{uuid}")
    ]


def test_pass_device_specs_adds_control_nodes_and_the_gpu_minor():
    inventory = make_inventory(4, mig={1: ["1g.10gb", "1g.10gb"]})
    allocator, res = setup(inventory, pass_device_specs=True)
    migs = [d.id for d in res["nvidia.com/mig-1g.10gb"].devices]
    (alloc,) = allocator.allocate(res["nvidia.com/mig-1g.10gb"], frozenset(), [migs])
    assert [d.host_path for d in alloc.device_nodes] == [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia1",
    ]
    assert {d.permissions for d in alloc.device_nodes} == {"rw"}
    assert alloc.envs["NVIDIA_VISIBLE_DEVICES"] == ",".join(migs)


def test_index_strategy_lists_indices():
    inventory = make_inventory(3, mig={2: ["3g.40gb", "3g.40gb"]})
    allocator, res = setup(inventory, device_id_strategy=DeviceIdStrategy.INDEX)
    (alloc,) = allocator.allocate(
        res["nvidia.com/mig-3g.40gb"], frozenset(), [[res["nvidia.com/mig-3g.40gb"].devices[1].id]]
    )
    assert alloc.envs["NVIDIA_VISIBLE_DEVICES"] == "2:1"


def test_replicas_map_to_their_gpu_uuid_once():
    inventory = make_inventory(2)
    ts = TimeSlicing(resources=(SharedResource(name="nvidia.com/gpu", replicas=4),))
    allocator, res = setup(inventory, time_slicing=ts)
    u0, u1 = inventory.gpus[0].uuid, inventory.gpus[1].uuid
    (alloc,) = allocator.allocate(
        res["nvidia.com/gpu"], frozenset(), [[f"{u0}::1", f"{u0}::3", f"{u1}::0"]]
    )
    assert alloc.envs["NVIDIA_VISIBLE_DEVICES"] == f"{u0},{u1}"


def test_several_containers_each_get_their_own_response():
    inventory = make_inventory(4)
    allocator, res = setup(inventory)
    u = [g.uuid for g in inventory.gpus]
    allocs = allocator.allocate(res["nvidia.com/gpu"], frozenset(), [[u[0]], [u[1], u[3]]])
    assert [a.envs["NVIDIA_VISIBLE_DEVICES"] for a in allocs] == [u[0], f"{u[1]},{u[3]}"]


@pytest.mark.parametrize(
    ("ids", "error", "match"),
    [
        pytest.param(
            ["GPU-nope"], InvalidRequestError, r"unknown device ID 'GPU-nope'", id="unknown"
        ),
        pytest.param([], InvalidRequestError, r"names no devices", id="empty"),
        pytest.param(["@0", "@0"], InvalidRequestError, r"repeats device ID '\S+'", id="duplicate"),
        pytest.param(
            ["@1"], DeviceUnavailableError, r"device GPU-\S+ \(GPU 1\) is Unhealthy", id="unhealthy"
        ),
    ],
)
def test_refused_requests_name_the_id(ids, error, match):
    inventory = make_inventory(2)
    allocator, res = setup(inventory)
    real = [inventory.gpus[int(i[1:])].uuid if i.startswith("@") else i for i in ids]
    with pytest.raises(error, match=match):
        allocator.allocate(res["nvidia.com/gpu"], frozenset({inventory.gpus[1].uuid}), [real])


def test_a_bad_second_container_refuses_the_whole_request():
    inventory = make_inventory(2)
    allocator, res = setup(inventory)
    with pytest.raises(InvalidRequestError, match="container request 1: unknown device ID 'x'"):
        allocator.allocate(res["nvidia.com/gpu"], frozenset(), [[inventory.gpus[0].uuid], ["x"]])


def test_an_unhealthy_mig_device_leaves_its_siblings_usable():
    inventory = make_inventory(1, mig={0: ["1g.10gb", "1g.10gb"]})
    allocator, res = setup(inventory)
    bad, good = (d.id for d in res["nvidia.com/mig-1g.10gb"].devices)
    assert allocator.allocate(res["nvidia.com/mig-1g.10gb"], frozenset({bad}), [[good]])
    with pytest.raises(DeviceUnavailableError, match=bad):
        allocator.allocate(res["nvidia.com/mig-1g.10gb"], frozenset({bad}), [[bad]])


def test_fail_requests_greater_than_one():
    inventory = make_inventory(2)
    ts = TimeSlicing(
        fail_requests_greater_than_one=True,
        resources=(SharedResource(name="nvidia.com/gpu", replicas=2),),
    )
    allocator, res = setup(inventory, time_slicing=ts)
    ids = [d.id for d in res["nvidia.com/gpu"].devices[:2]]
    with pytest.raises(InvalidRequestError, match=r"maximum request size .* is 1"):
        allocator.allocate(res["nvidia.com/gpu"], frozenset(), [ids])
    assert allocator.allocate(res["nvidia.com/gpu"], frozenset(), [ids[:1]])


def write_spec(directory: Path, uuids: Sequence[str]) -> None:
    spec = {
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "devices": [{"name": u} for u in uuids],
    }
    (directory / "nvidia.json").write_text(json.dumps(spec))


def test_cdi_cri_names_devices_and_fails_when_no_spec_names_one(tmp_path):
    inventory = make_inventory(2)
    write_spec(tmp_path, [inventory.gpus[0].uuid, "all"])
    clock = FakeClock()
    s = settings(device_list_strategies=(DeviceListStrategy.CDI_CRI,), cdi_spec_dirs=(tmp_path,))
    allocator = Allocator(s, inventory, CdiRegistry([tmp_path], clock=clock))
    resource = build_resources(inventory, s)[0]
    (alloc,) = allocator.allocate(resource, frozenset(), [[inventory.gpus[0].uuid]])
    assert alloc.cdi_devices == (f"nvidia.com/gpu={inventory.gpus[0].uuid}",)
    assert alloc.envs == {}
    with pytest.raises(
        DeviceUnavailableError, match=f"no CDI spec in {tmp_path} names nvidia.com/gpu="
    ):
        allocator.allocate(resource, frozenset(), [[inventory.gpus[1].uuid]])
    write_spec(tmp_path, [g.uuid for g in inventory.gpus])
    clock.advance(2.0)
    (alloc,) = allocator.allocate(resource, frozenset(), [[inventory.gpus[1].uuid]])
    assert alloc.cdi_devices == (f"nvidia.com/gpu={inventory.gpus[1].uuid}",)


def test_preferred_whole_gpus_follow_the_link_matrix():
    inventory = load_inventory("pcie-4x-nvlink-pairs")
    allocator, res = setup(inventory)
    u = [g.uuid for g in inventory.gpus]
    request = PreferredRequest(available=(u[0], u[2], u[3]), must_include=(), size=2)
    assert allocator.preferred(res["nvidia.com/gpu"], request) == (u[2], u[3])
    with_must = PreferredRequest(available=tuple(u), must_include=(u[1],), size=2)
    assert allocator.preferred(res["nvidia.com/gpu"], with_must) == (u[0], u[1])


def test_preferred_replicas_land_on_distinct_gpus():
    inventory = make_inventory(4)
    ts = TimeSlicing(resources=(SharedResource(name="nvidia.com/gpu", replicas=4),))
    allocator, res = setup(inventory, time_slicing=ts)
    ids = tuple(d.id for d in res["nvidia.com/gpu"].devices)
    picked = allocator.preferred(
        res["nvidia.com/gpu"], PreferredRequest(available=ids, must_include=(), size=3)
    )
    gpus = [d.gpu_index for i in picked if (d := res["nvidia.com/gpu"].device(i)) is not None]
    assert len(set(gpus)) == 3


def test_preferred_mig_packs_onto_a_gpu_already_in_use():
    inventory = make_inventory(2, mig={0: ["1g.10gb"] * 3, 1: ["1g.10gb"] * 3})
    allocator, res = setup(inventory)
    devices = res["nvidia.com/mig-1g.10gb"].devices
    in_use = devices[4].id  # on GPU 1
    available = tuple(d.id for d in devices if d.id != in_use)
    (picked,) = allocator.preferred(
        res["nvidia.com/mig-1g.10gb"],
        PreferredRequest(available=available, must_include=(), size=1),
    )
    device = res["nvidia.com/mig-1g.10gb"].device(picked)
    assert device is not None
    assert device.gpu_index == 1


@pytest.mark.parametrize(
    ("available", "must", "size", "match"),
    [
        pytest.param(("x",), (), 1, "unknown device ID 'x'", id="unknown"),
        pytest.param(
            ("@0",), ("@1",), 1, r"must-include device ID \S+ not in available", id="must outside"
        ),
        pytest.param(("@0",), (), 2, r"allocation_size 2 is outside \[0, 1\]", id="too big"),
        pytest.param(("@0", "@1"), ("@0", "@1"), 1, r"outside \[2, 2\]", id="must > size"),
    ],
)
def test_preferred_refuses_impossible_requests(available, must, size, match):
    inventory = make_inventory(2)
    allocator, res = setup(inventory)

    def real(ids: Sequence[str]) -> tuple[str, ...]:
        return tuple(inventory.gpus[int(i[1:])].uuid if i.startswith("@") else i for i in ids)

    with pytest.raises(InvalidRequestError, match=match):
        allocator.preferred(
            res["nvidia.com/gpu"],
            PreferredRequest(available=real(available), must_include=real(must), size=size),
        )
