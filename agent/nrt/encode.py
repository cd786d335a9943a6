"""Encoder half of the NRT codec: a node's inventory and what is free on it -> its
NodeResourceTopology object (a plain dict; no Kubernetes client).

Object shape (DESIGN.md §5; every name is in `agent.nrt.wire`)::

    zones  node-<N>  type Node   costs = SLIT distances; cpu, memory, hugepages-*, nvidia.com/*
           gpu-<i>   type GPU    parent node-<N> (`NodeInventory.gpu_numa_zone`; none when
                                 unknown); attributes uuid, pciBusId, product, ...
                                 (a shared GPU adds sharing, shares and, while shares run,
                                 sharePods, DESIGN §12;
                                 a GPU in the node's NVLink clique adds clique, §13);
                                 costs to every other GPU zone (`wire.gpu_cost`); its resources
    attributes  topologyManagerPolicy/Scope, nodeTopologyPodsFingerprint(+Method),
                gputopo.io/nvlinkClique (only on a node in a multi-node NVLink clique),
                gputopo.io/{schema,driverVersion,cudaDriverVersion,nvlinkFabric,nvlinkIslands,
                allocationSource,gpuCount,gpusFree,migGpus}: GPUs, whole GPUs free (not in MIG
                mode), GPUs in MIG mode (requested by slice)

Quantities are written as strings (cpu as `"112"` or `"111500m"`, memory and hugepages in bytes),
so that `agent.nrt.decode` reads them back losslessly.
"""

from __future__ import annotations

from typing import Any

from agent.availability import Availability, GpuAvailability, ResourceCounts
from agent.gpu_load import load_attributes
from agent.model import HEALTHY, UNHEALTHY, Gpu, MigMode, NodeInventory, NumaNode
from agent.nrt.wire import (
    API_VERSION,
    ATTR_CLIQUE,
    ATTR_CUDA,
    ATTR_DRIVER,
    ATTR_FABRIC,
    ATTR_FINGERPRINT,
    ATTR_FINGERPRINT_METHOD,
    ATTR_GPU_COUNT,
    ATTR_GPUS_FREE,
    ATTR_ISLANDS,
    ATTR_MIG_GPUS,
    ATTR_POLICY,
    ATTR_SCHEMA,
    ATTR_SCOPE,
    ATTR_SOURCE,
    GPU_ATTR_CLIQUE,
    GPU_ATTR_COMPUTE_CAPABILITY,
    GPU_ATTR_HEALTH,
    GPU_ATTR_MEMORY_MIB,
    GPU_ATTR_MIG_DEVICES,
    GPU_ATTR_MIG_LAYOUT,
    GPU_ATTR_MIG_MODE,
    GPU_ATTR_MINOR,
    GPU_ATTR_NVLINK_ISLAND,
    GPU_ATTR_PCI_BUS_ID,
    GPU_ATTR_PRODUCT,
    GPU_ATTR_SHARE_PODS,
    GPU_ATTR_SHARES,
    GPU_ATTR_SHARING,
    GPU_ATTR_UUID,
    KIND,
    NODE_ATTR_CPUS,
    SCHEMA_VERSION,
    ZONE_GPU,
    ZONE_NODE,
    gpu_cost,
    gpu_zone_name,
    legacy_topology_policy,
    node_zone_name,
)
from agent.numa_capacity import CPU
from agent.quantity import format_milli
from agent.resource_names import is_dra_resource
from agent.share_pods import encode_share_pods
from agent.shares import Sharing


def _quantity(name: str, value: int) -> str:
    return format_milli(value) if name == CPU else str(value)


def _resources(counts: tuple[ResourceCounts, ...]) -> list[dict[str, str]]:
    return [
        {
            "name": r.name,
            "capacity": _quantity(r.name, r.capacity),
            "allocatable": _quantity(r.name, r.allocatable),
            "available": _quantity(r.name, r.available),
        }
        for r in counts
    ]


def _attrs(pairs: list[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"name": name, "value": value} for name, value in pairs]


def _node_zone(
    node: NumaNode, availability: Availability, numa_ids: tuple[int, ...]
) -> dict[str, Any]:
    counts = next((n.resources for n in availability.numa if n.numa_id == node.id), ())
    zone: dict[str, Any] = {"name": node_zone_name(node.id), "type": ZONE_NODE}
    if node.distances:
        zone["costs"] = [
            {"name": node_zone_name(other), "value": node.distances[pos]}
            for pos, other in enumerate(numa_ids)
            if pos < len(node.distances)
        ]
    zone["attributes"] = _attrs([(NODE_ATTR_CPUS, node.cpulist)])
    zone["resources"] = _resources(counts)
    return zone


