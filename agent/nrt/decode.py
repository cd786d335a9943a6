"""Decoder half of the NRT codec: a NodeResourceTopology object -> `DecodedTopology`.

Reads an object `agent.nrt.encode` wrote back into an inventory, per-GPU and per-NUMA counts and the
attributes. A GPU's `numa_node` is its zone's parent: the node it is published under
(`NodeInventory.gpu_numa_zone`), which for a GPU whose sysfs said -1 is the agent's choice.
Anything else (another producer's object, a hand-edited one, a different schema) raises
`TopologyDecodeError` with the node name and the field path, e.g.
`NodeResourceTopology n1: zones[9] (gpu-1).costs: no cost to gpu-3`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.availability import Availability, GpuAvailability, NumaAvailability, ResourceCounts
from agent.errors import TopologyDecodeError
from agent.gpu_load import parse_load
from agent.model import (
    HEALTHY,
    UNHEALTHY,
    Gpu,
    GpuLink,
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
from agent.nrt.fields import FieldReader
from agent.nrt.wire import (
    API_VERSION,
    ATTR_CLIQUE,
    ATTR_CUDA,
    ATTR_DRIVER,
    ATTR_FABRIC,
    ATTR_FINGERPRINT,
    ATTR_FINGERPRINT_METHOD,
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
    GPU_ATTR_PCI_BUS_ID,
    GPU_ATTR_PRODUCT,
    GPU_ATTR_SHARE_PODS,
    GPU_ATTR_SHARES,
    GPU_ATTR_SHARING,
    GPU_ATTR_UUID,
    GPU_PREFIX,
    KIND,
    NODE_ATTR_CPUS,
    NODE_PREFIX,
    SCHEMA_VERSION,
    ZONE_GPU,
    ZONE_NODE,
    gpu_zone_name,
    link_of_cost,
    node_zone_name,
)
from agent.numa_capacity import HUGEPAGE_BYTES, MEMORY
from agent.plural import counted
from agent.quantity import MIB
from agent.share_pods import PodShare, ShareCodecError, decode_share_pods
from agent.shares import Sharing


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
    def nvlink_clique(self) -> str | None:
        """The node's multi-node NVLink clique (`nvidia.com/gpu.clique`), None when it has none."""
        return self.attributes.get(ATTR_CLIQUE)

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


