"""Builders for topology tests: hand-made inventories (agent.model) and PodResources snapshots."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from agent.availability import (
    ContainerGrant,
    DeviceGrant,
    MemoryGrant,
    PodGrant,
    PodResourcesSnapshot,
)
from agent.model import (
    Gpu,
    GpuUuid,
    LinkMatrix,
    MigDevice,
    MigMode,
    MigUuid,
    NodeInventory,
    NumaNode,
    NvlinkFabric,
    parse_cpulist,
)
from agent.resource_names import GPU_RESOURCE, mig_resource


def gpu_uuid(index: int) -> GpuUuid:
    return GpuUuid(f"GPU-0a1b2c3d-{index:04d}-4000-8000-000000000000")


def mig_uuid(gpu: int, slot: int) -> MigUuid:
    return MigUuid(f"MIG-5e6f7a8b-{gpu:02d}{slot:02d}-4000-8000-000000000000")


def make_gpu(
    index: int, numa: int | None, *, product: str = "NVIDIA H100 80GB HBM3", mig: str = ""
) -> Gpu:
    """`mig` is a layout like `3g.40gb@0:4,1g.10gb@4:1` (MIG enabled when given)."""
    devices = []
    for slot, part in enumerate(p for p in mig.split(",") if p):
        profile, _, place = part.partition("@")
        start, _, size = place.partition(":")
        devices.append(
            MigDevice(
                uuid=mig_uuid(index, slot),
                profile=profile,
                gi_id=slot + 1,
                ci_id=0,
                memory_mib=10 * 1024 * int(size),
                start=int(start),
                size=int(size),
            )
        )
    return Gpu(
        index=index,
        uuid=gpu_uuid(index),
        product=product,
        memory_mib=81559,
        pci_bus_id=f"00000000:{0x18 + 0x10 * index:02X}:00.0",
        minor=index,
        numa_node=numa,
        compute_capability="9.0",
        mig_mode=MigMode.ENABLED if mig else MigMode.DISABLED,
        mig_devices=tuple(devices),
    )


def make_numa(
    ids: Sequence[int], cpus: Sequence[str], *, memory_mib: int = 512 * 1024
) -> tuple[NumaNode, ...]:
    n = len(ids)
    return tuple(
        NumaNode(
            id=i,
            cpus=parse_cpulist(c),
            memory_mib=memory_mib,
            hugepages=(("2Mi", 512), ("1Gi", 4)) if i == 0 else (),
            distances=tuple(10 if j == pos else 21 for j in range(n)),
        )
        for pos, (i, c) in enumerate(zip(ids, cpus, strict=True))
    )


def dgx_h100() -> NodeInventory:
    """8× H100, every pair NV18, GPU0-3 on NUMA 0 and GPU4-7 on NUMA 1."""
    cells = [["X" if i == j else "NV18" for j in range(8)] for i in range(8)]
    return NodeInventory(
        gpus=tuple(make_gpu(i, 0 if i < 4 else 1) for i in range(8)),
        links=LinkMatrix.from_cells(cells),
        numa_nodes=make_numa([0, 1], ["0-55,112-167", "56-111,168-223"]),
        driver_version="550.54.15",
        cuda_driver_version=12040,
        nvlink_fabric=NvlinkFabric.NVSWITCH,
    )


def pcie_pairs() -> NodeInventory:
    """4× A100 PCIe with NVLink bridges in pairs; {0,1} on NUMA 0, {2,3} on NUMA 1."""
    cells = [
        ["X", "NV12", "SYS", "SYS"],
        ["NV12", "X", "SYS", "SYS"],
        ["SYS", "SYS", "X", "NODE"],
        ["SYS", "SYS", "NODE", "X"],
    ]
    return NodeInventory(
        gpus=tuple(make_gpu(i, i // 2, product="NVIDIA A100 80GB PCIe") for i in range(4)),
        links=LinkMatrix.from_cells(cells),
        numa_nodes=make_numa([0, 1], ["0-27,56-83", "28-55,84-111"]),
        driver_version="535.104.05",
        cuda_driver_version=12020,
        nvlink_fabric=NvlinkFabric.DIRECT,
    )


MIG_LAYOUT = "3g.40gb@0:4,1g.10gb@4:1,1g.10gb@5:1,1g.10gb@6:1"


def mig_mixed() -> NodeInventory:
    """2× H100: GPU0 in MIG mode (3g + 3×1g), GPU1 whole; one NUMA node; PCIe PXB between them."""
    return NodeInventory(
        gpus=(make_gpu(0, 0, mig=MIG_LAYOUT), make_gpu(1, 0)),
        links=LinkMatrix.from_cells([["X", "PXB"], ["PXB", "X"]]),
        numa_nodes=make_numa([0], ["0-31"]),
        driver_version="550.54.15",
        cuda_driver_version=12040,
    )


def no_numa(numa_nodes: int = 1, memory_affinity: Sequence[int] = ()) -> NodeInventory:
    """One GPU whose sysfs NUMA node is -1 (a VM), on a node with `numa_nodes` NUMA nodes; NVML
    names `memory_affinity` for its memory (empty: NVML does not say)."""
    gpu = replace(make_gpu(0, None, product="NVIDIA L40S"), memory_affinity=tuple(memory_affinity))
    cpus = [f"{16 * i}-{16 * i + 15}" for i in range(numa_nodes)]
    return NodeInventory(
        gpus=(gpu,),
        links=LinkMatrix(((None,),)),
        numa_nodes=make_numa(list(range(numa_nodes)), cpus),
        driver_version="550.54.15",
    )


def no_numa_two_nodes() -> NodeInventory:
    """`no_numa` on two NUMA nodes with nothing else known: the GPU belongs to no zone."""
    return no_numa(numa_nodes=2)


INVENTORIES = {
    "dgx-h100": dgx_h100,
    "pcie-pairs": pcie_pairs,
    "mig-mixed": mig_mixed,
    "no-numa": no_numa,
    "no-numa-two-nodes": no_numa_two_nodes,
}


def allocatable_of(inventory: NodeInventory, cpus: Sequence[int] = ()) -> PodResourcesSnapshot:
    """What the kubelet reports as allocatable for this inventory's devices (mixed MIG strategy)."""
    grants = []
    for gpu in inventory.gpus:
        numa = () if gpu.numa_node is None else (gpu.numa_node,)
        if gpu.mig_devices:
            for m in gpu.mig_devices:
                grants.append(
                    DeviceGrant(
                        resource_name=mig_resource(m.profile),
                        device_ids=(str(m.uuid),),
                        numa_nodes=numa,
                    )
                )
        else:
            grants.append(
                DeviceGrant(
                    resource_name=GPU_RESOURCE, device_ids=(str(gpu.uuid),), numa_nodes=numa
                )
            )
    return PodResourcesSnapshot(devices=tuple(grants), cpu_ids=tuple(cpus))


def gpu_pod(
    namespace: str,
    name: str,
    *device_ids: str,
    resource: str = GPU_RESOURCE,
    cpus: Sequence[int] = (),
    memory: Sequence[MemoryGrant] = (),
) -> PodGrant:
    devices = (
        (DeviceGrant(resource_name=resource, device_ids=tuple(device_ids)),) if device_ids else ()
    )
    return PodGrant(
        namespace=namespace,
        name=name,
        containers=(
            ContainerGrant(name="main", devices=devices, cpu_ids=tuple(cpus), memory=tuple(memory)),
        ),
    )
