"""ResourceSlices: parsed into devices, and gathered into the devices a node can use.

A pool's devices are those of its newest generation's slices; a pool with fewer slices of that
generation than `resourceSliceCount` is incomplete (being republished): its devices still serve
`ExactCount` requests, and an `All` request that could use it fails, as in Kubernetes.
Attribute and capacity names are qualified with the slice's driver when they have no domain.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import cast

from scheduler.placement import Effect, Taint
from scheduler.placement.request import NodeSelectorRequirement, NodeSelectorTerm

from .model import (
    Allocation,
    AttrValue,
    Capacity,
    Device,
    DeviceId,
    RequestPolicy,
    ResourceSlice,
)
from .semver import parse_semver
from .wire import Fields, fields_of

__all__ = [
    "NodeDevices",
    "allocation_reach",
    "node_devices",
    "parse_slice",
    "qualified",
    "reaches",
    "serves",
]


def qualified(name: str, driver: str) -> str:
    """`name` with the driver's domain when it has none."""
    return name if "/" in name else f"{driver}/{name}"


def parse_slice(obj: object) -> ResourceSlice:
    top = fields_of("ResourceSlice", obj)
    spec = top.sub("spec")
    driver = spec.text("driver")
    pool = spec.sub("pool", required=True)
    pool_name = pool.text("name")
    return ResourceSlice(
        name=top.sub("metadata").text("name"),
        driver=driver,
        pool=pool_name,
        generation=pool.integer("generation", 0),
        slice_count=pool.integer("resourceSliceCount", 1),
        node_name=spec.opt_str("nodeName"),
        all_nodes=spec.flag("allNodes"),
        node_selector=_slice_term(spec) if spec.has("nodeSelector") else None,
        devices=tuple(_device(d, driver, pool_name) for d in spec.items("devices")),
    )


def _slice_term(spec: Fields) -> NodeSelectorTerm:
    """A slice's `nodeSelector`: exactly one term, as the API server admits."""
    terms = spec.node_selector("nodeSelector")
    if len(terms) != 1:
        raise spec.error("nodeSelector.nodeSelectorTerms", f"want one term, got {len(terms)}")
    return terms[0]


def _device(dev: Fields, driver: str, pool: str) -> Device:
    attributes = {}
    for name, value in dev.entries("attributes"):
        attributes[qualified(name, driver)] = _attribute(value)
    capacity = {qualified(name, driver): _capacity(c) for name, c in dev.entries("capacity")}
    return Device(
        id=DeviceId(driver, pool, dev.text("name")),
        attributes=attributes,
        capacity=capacity,
        taints=tuple(t for t in map(_taint, dev.items("taints")) if t),
        allow_multiple_allocations=dev.flag("allowMultipleAllocations"),
        unsupported=_unsupported(dev),
    )


def _unsupported(dev: Fields) -> str | None:
    """Why the device is not allocated here: kube-scheduler checks a partitionable device's
    counters against its slice's shared counters (DRAPartitionableDevices) and waits for a
    device's binding conditions before the binding (DRADeviceBindingConditions); gputopo-
    scheduler does neither, so it leaves such devices to kube-scheduler rather than allocate
    them wrong."""
    if dev.data.get("consumesCounters"):
        return "consumes shared counters (a partitionable device)"
    if dev.data.get("bindingConditions") or dev.flag("bindsToNode"):
        return "waits for binding conditions"
    return None


def _attribute(value: Fields) -> AttrValue:
    kinds = [k for k in ("int", "bool", "string", "version") if value.has(k)]
    if len(kinds) != 1:
        raise value.error("", f"want exactly one of int, bool, string, version; got {kinds}")
    kind = kinds[0]
    if kind == "int":
        return value.integer("int", 0)
    if kind == "bool":
        return value.flag("bool")
    if kind == "string":
        return value.text("string", "")
    try:
        return parse_semver(value.text("version"))
    except ValueError as exc:
        raise value.error("version", str(exc)) from None


def _capacity(cap: Fields) -> Capacity:
    policy = cap.sub("requestPolicy") if cap.has("requestPolicy") else None
    return Capacity(value=cap.quantity("value"), policy=None if policy is None else _policy(policy))


def _policy(policy: Fields) -> RequestPolicy:
    valid = policy.sub("validRange")
    return RequestPolicy(
        default=policy.quantity("default") if policy.has("default") else None,
        valid_values=tuple(sorted(policy.quantities("validValues"))),
        valid_min=valid.quantity("min") if valid.has("min") else None,
        valid_max=valid.quantity("max") if valid.has("max") else None,
        valid_step=valid.quantity("step") if valid.has("step") else None,
    )