def _gpu_attributes(
    gpu: Gpu, island: int, entry: GpuAvailability | None, clique: str | None
) -> list[tuple[str, str]]:
    pairs = [
        (GPU_ATTR_UUID, str(gpu.uuid)),
        (GPU_ATTR_PCI_BUS_ID, gpu.pci_bus_id),
        (GPU_ATTR_PRODUCT, gpu.product),
        (GPU_ATTR_MEMORY_MIB, str(gpu.memory_mib)),
        (GPU_ATTR_COMPUTE_CAPABILITY, gpu.compute_capability),
        (GPU_ATTR_MINOR, str(gpu.minor)),
        (GPU_ATTR_MIG_MODE, str(gpu.mig_mode)),
    ]
    if gpu.mig_devices:
        ordered = sorted(gpu.mig_devices, key=lambda m: (m.start, m.gi_id, m.ci_id))
        pairs.append((GPU_ATTR_MIG_LAYOUT, gpu.mig_layout))
        pairs.append(
            (
                GPU_ATTR_MIG_DEVICES,
                ",".join(f"{m.uuid}:{m.gi_id}:{m.ci_id}:{m.memory_mib}" for m in ordered),
            )
        )
    pairs.append((GPU_ATTR_NVLINK_ISLAND, str(island)))
    healthy = entry is None or entry.healthy
    pairs.append((GPU_ATTR_HEALTH, HEALTHY if healthy else UNHEALTHY))
    sharing = Sharing.NONE if entry is None else entry.sharing
    pairs.append((GPU_ATTR_SHARING, str(sharing)))
    if entry is not None and sharing is not Sharing.NONE:
        pairs.append((GPU_ATTR_SHARES, str(entry.shares)))
        if entry.share_pods:
            pairs.append((GPU_ATTR_SHARE_PODS, encode_share_pods(entry.share_pods)))
    if clique is not None and gpu.fabric is not None and gpu.fabric.clique == clique:
        pairs.append((GPU_ATTR_CLIQUE, clique))
    if entry is not None and entry.load is not None:
        pairs.extend(load_attributes(entry.load))
    return pairs


def _gpu_zone(
    gpu: Gpu, inventory: NodeInventory, availability: Availability, island: int
) -> dict[str, Any]:
    entry = next((g for g in availability.gpus if g.index == gpu.index), None)
    zone: dict[str, Any] = {"name": gpu_zone_name(gpu.index), "type": ZONE_GPU}
    numa = inventory.gpu_numa_zone(gpu)
    if numa is not None:
        zone["parent"] = node_zone_name(numa)
    costs = [
        {
            "name": gpu_zone_name(other.index),
            "value": gpu_cost(inventory.links.link(gpu.index, other.index)),
        }
        for other in inventory.gpus
        if other.index != gpu.index
    ]
    if costs:
        zone["costs"] = costs
    zone["attributes"] = _attrs(_gpu_attributes(gpu, island, entry, inventory.nvlink_clique()))
    zone["resources"] = _resources(entry.resources if entry else ())
    return zone


def _top_attributes(
    inventory: NodeInventory, availability: Availability, policy: str, scope: str
) -> list[tuple[str, str]]:
    pairs = [(ATTR_POLICY, policy), (ATTR_SCOPE, scope)]
    if availability.fingerprint:
        pairs += [
            (ATTR_FINGERPRINT, availability.fingerprint),
            (ATTR_FINGERPRINT_METHOD, availability.fingerprint_method),
        ]
    clique = inventory.nvlink_clique()
    if clique is not None:
        pairs.append((ATTR_CLIQUE, clique))
    return [
        *pairs,
        (ATTR_SCHEMA, SCHEMA_VERSION),
        (ATTR_DRIVER, inventory.driver_version),
        (ATTR_CUDA, str(inventory.cuda_driver_version)),
        (ATTR_FABRIC, str(inventory.nvlink_fabric)),
        (ATTR_ISLANDS, str(len(inventory.links.nvlink_islands()))),
        (ATTR_SOURCE, availability.source),
        (ATTR_GPU_COUNT, str(len(inventory.gpus))),
        (ATTR_GPUS_FREE, str(whole_gpus_free(inventory, availability))),
        (ATTR_MIG_GPUS, str(sum(1 for g in inventory.gpus if not is_whole_gpu(g)))),
    ]


def is_whole_gpu(gpu: Gpu) -> bool:
    """Requested whole: not partitioned into MIG slices (those are requested by profile)."""
    return gpu.mig_mode is not MigMode.ENABLED


def whole_gpus_free(inventory: NodeInventory, availability: Availability) -> int:
    """Whole GPUs a pod can get now: not in MIG mode, healthy, nothing on them allocated."""
    return sum(
        1
        for gpu, counts in zip(inventory.gpus, availability.gpus, strict=True)
        if is_whole_gpu(gpu) and is_gpu_free(counts)
    )


def is_gpu_free(gpu: GpuAvailability) -> bool:
    """Healthy, advertised by the device plugin, and nothing on it is held by a pod (a GPU of
    the DRA driver is never free this way: a pod cannot ask for it as `nvidia.com/gpu`)."""
    plugin = [r for r in gpu.resources if not is_dra_resource(r.name)]
    return gpu.healthy and bool(plugin) and all(r.available == r.allocatable > 0 for r in plugin)


def encode(
    inventory: NodeInventory,
    availability: Availability,
    *,
    node_name: str,
    policy: str = "none",
    scope: str = "container",
    owner_uid: str | None = None,
) -> dict[str, Any]:
    """The node's NodeResourceTopology object; `owner_uid` adds the ownerReference to the Node."""
    numa_nodes = inventory.numa_nodes or tuple(NumaNode(id=n.numa_id) for n in availability.numa)
    numa_ids = tuple(n.id for n in numa_nodes)
    island_of = {
        i: pos for pos, island in enumerate(inventory.links.nvlink_islands()) for i in island
    }
    metadata: dict[str, Any] = {"name": node_name}
    if owner_uid is not None:
        metadata["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": owner_uid}
        ]
    zones = [_node_zone(n, availability, numa_ids) for n in numa_nodes]
    zones += [_gpu_zone(g, inventory, availability, island_of[g.index]) for g in inventory.gpus]
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata,
        "topologyPolicies": [legacy_topology_policy(policy, scope)],
        "zones": zones,
        "attributes": _attrs(_top_attributes(inventory, availability, policy, scope)),
    }
