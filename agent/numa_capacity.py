"""Per-NUMA cpu, memory and hugepages: capacity from sysfs (the inventory), allocatable after the
kubelet's reservations from its config file.

The kubelet does not say which NUMA node a reservation comes out of unless its CPU or memory
manager is static, so this module decides the way the static managers do: `reservedSystemCPUs` are
removed from their own NUMA nodes; otherwise the reserved CPUs (`kubeReserved.cpu +
systemReserved.cpu`, whole CPUs under the static CPU manager) come out of the lowest NUMA nodes
first. `reservedMemory` (memory manager) gives memory and hugepages per NUMA node; otherwise
`kubeReserved + systemReserved + evictionHard[memory.available]` come out of the lowest NUMA nodes
first. Pre-allocated hugepages are never allocatable as ordinary memory (the kubelet subtracts
them from allocatable memory).

Units: cpu in milli-CPUs, memory and hugepages in bytes.

`KubeletConfig.from_file(path)` reads; `KubeletConfig.from_data(mapping)` parses (tests use it).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.docread import read_yaml
from agent.errors import ConfigError
from agent.model import NumaNode, parse_cpulist
from agent.quantity import MIB, to_int, to_milli

log = logging.getLogger(__name__)

CPU = "cpu"
MEMORY = "memory"
HUGEPAGES_2MI = "hugepages-2Mi"
HUGEPAGES_1GI = "hugepages-1Gi"
NATIVE_RESOURCES = (CPU, MEMORY, HUGEPAGES_2MI, HUGEPAGES_1GI)
HUGEPAGE_BYTES: Mapping[str, int] = {"2Mi": 2 * MIB, "1Gi": 1024 * MIB}
DEFAULT_EVICTION_MEMORY = 100 * MIB  # the kubelet's evictionHard memory.available default

POLICIES = ("none", "best-effort", "restricted", "single-numa-node")
SCOPES = ("container", "pod")


@dataclass(frozen=True, slots=True, kw_only=True)
class KubeletConfig:
    """What the publisher needs from the kubelet's KubeletConfiguration file."""

    topology_manager_policy: str = "none"
    topology_manager_scope: str = "container"
    cpu_manager_policy: str = "none"
    reserved_cpus: tuple[int, ...] = ()
    reserved_cpu_milli: int = 0
    reserved_memory: int = 0
    eviction_memory: str = ""  # quantity or percentage; "" = the kubelet default (100Mi)
    reserved_per_numa: Mapping[int, Mapping[str, int]] = field(default_factory=dict)

    @classmethod
    def from_data(
        cls, data: Mapping[str, Any], *, policy: str = "none", scope: str = "container"
    ) -> KubeletConfig:
        """Parse a KubeletConfiguration mapping; `policy`/`scope` apply where the file has none."""
        try:
            return cls._parse(data, policy, scope)
        except (ValueError, TypeError, AttributeError) as exc:
            raise ConfigError(f"kubelet config: {exc}") from exc

    @classmethod
    def _parse(cls, data: Mapping[str, Any], policy: str, scope: str) -> KubeletConfig:
        reserved = [data.get("kubeReserved") or {}, data.get("systemReserved") or {}]
        eviction = data.get("evictionHard")
        return cls(
            topology_manager_policy=str(data.get("topologyManagerPolicy") or policy),
            topology_manager_scope=str(data.get("topologyManagerScope") or scope),
            cpu_manager_policy=str(data.get("cpuManagerPolicy") or "none"),
            reserved_cpus=parse_cpulist(str(data.get("reservedSystemCPUs") or "")),
            reserved_cpu_milli=sum(to_milli(r.get(CPU, 0)) for r in reserved),
            reserved_memory=sum(to_int(r.get(MEMORY, 0)) for r in reserved),
            eviction_memory="" if eviction is None else str(eviction.get("memory.available", "0")),
            reserved_per_numa=_reserved_memory(data.get("reservedMemory") or []),
        )

    @classmethod
    def from_file(
        cls, path: Path, *, policy: str = "none", scope: str = "container"
    ) -> KubeletConfig:
        """Read the kubelet config file; an absent or unreadable file gives the fallbacks."""
        try:
            data = read_yaml(path, what="the kubelet config") or {}
        except ValueError as exc:  # one line: unreadable, or `file:line:column` of a YAML error
            log.warning("kubelet config not used: %s; using policy=%s scope=%s", exc, policy, scope)
            return cls(topology_manager_policy=policy, topology_manager_scope=scope)
        if not isinstance(data, Mapping):
            raise ConfigError(
                f"kubelet config {path}: expected a mapping, got {type(data).__name__}"
            )
        return cls.from_data(data, policy=policy, scope=scope)

    def eviction_bytes(self, total_memory: int) -> int:
        text = self.eviction_memory
        if not text:
            return DEFAULT_EVICTION_MEMORY
        if text.endswith("%"):
            return math.ceil(total_memory * float(text[:-1]) / 100)
        return to_int(text)


