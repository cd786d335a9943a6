"""The NVLink clique in the NRT (DESIGN §13): gputopo.io/nvlinkClique and GPU zone `clique`."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from agent.errors import TopologyDecodeError
from agent.inventory import load_inventory
from agent.model import FabricState, GpuFabric, NodeInventory
from agent.nrt import decode
from tests.builders.nrt import as_published, make_nrt

CLIQUE = "5c1f0e7a-3d2b-4c8e-9a61-0b7d2e4f9c13.1"


def attrs(entries: list[dict[str, str]]) -> dict[str, str]:
    return {a["name"]: a["value"] for a in entries}


def gpu_zones(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return [z for z in obj["zones"] if z["type"] == "GPU"]


def gb200(*, gpu3: GpuFabric | None = None) -> NodeInventory:
    inventory = load_inventory("gb200-nvl72-node")
    if gpu3 is None:
        return inventory
    gpus = (*inventory.gpus[:3], replace(inventory.gpus[3], fabric=gpu3))
    return replace(inventory, gpus=gpus)


def test_gb200_node_publishes_its_clique_at_top_level_and_on_every_gpu_zone() -> None:
    obj = make_nrt("rack1-tray1", gb200())
    assert attrs(obj["attributes"])["gputopo.io/nvlinkClique"] == CLIQUE
    assert [attrs(z["attributes"]).get("clique") for z in gpu_zones(obj)] == [CLIQUE] * 4
    decoded = decode(obj)
    assert decoded.nvlink_clique == CLIQUE
    assert decoded.inventory.nvlink_clique() == CLIQUE


def test_a_gpu_still_registering_gets_no_clique_attribute() -> None:
    registering = GpuFabric(
        cluster_uuid=CLIQUE[:-2], clique_id=1, state=FabricState.IN_PROGRESS, status="NotReady"
    )
    obj = make_nrt("rack1-tray1", gb200(gpu3=registering))
    assert attrs(obj["attributes"])["gputopo.io/nvlinkClique"] == CLIQUE
    assert [attrs(z["attributes"]).get("clique") for z in gpu_zones(obj)] == [CLIQUE] * 3 + [None]
    assert decode(obj).inventory.gpus[3].fabric is None


@pytest.mark.parametrize(
    "gpu3",
    [
        None,
        GpuFabric(cluster_uuid=CLIQUE[:-2], state=FabricState.IN_PROGRESS, status="NotReady"),
        GpuFabric(cluster_uuid=CLIQUE[:-2], clique_id=2, state=FabricState.COMPLETED),
    ],
    ids=["all attached", "one registering", "one in another clique"],
)
def test_round_trip_keeps_what_the_nrt_carries(gpu3: GpuFabric | None) -> None:
    inventory = gb200(gpu3=gpu3)
    decoded = decode(make_nrt("rack1-tray1", inventory))
    assert decoded.inventory.gpus == as_published(inventory).gpus
    assert decoded.inventory.nvlink_clique() == inventory.nvlink_clique()


@pytest.mark.parametrize("name", ["dgx-h100", "vm-h200"])
def test_nodes_without_a_clique_write_neither_attribute(name: str) -> None:
    obj = make_nrt("n1", load_inventory(name))
    assert "gputopo.io/nvlinkClique" not in attrs(obj["attributes"])
    assert all("clique" not in attrs(z["attributes"]) for z in gpu_zones(obj))
    decoded = decode(obj)
    assert decoded.nvlink_clique is None
    assert all(g.fabric is None for g in decoded.inventory.gpus)


def test_an_object_without_clique_attributes_decodes() -> None:
    obj = make_nrt("rack1-tray1", gb200())
    older = copy.deepcopy(obj)
    older["attributes"] = [a for a in older["attributes"] if "Clique" not in a["name"]]
    for zone in gpu_zones(older):
        zone["attributes"] = [a for a in zone["attributes"] if a["name"] != "clique"]
    decoded = decode(older)
    assert decoded.nvlink_clique is None
    assert decoded.inventory.nvlink_clique() is None


@pytest.mark.parametrize(
    "value",
    [
        "rack-7",
        "5C1F0E7A-3D2B-4C8E-9A61-0B7D2E4F9C13.1",
        "5c1f0e7a-3d2b-4c8e-9a61-0b7d2e4f9c13.",
        "5c1f0e7a-3d2b-4c8e-9a61-0b7d2e4f9c13.01",
        "00000000-0000-0000-0000-000000000000.1",
    ],
)
def test_decode_rejects_a_malformed_gpu_clique(value: str) -> None:
    obj = make_nrt("rack1-tray1", gb200())
    zone = gpu_zones(obj)[2]
    for attribute in zone["attributes"]:
        if attribute["name"] == "clique":
            attribute["value"] = value
    pos = obj["zones"].index(zone)
    with pytest.raises(TopologyDecodeError) as raised:
        decode(obj)
    assert str(raised.value) == (
        f"NodeResourceTopology rack1-tray1: zones[{pos}] (gpu-2).attributes.clique: "
        f"{value!r} is not <cluster UUID>.<clique ID>"
    )
