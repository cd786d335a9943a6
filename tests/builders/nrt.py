"""NodeResourceTopology objects for scheduler tests, made by the real encoder (agent.nrt)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from agent.availability import (
    ContainerGrant,
    DeviceGrant,
    DynamicDevice,
    PodGrant,
    PodResourcesSnapshot,
    ResourceCounts,
    compute_availability,
)
from agent.model import GpuFabric, NodeInventory
from agent.nrt import encode
from agent.numa_capacity import KubeletConfig, numa_capacity
from agent.resource_names import DRA_DRIVER, DRA_GPU_RESOURCE, GPU_RESOURCE
from agent.share_pods import PodShare
from agent.shares import GPU_COMPUTE, GPU_MEMORY, SHARED_GPU_RESOURCE, Sharing
from tests.builders.topology import allocatable_of


def make_nrt(
    node: str,
    inventory: NodeInventory,
    pods: Mapping[tuple[str, str], Sequence[str | tuple[str, str]]] | None = None,
    *,
    policy: str = "none",
    podresources: bool = True,
) -> dict[str, Any]:
    """The NRT the agent would publish. `pods` maps (namespace, name) to the devices the pod holds:
    GPU UUIDs, or (resource, device ID) pairs for MIG devices."""
    snapshot: PodResourcesSnapshot | None = None
    if podresources:
        base = allocatable_of(inventory)
        grants = tuple(_grant(ns, name, ids) for (ns, name), ids in (pods or {}).items())
        snapshot = PodResourcesSnapshot(devices=base.devices, cpu_ids=base.cpu_ids, pods=grants)
    capacity = numa_capacity(inventory.numa_nodes, KubeletConfig(topology_manager_policy=policy))
    availability = compute_availability(inventory, capacity, snapshot)
    return encode(inventory, availability, node_name=node, policy=policy)


def as_published(inventory: NodeInventory) -> NodeInventory:
    """The inventory as its NRT tells it: each GPU's NUMA node is the zone it is published under
    (`NodeInventory.gpu_numa_zone`), not its sysfs reading; NVML's memory affinity is left out;
    fabric info only as membership of the node's NVLink clique (GPU zone attribute `clique`); a
    MIG device's SM count is left out."""
    gpus = tuple(
        replace(
            g,
            numa_node=inventory.gpu_numa_zone(g),
            memory_affinity=(),
            fabric=_published_fabric(g.fabric, inventory.nvlink_clique()),
            mig_devices=tuple(replace(m, multiprocessors=0) for m in g.mig_devices),
        )
        for g in inventory.gpus
    )
    return replace(inventory, gpus=gpus)


def _published_fabric(fabric: GpuFabric | None, clique: str | None) -> GpuFabric | None:
    if fabric is None or clique is None or fabric.clique != clique:
        return None
    return GpuFabric.attached_to(clique)


def _grant(namespace: str, name: str, devices: Sequence[str | tuple[str, str]]) -> PodGrant:
    by_resource: dict[str, list[str]] = {}
    for device in devices:
        resource, device_id = device if isinstance(device, tuple) else (GPU_RESOURCE, device)
        by_resource.setdefault(resource, []).append(device_id)
    containers = tuple(
        ContainerGrant(name=f"c{i}", devices=(DeviceGrant(resource_name=r, device_ids=tuple(ids)),))
        for i, (r, ids) in enumerate(sorted(by_resource.items()))
    )
    return PodGrant(namespace=namespace, name=name, containers=containers)


def make_shared_nrt(
    node: str,
    inventory: NodeInventory,
    *,
    shared: Sequence[int],
    slots: int,
    resource: str = SHARED_GPU_RESOURCE,
    sharing: Sharing = Sharing.TIME_SLICING,
    memory_used: Mapping[int, int] | None = None,
    share_pods: Mapping[int, tuple[PodShare, ...]] | None = None,
) -> dict[str, Any]:
    """The NRT of a node whose GPUs `shared` are split into `slots` replicas of `resource`, as
    the agent publishes it (DESIGN §12: the replica resource, gpu-memory and gpu-compute per
    shared GPU zone, all free but `memory_used` bytes per GPU index; `share_pods`: the
    `sharePods` of each GPU index). The scheduler reads structure from it, each running share's
    use from `sharePods`, and the memory use as a floor under what pods explain."""
    capacity = numa_capacity(inventory.numa_nodes, KubeletConfig())
    base = compute_availability(inventory, capacity, allocatable_of(inventory))
    zones = []
    for zone in base.gpus:
        if zone.index not in shared:
            zones.append(zone)
            continue
        memory = inventory.gpus[zone.index].memory_mib << 20
        counts = (
            ResourceCounts(name=resource, capacity=slots, allocatable=slots, available=slots),
            ResourceCounts(
                name=GPU_MEMORY,
                capacity=memory,
                allocatable=memory,
                available=memory - (memory_used or {}).get(zone.index, 0),
            ),
            ResourceCounts(name=GPU_COMPUTE, capacity=100, allocatable=100, available=100),
        )
        pods = (share_pods or {}).get(zone.index, ())
        zones.append(
            replace(zone, resources=counts, sharing=sharing, shares=slots, share_pods=pods)
        )
    availability = replace(base, gpus=tuple(zones))
    return encode(inventory, availability, node_name=node)


def make_dra_nrt(node: str, inventory: NodeInventory, dra: Sequence[int]) -> dict[str, Any]:
    """The NRT the agent publishes when `--dra-gpus` gives the GPUs `dra` to its DRA driver:
    those counted in their zones under the driver's resource line, the rest as the device
    plugin's (no PodResources socket: every device free)."""
    dynamic = [
        DynamicDevice(
            driver=DRA_DRIVER,
            pool=node,
            name=f"gpu-{g}",
            gpu_index=g,
            uuid=str(inventory.gpus[g].uuid),
            resource=DRA_GPU_RESOURCE,
        )
        for g in dra
    ]
    capacity = numa_capacity(inventory.numa_nodes, KubeletConfig(topology_manager_policy="none"))
    availability = compute_availability(inventory, capacity, None, dynamic=dynamic)
    return encode(inventory, availability, node_name=node)