def _taint(taint: Fields) -> Taint | None:
    """None for effect `None` (informational: it keeps no request off the device)."""
    effect = taint.text("effect", Effect.NO_SCHEDULE.value)
    if effect == "None":
        return None
    if effect not in {Effect.NO_SCHEDULE, Effect.NO_EXECUTE}:
        raise taint.error("effect", f"unknown effect {effect!r}")
    return Taint(key=taint.text("key"), value=taint.text("value", ""), effect=Effect(effect))


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeDevices:
    """The devices one node can use, in a stable order (driver, pool, slice, device), the pools
    they come from (`pools`, sorted) and those among them that are incomplete."""

    node: str
    devices: tuple[Device, ...]
    incomplete_pools: frozenset[tuple[str, str]] = frozenset()
    shared: Mapping[DeviceId, NodeSelectorTerm | None] = field(default_factory=dict)
    """The devices other nodes may use too (of `allNodes` and `nodeSelector` slices), each with
    its slice's nodeSelector term (None: every node); the others are the node's own. A verdict does
    not read it (not in `likeness`): only where the allocation may be used does
    (`allocation_reach`)."""
    pools: tuple[tuple[str, str], ...] = field(init=False)
    _likeness: str | None = field(init=False, default=None, repr=False, compare=False)
    ids: tuple[DeviceId, ...] = field(init=False, repr=False, compare=False)
    """Each device's id, in `devices` order."""
    positions: Mapping[int, int] = field(init=False, repr=False, compare=False)
    """Each device's position in `devices` by its object's `id` (held here: never reused)."""

    def __post_init__(self) -> None:
        pools = tuple(sorted({(d.id.driver, d.id.pool) for d in self.devices}))
        object.__setattr__(self, "pools", pools)
        object.__setattr__(self, "ids", tuple(d.id for d in self.devices))
        object.__setattr__(self, "positions", {id(d): i for i, d in enumerate(self.devices)})

    @property
    def likeness(self) -> str:
        """All of it but its pool names as text, made once when first asked (each device's
        `likeness` with its pool's position among `pools`, and the positions of the incomplete
        pools): nodes whose devices are alike up to their pool names have equal likenesses
        (`verdicts`), and one is hashed once and compared in one pass (as `ClaimSpec.shape`).
        Verdicts that read only some attributes use `likeness_reading` instead: the text, the
        costliest part of a node's view to make, is then never made."""
        made = self._likeness
        if made is None:
            place = {pool: i for i, pool in enumerate(self.pools)}
            devices = tuple((d.likeness, place[d.id.driver, d.id.pool]) for d in self.devices)
            incomplete = tuple(sorted(place[p] for p in self.incomplete_pools if p in place))
            made = repr((devices, incomplete))
            object.__setattr__(self, "_likeness", made)
        return made

    def likeness_reading(self, keeps: Callable[[str], bool]) -> tuple[object, ...]:
        """`likeness` with only the attributes `keeps` (by qualified name) of each device: what
        expressions that read no others see of the node (made per node and set of attributes
        read; devices of one driver mostly name the same attributes, which are sorted out once)."""
        place = {pool: i for i, pool in enumerate(self.pools)}
        kept: dict[tuple[str, ...], tuple[int, ...]] = {}
        devices = []
        for d in self.devices:
            names = d.attribute_names
            positions = kept.get(names)
            if positions is None:
                positions = kept[names] = tuple(i for i, n in enumerate(names) if keeps(n))
            values = cast("tuple[tuple[str, str, object], ...]", d.likeness[2])
            read = tuple(values[i] for i in positions)
            devices.append((d.rest, read, place[d.id.driver, d.id.pool]))
        incomplete = tuple(sorted(place[p] for p in self.incomplete_pools if p in place))
        return (tuple(devices), incomplete)


def node_devices(
    slices: Iterable[ResourceSlice], node: str, labels: Mapping[str, str]
) -> NodeDevices:
    """What `node` (with `labels`) can use of `slices`: node-local, all-nodes and selected."""
    newest: dict[tuple[str, str], list[ResourceSlice]] = {}
    for s in slices:
        if not serves(s, node, labels):
            continue
        pool = newest.setdefault((s.driver, s.pool), [])
        if pool and pool[0].generation < s.generation:
            pool.clear()
        if not pool or pool[0].generation == s.generation:
            pool.append(s)
    devices: list[Device] = []
    incomplete = set()
    shared: dict[DeviceId, NodeSelectorTerm | None] = {}
    for key in sorted(newest):
        group = sorted(newest[key], key=lambda s: s.name)
        if len(group) < group[0].slice_count:
            incomplete.add(key)
        for s in group:
            devices.extend(s.devices)
            if s.node_name is None:
                shared.update((d.id, s.node_selector) for d in s.devices)
    return NodeDevices(
        node=node, devices=tuple(devices), incomplete_pools=frozenset(incomplete), shared=shared
    )


def serves(s: ResourceSlice, node: str, labels: Mapping[str, str]) -> bool:
    """Whether `node` (with `labels`) may use the devices of slice `s`."""
    if s.node_name is not None:
        return s.node_name == node
    if s.all_nodes:
        return True
    return s.node_selector is not None and s.node_selector.matches(node, labels)


def allocation_reach(
    ids: Iterable[DeviceId], found: NodeDevices
) -> tuple[str | None, tuple[NodeSelectorTerm, ...] | None]:
    """Where a claim given devices `ids` of `found` (a node's) may be used, as Kubernetes'
    allocator writes its nodeSelector: (the node, None) when one of them is the node's own; else
    (None, one term holding each requirement of their `nodeSelector` slices once), or (None,
    None) when those are all `allNodes` slices: any node."""
    fields: list[NodeSelectorRequirement] = []
    expressions: list[NodeSelectorRequirement] = []
    for one in ids:
        if one not in found.shared:
            return found.node, None
        term = found.shared[one]
        if term is None:
            continue  # an allNodes slice's
        fields.extend(r for r in term.match_fields if r not in fields)
        expressions.extend(r for r in term.match_expressions if r not in expressions)
    if not fields and not expressions:
        return None, None
    return None, (
        NodeSelectorTerm(match_expressions=tuple(expressions), match_fields=tuple(fields)),
    )


def reaches(allocation: Allocation, node: str, labels: Mapping[str, str]) -> bool:
    """Whether a pod on `node` (with `labels`) may use a claim allocated so."""
    if allocation.node is not None:
        return allocation.node == node
    terms = allocation.node_selector
    return terms is None or any(term.matches(node, labels) for term in terms)
