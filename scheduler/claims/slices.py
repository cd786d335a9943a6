"""ResourceSlices: parsed into devices, and gathered into the devices a node can use.

A pool's devices are those of its newest generation's slices; a pool with fewer slices of that
generation than `resourceSliceCount` is incomplete (being republished): its devices still serve
`ExactCount` requests, and an `All` request that could use it fails, as in Kubernetes.
Attribute and capacity names are qualified with the slice's driver when they have no domain.
A pool's shared counters (DRAPartitionableDevices) are those of its slices that have
`sharedCounters`; a pool that names a counter set twice, or whose devices consume a counter set
or counter it does not have, is invalid, as Kubernetes' allocator finds it: none of its devices
is allocated. A slice with `perDeviceNodeSelection` serves each node the devices that name it
(`nodeName`), select it (`nodeSelector`) or serve every node (`allNodes`); its counters serve
every node.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, cast

from scheduler.placement.request import NodeSelectorRequirement, NodeSelectorTerm

from .model import (
    Allocation,
    AttrValue,
    Capacity,
    CounterAmounts,
    Device,
    DeviceId,
    RequestPolicy,
    ResourceSlice,
    SliceReach,
)
from .semver import parse_semver
from .taintrules import TaintRule, parse_taint, tainted
from .wire import Fields, fields_of

__all__ = [
    "CountersLeft",
    "NodeDevices",
    "allocation_reach",
    "charge",
    "counters_fit",
    "counters_left",
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
    per_device = spec.flag("perDeviceNodeSelection")
    return ResourceSlice(
        name=top.sub("metadata").text("name"),
        driver=driver,
        pool=pool_name,
        generation=pool.integer("generation", 0),
        slice_count=pool.integer("resourceSliceCount", 1),
        node_name=spec.opt_str("nodeName"),
        all_nodes=spec.flag("allNodes"),
        node_selector=_slice_term(spec) if spec.has("nodeSelector") else None,
        per_device=per_device,
        devices=tuple(_device(d, driver, pool_name, per_device) for d in spec.items("devices")),
        counter_sets=_counter_sets(spec.items("sharedCounters"), "name"),
    )


def _counter_sets(items: Iterable[Fields], key: str) -> CounterAmounts:
    """`sharedCounters` (`key` "name") or `consumesCounters` ("counterSet"): by set, then counter,
    each sorted by name (a set named twice is kept twice: the pool is invalid)."""
    found = []
    for entry in items:
        counters = tuple(sorted((n, c.quantity("value")) for n, c in entry.entries("counters")))
        found.append((entry.text(key), counters))
    return tuple(sorted(found))


def _slice_term(spec: Fields) -> NodeSelectorTerm:
    """A slice's `nodeSelector`: exactly one term, as the API server admits."""
    terms = spec.node_selector("nodeSelector")
    if len(terms) != 1:
        raise spec.error("nodeSelector.nodeSelectorTerms", f"want one term, got {len(terms)}")
    return terms[0]


def _reach(dev: Fields) -> tuple[SliceReach, str | None]:
    """A device's own node selection (its slice has `perDeviceNodeSelection`), and why it is
    not allocated (a NodeSelector of several terms) or None."""
    terms = dev.node_selector("nodeSelector") if dev.has("nodeSelector") else ()
    reach = SliceReach(
        node_name=dev.opt_str("nodeName"),
        all_nodes=dev.flag("allNodes"),
        node_selector=terms,
    )
    if len(terms) > 1:
        return reach, f"its nodeSelector has {len(terms)} terms (an allocation's has one)"
    return reach, None


def _device(dev: Fields, driver: str, pool: str, per_device: bool = False) -> Device:
    attributes = {}
    for name, value in dev.entries("attributes"):
        attributes[qualified(name, driver)] = _attribute(value)
    capacity = {qualified(name, driver): _capacity(c) for name, c in dev.entries("capacity")}
    return Device(
        id=DeviceId(driver, pool, dev.text("name")),
        attributes=attributes,
        capacity=capacity,
        taints=tuple(t for t in map(parse_taint, dev.items("taints")) if t),
        allow_multiple_allocations=dev.flag("allowMultipleAllocations"),
        consumes=_counter_sets(dev.items("consumesCounters"), "counterSet"),
        binding_conditions=dev.strs("bindingConditions"),
        binding_failure_conditions=dev.strs("bindingFailureConditions"),
        binds_to_node=dev.flag("bindsToNode"),
        **_device_reach(dev, per_device),
    )


