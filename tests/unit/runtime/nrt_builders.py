"""NodeResourceTopology objects for scheduler tests, made by the real encoder (agent.nrt)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent.availability import PodResourcesSnapshot, compute_availability
from agent.model import NodeInventory
from agent.nrt import encode
from agent.numa_capacity import KubeletConfig, numa_capacity
from tests.unit.topology.builders import allocatable_of, gpu_pod


def make_nrt(
    node: str,
    inventory: NodeInventory,
    pods: Mapping[tuple[str, str], Sequence[str]] | None = None,
    *,
    policy: str = "none",
    podresources: bool = True,
) -> dict[str, Any]:
    """The NRT the agent would publish: `pods` maps (namespace, name) to the device IDs it holds."""
    snapshot: PodResourcesSnapshot | None = None
    if podresources:
        base = allocatable_of(inventory)
        grants = tuple(gpu_pod(ns, name, *ids) for (ns, name), ids in (pods or {}).items())
        snapshot = PodResourcesSnapshot(devices=base.devices, cpu_ids=base.cpu_ids, pods=grants)
    capacity = numa_capacity(inventory.numa_nodes, KubeletConfig(topology_manager_policy=policy))
    availability = compute_availability(inventory, capacity, snapshot)
    return encode(inventory, availability, node_name=node, policy=policy)
