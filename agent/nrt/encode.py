"""NodeResourceTopology (topology.node.k8s.io/v1alpha2) codec: the node's GPUs, NUMA nodes and
what is free, both ways. Pure: dicts in and out, no Kubernetes client.

Object shape (DESIGN.md §5)::

    zones  node-<N>  type Node   costs = SLIT distances; cpu, memory, hugepages-*, nvidia.com/*
           gpu-<i>   type GPU    parent node-<N>; attributes uuid, pciBusId, product, ...;
                                 costs to every other GPU zone (GpuLink.nrt_cost); its resources
    attributes  topologyManagerPolicy/Scope, nodeTopologyPodsFingerprint(+Method),
                gputopo.io/{schema,driverVersion,cudaDriverVersion,nvlinkFabric,nvlinkIslands,
                allocationSource,gpuCount,gpusFree}

Quantities are written as strings (cpu as `"112"` or `"111500m"`, memory and hugepages in bytes).
`decode` reads them back losslessly into a `DecodedTopology` (an inventory, per-GPU and per-NUMA
counts, attributes) and raises `TopologyDecodeError` naming the node and field for anything else.
The decoder lives in `agent.nrt.decode`; both are re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.availability import Availability, GpuAvailability, ResourceCounts
from agent.fingerprint import ATTRIBUTE as FINGERPRINT_ATTRIBUTE
from agent.fingerprint import METHOD_ATTRIBUTE as FINGERPRINT_METHOD_ATTRIBUTE
from agent.model import Gpu, NodeInventory, NumaNode
from agent.numa_capacity import CPU
from agent.quantity import format_milli

GROUP = "topology.node.k8s.io"
VERSION = "v1alpha2"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "NodeResourceTopology"
PLURAL = "noderesourcetopologies"
SCHEMA_VERSION = "v1"

ZONE_NODE = "Node"
ZONE_GPU = "GPU"
NODE_PREFIX = "node-"
GPU_PREFIX = "gpu-"

ATTR_POLICY = "topologyManagerPolicy"
ATTR_SCOPE = "topologyManagerScope"
ATTR_FINGERPRINT = FINGERPRINT_ATTRIBUTE
ATTR_FINGERPRINT_METHOD = FINGERPRINT_METHOD_ATTRIBUTE
ATTR_SCHEMA = "gputopo.io/schema"
ATTR_DRIVER = "gputopo.io/driverVersion"
ATTR_CUDA = "gputopo.io/cudaDriverVersion"
ATTR_FABRIC = "gputopo.io/nvlinkFabric"
ATTR_ISLANDS = "gputopo.io/nvlinkIslands"
ATTR_SOURCE = "gputopo.io/allocationSource"
ATTR_GPU_COUNT = "gputopo.io/gpuCount"
ATTR_GPUS_FREE = "gputopo.io/gpusFree"

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"

_LEGACY_POLICY = {
    "single-numa-node": "SingleNUMANode",
    "restricted": "Restricted",
    "best-effort": "BestEffort",
}


def node_zone_name(numa_id: int) -> str:
    return f"{NODE_PREFIX}{numa_id}"


def gpu_zone_name(index: int) -> str:
    return f"{GPU_PREFIX}{index}"


def legacy_topology_policy(policy: str, scope: str) -> str:
    """The deprecated `topologyPolicies` value (`SingleNUMANodePodLevel`, `None`, ...)."""
    base = _LEGACY_POLICY.get(policy)
    if base is None:
        return "None"
    return base + ("PodLevel" if scope == "pod" else "ContainerLevel")


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
    zone["attributes"] = _attrs([("cpus", node.cpulist)])
    zone["resources"] = _resources(counts)
    return zone


def _gpu_attributes(gpu: Gpu, island: int, healthy: bool) -> list[tuple[str, str]]:
    pairs = [
        ("uuid", str(gpu.uuid)),
        ("pciBusId", gpu.pci_bus_id),
        ("product", gpu.product),
        ("memoryMiB", str(gpu.memory_mib)),
        ("computeCapability", gpu.compute_capability),
        ("minor", str(gpu.minor)),
        ("migMode", str(gpu.mig_mode)),
    ]
    if gpu.mig_devices:
        ordered = sorted(gpu.mig_devices, key=lambda m: (m.start, m.gi_id, m.ci_id))
        pairs.append(("migLayout", gpu.mig_layout))
        pairs.append(
            (
                "migDevices",
                ",".join(f"{m.uuid}:{m.gi_id}:{m.ci_id}:{m.memory_mib}" for m in ordered),
            )
        )
    pairs.append(("nvlinkIsland", str(island)))
    pairs.append(("health", HEALTHY if healthy else UNHEALTHY))
    return pairs


def _gpu_zone(
    gpu: Gpu, inventory: NodeInventory, availability: Availability, island: int
) -> dict[str, Any]:
    entry = next((g for g in availability.gpus if g.index == gpu.index), None)
    zone: dict[str, Any] = {"name": gpu_zone_name(gpu.index), "type": ZONE_GPU}
    if gpu.numa_node is not None:
        zone["parent"] = node_zone_name(gpu.numa_node)
    costs = [
        {
            "name": gpu_zone_name(other.index),
            "value": inventory.links.link(gpu.index, other.index).nrt_cost,
        }
        for other in inventory.gpus
        if other.index != gpu.index
    ]
    if costs:
        zone["costs"] = costs
    zone["attributes"] = _attrs(_gpu_attributes(gpu, island, entry is None or entry.healthy))
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
    return [
        *pairs,
        (ATTR_SCHEMA, SCHEMA_VERSION),
        (ATTR_DRIVER, inventory.driver_version),
        (ATTR_CUDA, str(inventory.cuda_driver_version)),
        (ATTR_FABRIC, str(inventory.nvlink_fabric)),
        (ATTR_ISLANDS, str(len(inventory.links.nvlink_islands()))),
        (ATTR_SOURCE, availability.source),
        (ATTR_GPU_COUNT, str(len(inventory.gpus))),
        (ATTR_GPUS_FREE, str(sum(1 for g in availability.gpus if is_gpu_free(g)))),
    ]


def is_gpu_free(gpu: GpuAvailability) -> bool:
    """Healthy, advertised, and nothing on it is held by a pod."""
    return (
        gpu.healthy
        and bool(gpu.resources)
        and all(r.available == r.allocatable > 0 for r in gpu.resources)
    )


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


@dataclass(frozen=True, slots=True, kw_only=True)
class DecodedTopology:
    """What a NodeResourceTopology written by gputopo says about its node."""

    node_name: str
    inventory: NodeInventory
    availability: Availability
    attributes: Mapping[str, str]

    @property
    def topology_manager_policy(self) -> str:
        return self.attributes.get(ATTR_POLICY, "none")

    @property
    def topology_manager_scope(self) -> str:
        return self.attributes.get(ATTR_SCOPE, "container")

    @property
    def fingerprint(self) -> str:
        return self.availability.fingerprint

    def gpu_counts(self, index: int) -> Mapping[str, ResourceCounts]:
        """The resources of GPU zone `gpu-<index>` by name."""
        return {r.name: r for r in self.availability.gpus[index].resources}

    def numa_counts(self, numa_id: int) -> Mapping[str, ResourceCounts]:
        """The resources of zone `node-<numa_id>` by name (empty for an unknown NUMA node)."""
        found = next((n for n in self.availability.numa if n.numa_id == numa_id), None)
        return {r.name: r for r in found.resources} if found else {}


def decode(obj: object) -> DecodedTopology:
    """Read an NRT object written by `encode`; TopologyDecodeError names the node and field."""
    from agent.nrt.decode import decode_object

    return decode_object(obj)
