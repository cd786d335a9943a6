"""What the DRA driver publishes of a node: one `DraDevice` per whole GPU and per MIG device.

Names as `agent.dra.names` forms them. A GPU in MIG mode is published only through its MIG
devices.

Attributes are unprefixed (the driver's own domain) where NVIDIA names one (`type`, `uuid`,
`productName`, `architecture`, `cudaComputeCapability`, `driverVersion`, `cudaDriverVersion` (the
CUDA version the driver supports), MIG `profile` and `parentUUID`), ours (`numaNode`,
`nvlinkIsland`, `clique`, a whole GPU's `shared`), and the standard
`resource.kubernetes.io/pcieRoot` (where sysfs told it) and `resource.kubernetes.io/pciBusID`.
Capacity `memory`, and `multiprocessors` for a MIG device (its profile's SM count, where NVML
said it); a GPU shared by DESIGN §12 also `compute` (percent), and a share takes the equal
split of both unless its claim asks otherwise (a default compute of 100 would let one share take
every SM's worth of capacity, so a second share asking memory alone would no longer fit).
A device is Unhealthy (`unhealthy_devices`) when NVML reported an Xid on it or its GPU, or lost
the GPU, and a share also while MPS does not serve it (DESIGN §12: the device plugin's shares go
Unhealthy then too).
Values are in the API's typed form (`{"string": ...}`, `{"int": ...}`, `{"version": ...}`);
versions are made semantic-version strings (`9.0` -> `9.0.0`, `535.104.05` -> `535.104.5`).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from agent.availability import DynamicDevice
from agent.dra import DRIVER
from agent.dra.names import gpu_device_name, mig_device_name
from agent.labels import gpu_family
from agent.model import Gpu, MigDevice, MigMode, NodeInventory
from agent.nvml.sysfs import sysfs_bus_id
from agent.resource_names import DRA_GPU_RESOURCE, dra_mig_resource

PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"
VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"

AttributeValue = Mapping[str, Any]

SHARED = "shared"
"""A whole GPU's attribute: whether the agent shares it (DESIGN §12). The DeviceClasses select by
it, not by `device.allowMultipleAllocations`, which CEL does not know on a server whose
DRAConsumableCapacity gate is off (alpha until 1.36: a DeviceClass naming it is refused)."""
MEMORY = "memory"
MULTIPROCESSORS = "multiprocessors"
COMPUTE = "compute"
FULL_COMPUTE = 100
"""A shared GPU's `compute` capacity: percent of its SMs (DESIGN §12's `gpu-compute`)."""
NVML_UNHEALTHY = "Xid or lost GPU reported by NVML"
"""Why a device whose GPU or MIG UUID the health tracker marks is Unhealthy."""


class DeviceType(StrEnum):
    GPU = "gpu"
    MIG = "mig"


@dataclass(frozen=True, slots=True, kw_only=True)
class DraDevice:
    """One published device: its name in the pool, the UUID containers get, what it offers."""

    name: str
    type: DeviceType
    uuid: str  # GPU or MIG UUID: what NVIDIA_VISIBLE_DEVICES names
    gpu_uuid: str  # the (parent) GPU's UUID
    gpu_index: int
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    capacity: Mapping[str, str] = field(default_factory=dict)  # name -> quantity
    share_memory_mib: int = 0  # > 0: a shared GPU; what a share takes unless its claim says
    share_compute_percent: int = 0  # a share's compute (percent of the SMs) unless its claim says

    @property
    def shared(self) -> bool:
        return self.share_memory_mib > 0


def semver(text: str) -> str:
    """A version NVML or CUDA writes as a semantic version: three dot-separated numbers without
    leading zeros (missing parts are 0; anything after the third part is dropped)."""
    parts = [p for p in re.split(r"[.]", text.strip()) if p][:3]
    numbers = [str(int(p)) if p.isdigit() else "0" for p in parts]
    return ".".join([*numbers, "0", "0", "0"][:3])


def dra_devices(
    inventory: NodeInventory,
    gpus: Collection[int],
    pcie_roots: Mapping[int, str] | None = None,
    shared: Mapping[int, int] | None = None,
) -> tuple[DraDevice, ...]:
    """The devices of the GPUs whose indices are in `gpus` (those the config gives to DRA), in
    GPU index order; `pcie_roots` maps a GPU index to its PCIe root (`pci0000:00`) where known,
    `shared` a whole GPU shared by DESIGN §12 to its replicas (a share's default is the equal
    split of its usable memory)."""
    islands = _island_ids(inventory)
    roots = pcie_roots or {}
    replicas = shared or {}
    out: list[DraDevice] = []
    for gpu in inventory.gpus:
        if gpu.index not in gpus:
            continue
        common = _gpu_attributes(inventory, gpu, islands[gpu.index], roots.get(gpu.index))
        if gpu.mig_mode is MigMode.ENABLED:
            out.extend(_mig_device(gpu, mig, common) for mig in gpu.mig_devices)
        else:
            out.append(_gpu_device(gpu, common, replicas.get(gpu.index, 0)))
    return tuple(out)


def _island_ids(inventory: NodeInventory) -> dict[int, int]:
    """GPU index -> its NVLink island's number (the island's lowest GPU index)."""
    return {i: min(island) for island in inventory.links.nvlink_islands() for i in island}


def _gpu_attributes(
    inventory: NodeInventory, gpu: Gpu, island: int, pcie_root: str | None
) -> dict[str, AttributeValue]:
    attrs: dict[str, AttributeValue] = {
        "productName": {"string": gpu.product},
        "architecture": {"string": gpu_family(gpu.compute_capability).title()},
        "cudaComputeCapability": {"version": semver(gpu.compute_capability)},
        "nvlinkIsland": {"int": island},
        PCI_BUS_ID: {"string": sysfs_bus_id(gpu.pci_bus_id)},
    }
    if inventory.driver_version:
        attrs["driverVersion"] = {"version": semver(inventory.driver_version)}
    cuda = inventory.cuda_driver_version  # NVML's 12040: CUDA 12.4
    if cuda > 0:
        attrs["cudaDriverVersion"] = {"version": f"{cuda // 1000}.{cuda % 1000 // 10}.0"}
    numa = inventory.gpu_numa_zone(gpu)
    if numa is not None:
        attrs["numaNode"] = {"int": numa}
    clique = gpu.fabric.clique if gpu.fabric is not None else None
    if clique:
        attrs["clique"] = {"string": clique}
    if pcie_root:
        attrs[PCIE_ROOT] = {"string": pcie_root}
    return attrs


def _gpu_device(gpu: Gpu, common: Mapping[str, AttributeValue], replicas: int) -> DraDevice:
    attrs: dict[str, AttributeValue] = {
        "type": {"string": DeviceType.GPU.value},
        "uuid": {"string": gpu.uuid},
        SHARED: {"bool": replicas > 0},
        **common,
    }
    capacity = {MEMORY: f"{gpu.usable_memory_mib}Mi"}
    if replicas > 0:
        capacity[COMPUTE] = str(FULL_COMPUTE)
    return DraDevice(
        name=gpu_device_name(gpu),
        type=DeviceType.GPU,
        uuid=gpu.uuid,
        gpu_uuid=gpu.uuid,
        gpu_index=gpu.index,
        attributes=attrs,
        capacity=capacity,
        share_memory_mib=gpu.usable_memory_mib // replicas if replicas > 0 else 0,
        share_compute_percent=max(1, FULL_COMPUTE // replicas) if replicas > 0 else 0,
    )


def _mig_device(gpu: Gpu, mig: MigDevice, common: Mapping[str, AttributeValue]) -> DraDevice:
    attrs: dict[str, AttributeValue] = {
        "type": {"string": DeviceType.MIG.value},
        "uuid": {"string": mig.uuid},
        "profile": {"string": mig.profile},
        "parentUUID": {"string": gpu.uuid},
        **common,
    }
    capacity = {MEMORY: f"{mig.memory_mib}Mi"}
    if mig.multiprocessors > 0:
        capacity[MULTIPROCESSORS] = str(mig.multiprocessors)
    return DraDevice(
        name=mig_device_name(gpu, mig),
        type=DeviceType.MIG,
        uuid=mig.uuid,
        gpu_uuid=gpu.uuid,
        gpu_index=gpu.index,
        attributes=attrs,
        capacity=capacity,
    )


def unhealthy_devices(
    devices: Sequence[DraDevice], unhealthy: Collection[str], mps_down: str | None
) -> dict[str, str]:
    """Device name -> why it is Unhealthy: its GPU or MIG UUID is in `unhealthy` (the health
    tracker's), or it is a share while MPS does not serve (`mps_down`, the reason)."""
    out: dict[str, str] = {}
    for device in devices:
        if device.uuid in unhealthy or device.gpu_uuid in unhealthy:
            out[device.name] = NVML_UNHEALTHY
        elif device.shared and mps_down is not None:
            out[device.name] = mps_down
    return out


def nrt_resource(device: DraDevice) -> str:
    """The NRT resource line `device` counts in (`agent.resource_names`)."""
    if device.type is DeviceType.MIG:
        return dra_mig_resource(str(device.attributes["profile"]["string"]))
    return DRA_GPU_RESOURCE


def nrt_devices(pool: str, devices: Sequence[DraDevice]) -> tuple[DynamicDevice, ...]:
    """The driver's devices of the node's pool as the NRT counts them (DESIGN §14: a device
    prepared for a claim is used)."""
    return tuple(
        DynamicDevice(
            driver=DRIVER,
            pool=pool,
            name=d.name,
            gpu_index=d.gpu_index,
            uuid=d.uuid,
            resource=nrt_resource(d),
        )
        for d in devices
    )
