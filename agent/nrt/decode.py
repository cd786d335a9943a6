"""Decoder half of the NRT codec (`agent.nrt.encode.decode` calls `decode_object`).

Reads an object `agent.nrt.encode` wrote back into an inventory, per-GPU and per-NUMA counts and the
attributes. Anything else (another producer's object, a hand-edited one, a different schema) raises
`TopologyDecodeError` with the node name and the field path, e.g.
`NodeResourceTopology n1: zones[9] (gpu-1).costs: no cost to gpu-3`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from agent.availability import Availability, GpuAvailability, NumaAvailability, ResourceCounts
from agent.errors import TopologyDecodeError
from agent.model import (
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
from agent.nrt.encode import (
    API_VERSION,
    ATTR_CUDA,
    ATTR_DRIVER,
    ATTR_FABRIC,
    ATTR_FINGERPRINT,
    ATTR_FINGERPRINT_METHOD,
    ATTR_SCHEMA,
    ATTR_SOURCE,
    GPU_PREFIX,
    HEALTHY,
    KIND,
    NODE_PREFIX,
    SCHEMA_VERSION,
    UNHEALTHY,
    ZONE_GPU,
    ZONE_NODE,
    DecodedTopology,
)
from agent.numa_capacity import HUGEPAGE_BYTES, MEMORY
from agent.quantity import MIB, resource_units

_LAYOUT_RE = re.compile(
    r"^(?P<profile>[0-9]+g\.[0-9]+gb(?:\+[a-z]+)?)@(?P<start>[0-9]+):(?P<size>[0-9]+)$"
)
_GPU_ATTRS = ("uuid", "pciBusId", "product", "memoryMiB", "computeCapability", "migMode", "health")


@dataclass(frozen=True, slots=True)
class _Reader:
    """Typed access to the raw object; every failure names the node and the field."""

    node: str

    def fail(self, field: str, reason: str) -> NoReturn:
        raise TopologyDecodeError(self.node, field, reason)

    def mapping(self, value: object, field: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            self.fail(field, f"expected an object, got {type(value).__name__}")
        return value

    def items(self, value: object, field: str) -> Sequence[Any]:
        if not isinstance(value, list):
            self.fail(field, f"expected a list, got {type(value).__name__}")
        return value

    def text(self, value: object, field: str) -> str:
        if not isinstance(value, str):
            self.fail(field, f"expected a string, got {type(value).__name__}")
        return value

    def integer(self, value: object, field: str, *, minimum: int = 0) -> int:
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self.fail(field, f"expected an integer >= {minimum}, got {value!r}")
        return value

    def suffix_id(self, name: str, prefix: str, field: str) -> int:
        tail = name[len(prefix) :]
        if not name.startswith(prefix) or not tail.isdigit():
            self.fail(field, f"zone name {name!r} is not {prefix}<number>")
        return int(tail)

    def attributes(self, value: object, field: str) -> dict[str, str]:
        """name -> value; the first entry wins for a duplicated name (as the Go helper does)."""
        out: dict[str, str] = {}
        for pos, raw in enumerate(self.items(value if value is not None else [], field)):
            entry = self.mapping(raw, f"{field}[{pos}]")
            name = self.text(entry.get("name"), f"{field}[{pos}].name")
            out.setdefault(name, self.text(entry.get("value"), f"{field}[{pos}].value"))
        return out

    def resources(self, value: object, field: str) -> tuple[ResourceCounts, ...]:
        out = []
        for pos, raw in enumerate(self.items(value if value is not None else [], field)):
            entry = self.mapping(raw, f"{field}[{pos}]")
            name = self.text(entry.get("name"), f"{field}[{pos}].name")
            amounts = [self.quantity(name, entry.get(k), f"{field}[{pos}].{k}") for k in _AMOUNTS]
            out.append(
                ResourceCounts(
                    name=name, capacity=amounts[0], allocatable=amounts[1], available=amounts[2]
                )
            )
        return tuple(out)

    def quantity(self, name: str, value: object, field: str) -> int:
        if value is None:
            self.fail(field, "is required")
        try:
            amount = resource_units(name, value)
        except ValueError as exc:
            self.fail(field, str(exc))
        if amount < 0:
            self.fail(field, f"negative quantity {value!r}")
        return amount


_AMOUNTS = ("capacity", "allocatable", "available")


@dataclass(frozen=True, slots=True, kw_only=True)
class _Zone:
    pos: int
    raw: Mapping[str, Any]
    name: str

    @property
    def field(self) -> str:
        return f"zones[{self.pos}] ({self.name})"


def decode_object(obj: object) -> DecodedTopology:
    """See `agent.nrt.encode.decode`."""
    node = _node_name(obj)
    r = _Reader(node)
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


def _split_zones(r: _Reader, value: object) -> tuple[list[_Zone], list[_Zone]]:
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
    r: _Reader, zones: Sequence[_Zone]
) -> tuple[tuple[NumaNode, ...], tuple[NumaAvailability, ...]]:
    ids = [int(z.name[len(NODE_PREFIX) :]) for z in zones]
    nodes, counts = [], []
    for numa_id, zone in zip(ids, zones, strict=True):
        attrs = r.attributes(zone.raw.get("attributes"), f"{zone.field}.attributes")
        try:
            cpus = parse_cpulist(attrs.get("cpus", ""))
        except ValueError as exc:
            r.fail(f"{zone.field}.attributes.cpus", str(exc))
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


def _distances(r: _Reader, zone: _Zone, ids: Sequence[int]) -> tuple[int, ...]:
    costs = _costs(r, zone)
    if not costs:
        return ()
    missing = [i for i in ids if f"{NODE_PREFIX}{i}" not in costs]
    if missing:
        r.fail(f"{zone.field}.costs", f"no cost to {NODE_PREFIX}{missing[0]}")
    return tuple(costs[f"{NODE_PREFIX}{i}"] for i in ids)


def _costs(r: _Reader, zone: _Zone) -> dict[str, int]:
    out: dict[str, int] = {}
    field = f"{zone.field}.costs"
    for pos, raw in enumerate(r.items(zone.raw.get("costs") or [], field)):
        entry = r.mapping(raw, f"{field}[{pos}]")
        name = r.text(entry.get("name"), f"{field}[{pos}].name")
        out[name] = r.integer(entry.get("value"), f"{field}[{pos}].value")
    return out


def _decode_gpus(
    r: _Reader, zones: Sequence[_Zone], numa_ids: set[int]
) -> tuple[tuple[Gpu, ...], tuple[GpuAvailability, ...]]:
    gpus, counts = [], []
    for index, zone in enumerate(zones):
        field = f"{zone.field}.attributes"
        attrs = r.attributes(zone.raw.get("attributes"), field)
        missing = [a for a in _GPU_ATTRS if a not in attrs]
        if missing:
            r.fail(f"{field}.{missing[0]}", "is required")
        if attrs["health"] not in {HEALTHY, UNHEALTHY}:
            r.fail(f"{field}.health", f"expected {HEALTHY} or {UNHEALTHY}, got {attrs['health']!r}")
        try:
            mig_mode = MigMode(attrs["migMode"])
        except ValueError:
            r.fail(f"{field}.migMode", f"unknown MIG mode {attrs['migMode']!r}")
        gpus.append(
            Gpu(
                index=index,
                uuid=GpuUuid(attrs["uuid"]),
                product=attrs["product"],
                memory_mib=r.integer(attrs["memoryMiB"], f"{field}.memoryMiB"),
                pci_bus_id=attrs["pciBusId"],
                minor=r.integer(attrs.get("minor", str(index)), f"{field}.minor"),
                numa_node=_parent(r, zone, numa_ids),
                compute_capability=attrs["computeCapability"],
                mig_mode=mig_mode,
                mig_devices=_mig_devices(r, attrs, field),
            )
        )
        resources = r.resources(zone.raw.get("resources"), f"{zone.field}.resources")
        counts.append(
            GpuAvailability(index=index, healthy=attrs["health"] == HEALTHY, resources=resources)
        )
    return tuple(gpus), tuple(counts)


def _parent(r: _Reader, zone: _Zone, numa_ids: set[int]) -> int | None:
    parent = zone.raw.get("parent")
    if parent is None:
        return None
    name = r.text(parent, f"{zone.field}.parent")
    numa_id = r.suffix_id(name, NODE_PREFIX, f"{zone.field}.parent")
    if numa_id not in numa_ids:
        r.fail(f"{zone.field}.parent", f"names {name}, which is not a Node zone")
    return numa_id


def _mig_devices(r: _Reader, attrs: Mapping[str, str], field: str) -> tuple[MigDevice, ...]:
    layout = [p for p in attrs.get("migLayout", "").split(",") if p]
    devices = [p for p in attrs.get("migDevices", "").split(",") if p]
    if len(layout) != len(devices):
        r.fail(f"{field}.migDevices", f"lists {len(devices)} devices for a layout of {len(layout)}")
    out = []
    for pos, (slot, device) in enumerate(zip(layout, devices, strict=True)):
        match = _LAYOUT_RE.match(slot)
        if match is None:
            r.fail(f"{field}.migLayout", f"entry {pos} {slot!r} is not <profile>@<start>:<size>")
        parts = device.split(":")
        if len(parts) != 4 or not all(p.isdigit() for p in parts[1:]):
            r.fail(
                f"{field}.migDevices", f"entry {pos} {device!r} is not <uuid>:<gi>:<ci>:<memoryMiB>"
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


def _decode_links(r: _Reader, zones: Sequence[_Zone]) -> LinkMatrix:
    rows: list[tuple[GpuLink | None, ...]] = []
    for i, zone in enumerate(zones):
        costs = _costs(r, zone)
        row: list[GpuLink | None] = []
        for j in range(len(zones)):
            if i == j:
                row.append(None)
                continue
            if f"{GPU_PREFIX}{j}" not in costs:
                r.fail(f"{zone.field}.costs", f"no cost to {GPU_PREFIX}{j}")
            try:
                row.append(GpuLink.from_nrt_cost(costs[f"{GPU_PREFIX}{j}"]))
            except ValueError as exc:
                r.fail(f"{zone.field}.costs", f"to {GPU_PREFIX}{j}: {exc}")
        rows.append(tuple(row))
    try:
        return LinkMatrix(tuple(rows))
    except ValueError as exc:
        r.fail("zones[*].costs", str(exc))


def _inventory(
    r: _Reader,
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