def _reserved_memory(entries: Sequence[Mapping[str, Any]]) -> dict[int, dict[str, int]]:
    out: dict[int, dict[str, int]] = {}
    for pos, entry in enumerate(entries):
        if "numaNode" not in entry:
            raise ValueError(f"reservedMemory[{pos}].numaNode is required")
        limits = entry.get("limits") or {}
        out[int(entry["numaNode"])] = {str(k): to_int(v) for k, v in limits.items()}
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class NumaCapacity:
    """Capacity and allocatable of one NUMA node's native resources."""

    numa_id: int
    capacity: Mapping[str, int]
    allocatable: Mapping[str, int]


def _hugepage_bytes(node: NumaNode) -> dict[str, int]:
    pages = dict(node.hugepages)
    return {f"hugepages-{size}": pages.get(size, 0) * b for size, b in HUGEPAGE_BYTES.items()}


def numa_capacity(nodes: Sequence[NumaNode], config: KubeletConfig) -> tuple[NumaCapacity, ...]:
    """Per-NUMA capacity and allocatable; no NUMA information gives one empty node 0."""
    ordered = sorted(nodes, key=lambda n: n.id) or [NumaNode(id=0)]
    capacity = {
        n.id: {CPU: 1000 * len(n.cpus), MEMORY: n.memory_mib * MIB, **_hugepage_bytes(n)}
        for n in ordered
    }
    alloc = {nid: dict(cap) for nid, cap in capacity.items()}
    for nid, hp in ((n.id, _hugepage_bytes(n)) for n in ordered):
        alloc[nid][MEMORY] -= sum(hp.values())
    _reserve_cpus(ordered, config, alloc)
    _reserve_memory(config, capacity, alloc)
    return tuple(
        NumaCapacity(
            numa_id=nid,
            capacity=capacity[nid],
            allocatable={k: max(0, v) for k, v in alloc[nid].items()},
        )
        for nid in capacity
    )


def _reserve_cpus(
    nodes: Sequence[NumaNode], config: KubeletConfig, alloc: dict[int, dict[str, int]]
) -> None:
    if config.reserved_cpus:
        reserved = set(config.reserved_cpus)
        for node in nodes:
            alloc[node.id][CPU] -= 1000 * len(reserved.intersection(node.cpus))
        return
    milli = config.reserved_cpu_milli
    if config.cpu_manager_policy == "static":
        milli = 1000 * math.ceil(milli / 1000)
    _debit_lowest_first(alloc, CPU, milli)


def _reserve_memory(
    config: KubeletConfig,
    capacity: Mapping[int, Mapping[str, int]],
    alloc: dict[int, dict[str, int]],
) -> None:
    if config.reserved_per_numa:
        for nid, limits in config.reserved_per_numa.items():
            if nid not in alloc:
                log.warning(
                    "kubelet reservedMemory names NUMA node %s, which this node does not have", nid
                )
                continue
            for name, amount in limits.items():
                if name in alloc[nid]:
                    alloc[nid][name] -= amount
        return
    total = sum(cap[MEMORY] for cap in capacity.values())
    _debit_lowest_first(alloc, MEMORY, config.reserved_memory + config.eviction_bytes(total))


def _debit_lowest_first(alloc: dict[int, dict[str, int]], name: str, amount: int) -> None:
    for nid in sorted(alloc):
        take = min(amount, max(0, alloc[nid][name]))
        alloc[nid][name] -= take
        amount -= take
    if amount > 0:
        log.warning("kubelet reserves %s more %s than the node has", amount, name)