def _device_reach(dev: Fields, per_device: bool) -> dict[str, Any]:
    if not per_device:
        return {}
    reach, unsupported = _reach(dev)
    return {"reach": reach, "unsupported": unsupported}


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


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeDevices:
    """The devices one node can use, in a stable order (driver, pool, slice, device), the pools
    they come from (`pools`, sorted), those among them that are incomplete, and the shared
    counters of those whose devices consume some (`counters`)."""

    node: str
    devices: tuple[Device, ...]
    incomplete_pools: frozenset[tuple[str, str]] = frozenset()
    counters: Mapping[tuple[str, str], CounterAmounts] = field(default_factory=dict)
    """Per pool (driver, pool) whose devices consume counters: its counter sets."""
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
            made = repr((devices, incomplete, self._counters_placed(place)))
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
        return (tuple(devices), incomplete, self._counters_placed(place))

    def _counters_placed(self, place: Mapping[tuple[str, str], int]) -> tuple[object, ...]:
        """The counter sets by their pool's position among `pools` (for the likenesses)."""
        return tuple(sorted((place[p], sets) for p, sets in self.counters.items() if p in place))


def node_devices(
    slices: Iterable[ResourceSlice],
    node: str,
    labels: Mapping[str, str],
    rules: Sequence[TaintRule] = (),
) -> NodeDevices:
    """What `node` (with `labels`) can use of `slices`: node-local, all-nodes and selected,
    with the taints of the DeviceTaintRules `rules` that pick them."""
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
    counters: dict[tuple[str, str], CounterAmounts] = {}
    for key in sorted(newest, key=lambda k: (_waits(newest[k]), k)):
        group = sorted(newest[key], key=lambda s: s.name)
        if len(group) < group[0].slice_count:
            incomplete.add(key)
        pool_devices = [d for s in group for d in _for_node(s, node, labels)]
        if any(d.consumes for d in pool_devices):
            pool_devices, sets = _with_counters(key[1], group, pool_devices, key in incomplete)
            if sets is not None:
                counters[key] = sets
        devices.extend(tainted(pool_devices, rules) if rules else pool_devices)
        for s in group:
            if s.per_device:
                shared.update(_shared_devices(s, node, labels))
            elif s.node_name is None:
                shared.update((d.id, s.node_selector) for d in s.devices)
    return NodeDevices(
        node=node,
        devices=tuple(devices),
        incomplete_pools=frozenset(incomplete),
        shared=shared,
        counters=counters,
    )


def _waits(pool: Iterable[ResourceSlice]) -> bool:
    """Whether a pool has devices with binding conditions: Kubernetes' allocator tries such
    pools after every other."""
    return any(d.binding_conditions for s in pool for d in s.devices)


def _invalid_counters(sets: CounterAmounts, devices: Iterable[Device]) -> str | None:
    """Why a pool's counters make it invalid (as Kubernetes' allocator finds it), or None."""
    names = [name for name, _counters in sets]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        return f"counter set {twice[0]} is named twice"
    offered = {name: {c for c, _v in counters} for name, counters in sets}
    for dev in devices:
        for set_name, consumed in dev.consumes:
            if set_name not in offered:
                return f"device {dev.name} consumes counter set {set_name}, which it has not"
            missing = sorted(c for c, _v in consumed if c not in offered[set_name])
            if missing:
                return f"device {dev.name} consumes counter {missing[0]}, not in set {set_name}"
    return None


CountersLeft = dict[tuple[str, str], dict[str, dict[str, Fraction]]]
"""Per pool (driver, pool), per counter set, per counter: the amount left."""