_LAYOUT_RE = re.compile(
    r"^(?P<profile>[0-9]+g\.[0-9]+gb(?:\+[a-z]+)?)@(?P<start>[0-9]+):(?P<size>[0-9]+)$"
)
_REQUIRED_GPU_ATTRS = (
    GPU_ATTR_UUID,
    GPU_ATTR_PCI_BUS_ID,
    GPU_ATTR_PRODUCT,
    GPU_ATTR_MEMORY_MIB,
    GPU_ATTR_COMPUTE_CAPABILITY,
    GPU_ATTR_MIG_MODE,
    GPU_ATTR_HEALTH,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Zone:
    pos: int
    raw: Mapping[str, Any]
    name: str

    @property
    def field(self) -> str:
        return f"zones[{self.pos}] ({self.name})"


def decode(obj: object) -> DecodedTopology:
    """Read an NRT object written by `encode`; TopologyDecodeError names the node and field."""
    node = _node_name(obj)
    r = FieldReader(node)
    doc = r.mapping(obj, "(object)")
    if doc.get("kind") != KIND:
        r.fail("kind", f"expected {KIND}, got {doc.get('kind')!r}")
    if doc.get("apiVersion") != API_VERSION:
        r.fail("apiVersion", f"expected {API_VERSION}, got {doc.get('apiVersion')!r}")
    attrs = r.attributes(doc.get("attributes"), "attributes")
    if attrs.get(ATTR_SCHEMA) != SCHEMA_VERSION:
        found = attrs.get(ATTR_SCHEMA)
        reason = "not written by gputopo" if found is None else f"unsupported schema {found!r}"
        r.fail(f"attributes.{ATTR_SCHEMA}", f"{reason} (expected {SCHEMA_VERSION!r})")
    node_zones, gpu_zones = _split_zones(r, doc.get("zones"))
    numa_nodes, numa_counts = _decode_numa(r, node_zones)
    gpus, gpu_counts = _decode_gpus(r, gpu_zones, {n.id for n in numa_nodes})
    inventory = _inventory(r, attrs, gpus, _decode_links(r, gpu_zones), numa_nodes)
    availability = Availability(
        source=attrs.get(ATTR_SOURCE, ""),
        gpus=gpu_counts,
        numa=numa_counts,
        fingerprint=attrs.get(ATTR_FINGERPRINT, ""),
        fingerprint_method=attrs.get(ATTR_FINGERPRINT_METHOD, ""),
    )
    return DecodedTopology(
        node_name=node, inventory=inventory, availability=availability, attributes=attrs
    )


def _node_name(obj: object) -> str:
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if not isinstance(name, str) or not name:
        raise TopologyDecodeError("", "metadata.name", "missing")
    return name


def _split_zones(r: FieldReader, value: object) -> tuple[list[_Zone], list[_Zone]]:
    """Node and GPU zones, each sorted by number; other zone types are ignored."""
    nodes: dict[int, _Zone] = {}
    gpus: dict[int, _Zone] = {}
    for pos, raw in enumerate(r.items(value, "zones")):
        entry = r.mapping(raw, f"zones[{pos}]")
        name = r.text(entry.get("name"), f"zones[{pos}].name")
        kind = r.text(entry.get("type"), f"zones[{pos}].type")
        zone = _Zone(pos=pos, raw=entry, name=name)
        target, prefix = {ZONE_NODE: (nodes, NODE_PREFIX), ZONE_GPU: (gpus, GPU_PREFIX)}.get(
            kind, (None, "")
        )
        if target is None:
            continue
        number = r.suffix_id(name, prefix, f"zones[{pos}].name")
        if number in target:
            r.fail(f"zones[{pos}].name", f"duplicate zone {name}")
        target[number] = zone
    if sorted(gpus) != list(range(len(gpus))):
        r.fail(
            "zones",
            f"GPU zones must be {GPU_PREFIX}0..{GPU_PREFIX}{len(gpus) - 1}, found {sorted(gpus)}",
        )
    return [nodes[k] for k in sorted(nodes)], [gpus[k] for k in sorted(gpus)]


def _decode_numa(
    r: FieldReader, zones: Sequence[_Zone]
) -> tuple[tuple[NumaNode, ...], tuple[NumaAvailability, ...]]:
    ids = [int(z.name[len(NODE_PREFIX) :]) for z in zones]
    nodes, counts = [], []
    for numa_id, zone in zip(ids, zones, strict=True):
        attrs = r.attributes(zone.raw.get("attributes"), f"{zone.field}.attributes")
        try:
            cpus = parse_cpulist(attrs.get(NODE_ATTR_CPUS, ""))
        except ValueError as exc:
            r.fail(f"{zone.field}.attributes.{NODE_ATTR_CPUS}", str(exc))
        resources = r.resources(zone.raw.get("resources"), f"{zone.field}.resources")
        by_name = {res.name: res.capacity for res in resources}
        hugepages = tuple(
            (size, by_name.get(f"hugepages-{size}", 0) // b)
            for size, b in HUGEPAGE_BYTES.items()
            if by_name.get(f"hugepages-{size}", 0)
        )
        nodes.append(
            NumaNode(
                id=numa_id,
                cpus=cpus,
                memory_mib=by_name.get(MEMORY, 0) // MIB,
                hugepages=hugepages,
                distances=_distances(r, zone, ids),
            )
        )
        counts.append(NumaAvailability(numa_id=numa_id, resources=resources))
    return tuple(nodes), tuple(counts)


def _distances(r: FieldReader, zone: _Zone, ids: Sequence[int]) -> tuple[int, ...]:
    costs = _costs(r, zone)
    if not costs:
        return ()
    missing = [i for i in ids if node_zone_name(i) not in costs]
    if missing:
        r.fail(f"{zone.field}.costs", f"no cost to {node_zone_name(missing[0])}")
    return tuple(costs[node_zone_name(i)] for i in ids)


def _costs(r: FieldReader, zone: _Zone) -> dict[str, int]:
    out: dict[str, int] = {}
    field = f"{zone.field}.costs"
    for pos, raw in enumerate(r.items(zone.raw.get("costs") or [], field)):
        entry = r.mapping(raw, f"{field}[{pos}]")
        name = r.text(entry.get("name"), f"{field}[{pos}].name")
        out[name] = r.integer(entry.get("value"), f"{field}[{pos}].value")
    return out


def _decode_gpus(
    r: FieldReader, zones: Sequence[_Zone], numa_ids: set[int]
) -> tuple[tuple[Gpu, ...], tuple[GpuAvailability, ...]]:
    gpus, counts = [], []
    for index, zone in enumerate(zones):
        field = f"{zone.field}.attributes"
        attrs = r.attributes(zone.raw.get("attributes"), field)
        missing = [a for a in _REQUIRED_GPU_ATTRS if a not in attrs]
        if missing:
            r.fail(f"{field}.{missing[0]}", "is required")
        health = attrs[GPU_ATTR_HEALTH]
        if health not in {HEALTHY, UNHEALTHY}:
            r.fail(
                f"{field}.{GPU_ATTR_HEALTH}", f"expected {HEALTHY} or {UNHEALTHY}, got {health!r}"
            )
        try:
            mig_mode = MigMode(attrs[GPU_ATTR_MIG_MODE])
        except ValueError:
            r.fail(f"{field}.{GPU_ATTR_MIG_MODE}", f"unknown MIG mode {attrs[GPU_ATTR_MIG_MODE]!r}")
        gpus.append(
            Gpu(
                index=index,
                uuid=GpuUuid(attrs[GPU_ATTR_UUID]),
                product=attrs[GPU_ATTR_PRODUCT],
                memory_mib=r.integer(attrs[GPU_ATTR_MEMORY_MIB], f"{field}.{GPU_ATTR_MEMORY_MIB}"),
                pci_bus_id=attrs[GPU_ATTR_PCI_BUS_ID],
                minor=r.integer(attrs.get(GPU_ATTR_MINOR, str(index)), f"{field}.{GPU_ATTR_MINOR}"),
                numa_node=_parent(r, zone, numa_ids),
                compute_capability=attrs[GPU_ATTR_COMPUTE_CAPABILITY],
                mig_mode=mig_mode,
                mig_devices=_mig_devices(r, attrs, field),
                fabric=r.fabric(attrs.get(GPU_ATTR_CLIQUE), f"{field}.{GPU_ATTR_CLIQUE}"),
            )
        )
        resources = r.resources(zone.raw.get("resources"), f"{zone.field}.resources")
        sharing, shares = _sharing(r, attrs, field)
        counts.append(
            GpuAvailability(
                index=index,
                healthy=health == HEALTHY,
                resources=resources,
                sharing=sharing,
                shares=shares,
                share_pods=_share_pods(r, attrs, field),
                load=parse_load(attrs),
            )
        )
    return tuple(gpus), tuple(counts)


def _sharing(r: FieldReader, attrs: Mapping[str, str], field: str) -> tuple[Sharing, int]:
    """A GPU zone's `sharing` and `shares` (absent: not shared, as older agents wrote it)."""
    raw = attrs.get(GPU_ATTR_SHARING, str(Sharing.NONE))
    try:
        sharing = Sharing(raw)
    except ValueError:
        r.fail(f"{field}.{GPU_ATTR_SHARING}", f"unknown sharing {raw!r}")
    if sharing is Sharing.NONE:
        return sharing, 0
    if GPU_ATTR_SHARES not in attrs:
        r.fail(f"{field}.{GPU_ATTR_SHARES}", "is required on a shared GPU")
    shares = r.integer(attrs[GPU_ATTR_SHARES], f"{field}.{GPU_ATTR_SHARES}")
    if shares < 1:
        r.fail(f"{field}.{GPU_ATTR_SHARES}", f"must be at least 1, got {shares}")
    return sharing, shares


def _share_pods(r: FieldReader, attrs: Mapping[str, str], field: str) -> tuple[PodShare, ...]:
    try:
        return decode_share_pods(attrs.get(GPU_ATTR_SHARE_PODS, ""))
    except ShareCodecError as exc:
        r.fail(f"{field}.{GPU_ATTR_SHARE_PODS}", str(exc))


def _parent(r: FieldReader, zone: _Zone, numa_ids: set[int]) -> int | None:
    parent = zone.raw.get("parent")
    if parent is None:
        return None
    name = r.text(parent, f"{zone.field}.parent")
    numa_id = r.suffix_id(name, NODE_PREFIX, f"{zone.field}.parent")
    if numa_id not in numa_ids:
        r.fail(f"{zone.field}.parent", f"names {name}, which is not a Node zone")
    return numa_id


def _mig_devices(r: FieldReader, attrs: Mapping[str, str], field: str) -> tuple[MigDevice, ...]:
    layout = [p for p in attrs.get(GPU_ATTR_MIG_LAYOUT, "").split(",") if p]
    devices = [p for p in attrs.get(GPU_ATTR_MIG_DEVICES, "").split(",") if p]
    if len(layout) != len(devices):
        r.fail(
            f"{field}.{GPU_ATTR_MIG_DEVICES}",
            f"lists {counted(len(devices), 'device')} for a layout of {len(layout)}",
        )
    out = []
    for pos, (slot, device) in enumerate(zip(layout, devices, strict=True)):
        match = _LAYOUT_RE.match(slot)
        if match is None:
            r.fail(
                f"{field}.{GPU_ATTR_MIG_LAYOUT}",
                f"entry {pos} {slot!r} is not <profile>@<start>:<size>",
            )
        parts = device.split(":")
        if len(parts) != 4 or not all(p.isdigit() for p in parts[1:]):
            r.fail(
                f"{field}.{GPU_ATTR_MIG_DEVICES}",
                f"entry {pos} {device!r} is not <uuid>:<gi>:<ci>:<memoryMiB>",
            )
        out.append(
            MigDevice(
                uuid=MigUuid(parts[0]),
                profile=match["profile"],
                gi_id=int(parts[1]),
                ci_id=int(parts[2]),
                memory_mib=int(parts[3]),
                start=int(match["start"]),
                size=int(match["size"]),
            )
        )
    return tuple(out)


def _decode_links(r: FieldReader, zones: Sequence[_Zone]) -> LinkMatrix:
    rows: list[tuple[GpuLink | None, ...]] = []
    for i, zone in enumerate(zones):
        costs = _costs(r, zone)
        row: list[GpuLink | None] = []
        for j in range(len(zones)):
            if i == j:
                row.append(None)
                continue
            other = gpu_zone_name(j)
            if other not in costs:
                r.fail(f"{zone.field}.costs", f"no cost to {other}")
            try:
                row.append(link_of_cost(costs[other]))
            except ValueError as exc:
                r.fail(f"{zone.field}.costs", f"to {other}: {exc}")
        rows.append(tuple(row))
    try:
        return LinkMatrix(tuple(rows))
    except ValueError as exc:
        r.fail("zones[*].costs", str(exc))


def _inventory(
    r: FieldReader,
    attrs: Mapping[str, str],
    gpus: tuple[Gpu, ...],
    links: LinkMatrix,
    numa: tuple[NumaNode, ...],
) -> NodeInventory:
    try:
        fabric = NvlinkFabric(attrs.get(ATTR_FABRIC, NvlinkFabric.NONE))
    except ValueError:
        r.fail(f"attributes.{ATTR_FABRIC}", f"unknown NVLink fabric {attrs[ATTR_FABRIC]!r}")
    try:
        return NodeInventory(
            gpus=gpus,
            links=links,
            numa_nodes=numa,
            driver_version=attrs.get(ATTR_DRIVER, ""),
            cuda_driver_version=r.integer(attrs.get(ATTR_CUDA, "0"), f"attributes.{ATTR_CUDA}"),
            nvlink_fabric=fabric,
        )
    except ValueError as exc:
        r.fail("zones", str(exc))
