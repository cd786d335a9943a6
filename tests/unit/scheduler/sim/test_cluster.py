"""`scheduler/sim/cluster.py`: the in-memory cluster for the simulator and benchmarks."""

from __future__ import annotations

import pytest

from agent.model import (
    Gpu,
    GpuUuid,
    LinkMatrix,
    MigDevice,
    MigMode,
    MigUuid,
    NodeInventory,
    NvlinkFabric,
)
from scheduler.placement import PodRequest, TopologyConstraint, default_scoring
from scheduler.sim.cluster import Cluster, NodeSpec, make_links


def inventory_with_mig() -> NodeInventory:
    def gpu(i: int, mig: tuple[MigDevice, ...] = ()) -> Gpu:
        return Gpu(
            index=i,
            uuid=GpuUuid(f"GPU-{i}"),
            product="NVIDIA A100-SXM4-80GB",
            memory_mib=81920,
            pci_bus_id=f"00000000:{i:02x}:00.0",
            minor=i,
            numa_node=0,
            compute_capability="8.0",
            mig_mode=MigMode.ENABLED if mig else MigMode.DISABLED,
            mig_devices=mig,
        )

    migs = tuple(
        MigDevice(
            uuid=MigUuid(f"MIG-{k}"),
            profile="1g.10gb",
            gi_id=k,
            ci_id=0,
            memory_mib=9856,
            start=k,
            size=1,
        )
        for k in range(3)
    )
    return NodeInventory(
        gpus=(gpu(0), gpu(1, migs)),
        links=LinkMatrix.from_cells([["X", "NV12"], ["NV12", "X"]]),
    )


@pytest.mark.parametrize(
    ("fabric", "cell01", "cell02", "cell04"),
    [
        pytest.param(NvlinkFabric.NVSWITCH, "NV18", "NV18", "NV18", id="nvswitch"),
        pytest.param(NvlinkFabric.DIRECT, "NV4", "NODE", "SYS", id="direct pairs"),
        pytest.param(NvlinkFabric.NONE, "PIX", "NODE", "SYS", id="pcie"),
    ],
)
def test_make_links(fabric, cell01, cell02, cell04):
    cells = make_links(8, fabric, 2).cells()
    assert (cells[0][1], cells[0][2], cells[0][4]) == (cell01, cell02, cell04)


def test_specs_build_labelled_nodes_sharing_one_selector():
    cluster = Cluster.from_specs(NodeSpec(name=f"n{i}", gpus=8) for i in range(3))
    nodes = list(cluster.snapshot.nodes.values())
    assert nodes[0].labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert nodes[0].labels["nvidia.com/gpu.count"] == "8"
    assert nodes[0].allocatable["nvidia.com/gpu"] == 8
    assert nodes[0].selector is nodes[1].selector is nodes[2].selector


def test_place_binds_and_unbind_frees():
    cluster = Cluster.from_specs([NodeSpec(name="a"), NodeSpec(name="b")])
    decisions = [
        cluster.place(PodRequest(key=f"default/p{i}", gpus=1), default_scoring()) for i in range(8)
    ]
    assert {d.node for d in decisions} == {"a"}
    stats = cluster.stats()
    assert (stats.gpu_capacity_milli, stats.gpu_allocated_milli, stats.pods) == (16_000, 8_000, 8)
    assert cluster.unbind("default/p0") is not None
    assert cluster.stats().gpu_allocated_milli == 7_000
    assert cluster.unbind("default/p0") is None


def test_fragmented_gpus_are_counted():
    cluster = Cluster.from_specs([NodeSpec(name="a", gpus=2)])
    cluster.place(PodRequest(key="default/s", gpu_milli=300), default_scoring())
    assert cluster.stats().fragmented_gpus == 1


def test_inventory_node_has_mig_devices_and_whole_gpus():
    cluster = Cluster()
    node = cluster.add_inventory("dgx", inventory_with_mig())
    assert node.allocatable["nvidia.com/gpu"] == 1
    assert node.allocatable["nvidia.com/mig-1g.10gb"] == 3
    d = cluster.place(PodRequest(key="default/m", mig={"1g.10gb": 2}), default_scoring())
    assert d.assignment is not None
    assert d.assignment.mig == ((1, "1g.10gb"), (1, "1g.10gb"))
    assert cluster.snapshot.node("dgx").mig_free[1]["1g.10gb"] == 1


def test_gang_binds_all_members_or_none():
    specs = [NodeSpec(name=f"n{i}", labels={"gputopo.io/rack": f"r{i // 2}"}) for i in range(4)]
    cluster = Cluster.from_specs(specs)
    gang = [PodRequest(key=f"default/g{i}", gpus=8) for i in range(2)]
    result = cluster.place_gang(
        gang, default_scoring(), topology=TopologyConstraint(label="gputopo.io/rack")
    )
    assert result.ok
    assert cluster.stats().pods == 2
    too_big = [PodRequest(key=f"default/h{i}", gpus=8) for i in range(3)]
    failed = cluster.place_gang(too_big, default_scoring())
    assert not failed.ok
    assert cluster.stats().pods == 2
