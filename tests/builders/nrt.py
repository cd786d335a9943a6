"""NodeResourceTopology objects for scheduler tests, made by the real encoder (agent.nrt)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from agent.availability import (
    ContainerGrant,
    DeviceGrant,
    PodGrant,
    PodResourcesSnapshot,
    compute_availability,
)
from agent.model import GpuFabric, NodeInventory
from agent.nrt import encode
from agent.numa_capacity import KubeletConfig, numa_capacity
from agent.resource_names import GPU_RESOURCE
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
    fabric info only as membership of the node's NVLink clique (GPU zone attribute `clique`)."""
    gpus = tuple(
        replace(
            g,
            numa_node=inventory.gpu_numa_zone(g),
            memory_affinity=(),
            fabric=_published_fabric(g.fabric, inventory.nvlink_clique()),
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