def counters_left(found: NodeDevices, held: Callable[[DeviceId], bool]) -> CountersLeft:
    """What each counter set of the node's pools has left after the devices `held` says are
    allocated (a device held by several shares counts once); it may go below 0 (allocations
    made before a pool was republished smaller), and then fits nothing."""
    left = {
        pool: {name: dict(counters) for name, counters in sets}
        for pool, sets in found.counters.items()
    }
    for dev in found.devices:  # an invalid pool's have no counters here (never allocated)
        if dev.consumes and (dev.id.driver, dev.id.pool) in left and held(dev.id):
            charge(left, dev, -1)
    return left


def charge(left: CountersLeft, dev: Device, sign: int) -> None:
    """Give (`sign` 1) or take (-1) what `dev` consumes to `left`."""
    sets = left[dev.id.driver, dev.id.pool]
    for set_name, consumed in dev.consumes:
        counters = sets[set_name]
        for counter, amount in consumed:
            counters[counter] += sign * amount


def counters_fit(left: CountersLeft, dev: Device) -> bool:
    """Whether what `dev` consumes is left: every counter of its pool at 0 or above after it
    (as Kubernetes' allocator checks: a pool with a counter below 0 fits no device that
    consumes any)."""
    sets = left[dev.id.driver, dev.id.pool]
    taken = dict(dev.consumes)
    for set_name, counters in sets.items():
        consumed = dict(taken.get(set_name, ()))
        if any(value - consumed.get(name, 0) < 0 for name, value in counters.items()):
            return False
    return True


def _with_counters(
    pool: str, group: Sequence[ResourceSlice], served: list[Device], incomplete: bool
) -> tuple[list[Device], CounterAmounts | None]:
    """The devices `served` to a node of a pool (its slices `group`) whose devices consume
    counters, and the pool's counter sets (None: none is allocated). An invalid pool's devices
    are unsupported; so are a node's consumers when devices of other nodes may consume the
    pool's counters too (a `perDeviceNodeSelection` slice's consumer not served here, or not
    seen: the pool is incomplete): their allocations are not in the node's view (Kubernetes'
    allocator reads the pool's every slice)."""
    sets = tuple(sorted(c for s in group for c in s.counter_sets))
    problem = _invalid_counters(sets, served)
    if problem is not None:
        why = f"its pool {pool} is invalid: {problem}"
        return [replace(d, unsupported=why) for d in served], None
    if any(s.per_device for s in group):
        consumers = sum(1 for s in group for d in s.devices if d.consumes)
        if incomplete or consumers > sum(1 for d in served if d.consumes):
            why = f"its pool {pool} shares counters with other nodes' devices"
            return [replace(d, unsupported=why) if d.consumes else d for d in served], None
    return served, sets


def _for_node(s: ResourceSlice, node: str, labels: Mapping[str, str]) -> Iterable[Device]:
    """The devices of slice `s` that `node` may use (all, but of a `perDeviceNodeSelection`
    slice, whose devices each say)."""
    if not s.per_device:
        return s.devices
    return [d for d in s.devices if d.reach is not None and _reaches(d.reach, node, labels)]


def _shared_devices(
    s: ResourceSlice, node: str, labels: Mapping[str, str]
) -> Iterator[tuple[DeviceId, NodeSelectorTerm | None]]:
    """Of a `perDeviceNodeSelection` slice, the devices `node` may use that others may use
    too, each with its own nodeSelector term (None: every node)."""
    for d in _for_node(s, node, labels):
        if d.reach is not None and d.reach.node_name is None:
            yield d.id, d.reach.node_selector[0] if d.reach.node_selector else None


def serves(s: ResourceSlice, node: str, labels: Mapping[str, str]) -> bool:
    """Whether `node` (with `labels`) may use the devices of slice `s` (of a slice with
    `perDeviceNodeSelection`, any of them)."""
    if s.per_device:  # a pool's counters serve wherever its devices do
        reached = (d.reach is not None and _reaches(d.reach, node, labels) for d in s.devices)
        return bool(s.counter_sets) or any(reached)
    return _reaches(s, node, labels)


def _reaches(s: ResourceSlice | SliceReach, node: str, labels: Mapping[str, str]) -> bool:
    if s.node_name is not None:
        return s.node_name == node
    if s.all_nodes:
        return True
    if isinstance(s, SliceReach):
        return any(term.matches(node, labels) for term in s.node_selector)
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
