"""What DRA allocation reads and writes, as frozen values (resource.k8s.io/v1).

Built from the API server's JSON by `parse`; nothing here holds a dict of the wire form. Device
taints and tolerations are placement's `Taint` and `Toleration` (same matching rules as a node's);
a taint or toleration with effect `None` blocks nothing and is dropped when parsed. Names:
an attribute or capacity name is always qualified here (`domain/id`): an unqualified name in a
ResourceSlice belongs to the slice's driver, and in a constraint it is used as written (as the
Kubernetes allocator does, which compares it against the qualified names).

    DeviceClass                     ResourceClaim ── ClaimSpec
    ResourceSlice ── Device ...                       ├── DeviceRequest ── Alternative ...
                                                      ├── Constraint ...
                                                      └── ConfigEntry ...
    Allocation (a claim's status.allocation): AllocatedDevice ..., node
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction
from types import MappingProxyType
from typing import NamedTuple

from scheduler.placement import Taint, Toleration
from scheduler.placement.request import NodeSelectorTerm

from .semver import Semver

__all__ = [
    "AllocatedDevice",
    "Allocation",
    "AllocationMode",
    "Alternative",
    "AttrValue",
    "Capacity",
    "ClaimKey",
    "ClaimSpec",
    "ConfigEntry",
    "Constraint",
    "CounterAmounts",
    "Device",
    "DeviceClass",
    "DeviceId",
    "DeviceRequest",
    "RequestPolicy",
    "ResourceClaim",
    "ResourceSlice",
    "SliceReach",
]

AttrValue = bool | int | str | Semver
"""A device attribute's value: `bool`, `int`, `string` or `version` on the wire."""

_NO_CAPACITY: Mapping[str, Fraction] = MappingProxyType({})

CounterAmounts = tuple[tuple[str, tuple[tuple[str, Fraction], ...]], ...]
"""Amounts of shared counters by counter set, then counter (each sorted by name): what a
partitionable device consumes (`consumesCounters`), or what a slice offers (`sharedCounters`)."""


class DeviceId(NamedTuple):
    """One device cluster-wide, as allocation results name it."""

    driver: str
    pool: str
    device: str


class ClaimKey(NamedTuple):
    """A ResourceClaim by namespace and name; `str()` is `ns/name`."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class AllocationMode(StrEnum):
    EXACT_COUNT = "ExactCount"
    ALL = "All"


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestPolicy:
    """How a shared device's capacity is handed out: the amount taken when a claim asks for
    none (`default`), and the amounts allowed (`valid_values`, or `valid_min`..`valid_max` in
    steps of `valid_step` from `valid_min`)."""

    default: Fraction | None = None
    valid_values: tuple[Fraction, ...] = ()
    valid_min: Fraction | None = None
    valid_max: Fraction | None = None
    valid_step: Fraction | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Capacity:
    value: Fraction
    policy: RequestPolicy | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SliceReach:
    """Which nodes may use a device of a slice with `perDeviceNodeSelection`: `node_name`, a
    node's own; `all_nodes`; or `node_selector`, the terms of its NodeSelector (ORed; a device
    with several is not allocated: Kubernetes' allocator cannot write an allocation's one)."""

    node_name: str | None = None
    all_nodes: bool = False
    node_selector: tuple[NodeSelectorTerm, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Device:
    """One device of a ResourceSlice; `attributes` and `capacity` are keyed by qualified name."""

    id: DeviceId
    attributes: Mapping[str, AttrValue] = field(default_factory=dict)
    capacity: Mapping[str, Capacity] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    allow_multiple_allocations: bool = False
    consumes: CounterAmounts = ()
    """What the device takes of its pool's shared counters while allocated (`consumesCounters`,
    a partitionable device's): by counter set, then counter."""
    binding_conditions: tuple[str, ...] = ()
    """`bindingConditions`: the device status conditions that must be True before a pod using
    it is bound (DRADeviceBindingConditions); `binding_failure_conditions`: any True fails it."""
    binding_failure_conditions: tuple[str, ...] = ()
    binds_to_node: bool = False
    """`bindsToNode`: an allocation of the device is for the node it was allocated on only."""
    reach: SliceReach | None = None
    """Which nodes may use it, in a slice with `perDeviceNodeSelection` (None: its slice's)."""
    unsupported: str | None = None
    """Why gputopo-scheduler does not allocate the device (its pool is invalid), or None."""
    likeness: tuple[object, ...] = field(init=False, repr=False, compare=False)
    """All of the device but its pool's name, made once (values with their types: True is not 1
    to CEL; capacities as plain ints, a `Fraction` hashing slowly): devices of like nodes compare
    by it (`verdicts`)."""
    attribute_names: tuple[str, ...] = field(init=False, repr=False, compare=False)
    """The attributes' qualified names, in `likeness` order."""
    rest: str = field(init=False, repr=False, compare=False)
    """`likeness` but the attributes, as text (hashed once): with the attributes an expression
    may read, what it sees of the device (`NodeDevices.likeness_reading`)."""

    def __post_init__(self) -> None:
        attributes = tuple(sorted((k, type(v).__name__, v) for k, v in self.attributes.items()))
        capacity = tuple(
            sorted(
                (k, c.value.numerator, c.value.denominator, c.policy)
                for k, c in self.capacity.items()
            )
        )
        likeness = (
            self.id.driver,
            self.id.device,
            attributes,
            capacity,
            self.taints,
            self.allow_multiple_allocations,
            self.consumes,
            self.binding_conditions,
            self.binding_failure_conditions,
            self.binds_to_node,
            self.unsupported,
        )
        object.__setattr__(self, "likeness", likeness)
        object.__setattr__(self, "attribute_names", tuple(a[0] for a in attributes))
        rest = (
            self.id.driver,
            self.id.device,
            capacity,
            self.taints,
            self.allow_multiple_allocations,
            self.consumes,
            self.binding_conditions,
            self.binding_failure_conditions,
            self.binds_to_node,
            self.unsupported,
        )
        object.__setattr__(self, "rest", repr(rest))

    @property
    def name(self) -> str:
        return self.id.device


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceSlice:
    """`node_name` for a node-local slice; `all_nodes`; `node_selector`: the one term of its
    NodeSelector (the API admits exactly one), matched by the caller's node labels; or
    `per_device`: each device says (`Device.reach`)."""

    name: str
    driver: str
    pool: str
    generation: int = 0
    slice_count: int = 1
    node_name: str | None = None
    all_nodes: bool = False
    node_selector: NodeSelectorTerm | None = None
    per_device: bool = False
    devices: tuple[Device, ...] = ()
    counter_sets: CounterAmounts = ()
    """`sharedCounters`: the counters its pool's partitionable devices consume (a slice has
    these or devices, not both)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigEntry:
    """An opaque config entry of a class or claim: copied into the allocation as is."""

    driver: str
    parameters: Mapping[str, object]
    requests: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...] = ()
    config: tuple[ConfigEntry, ...] = ()
    extended_resource_name: str | None = None
    created: str = ""  # metadata.creationTimestamp (RFC 3339: orders as text)


@dataclass(frozen=True, slots=True, kw_only=True)
class Alternative:
    """One way to satisfy a request: the request's `exactly`, or one `firstAvailable` entry.
    `name` is what results name: `req` or `req/sub`."""

    name: str
    device_class: str
    selectors: tuple[str, ...] = ()
    mode: AllocationMode = AllocationMode.EXACT_COUNT
    count: int = 1
    admin_access: bool = False
    tolerations: tuple[Toleration, ...] = ()
    capacity: Mapping[str, Fraction] = field(default_factory=lambda: _NO_CAPACITY)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceRequest:
    """`alternatives`: one (`exactly`) or the `firstAvailable` list, tried in order."""

    name: str
    alternatives: tuple[Alternative, ...]
    first_available: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Constraint:
    """`requests` empty: every request of the claim. Exactly one attribute is set."""

    requests: tuple[str, ...] = ()
    match_attribute: str | None = None
    distinct_attribute: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimSpec:
    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    config: tuple[ConfigEntry, ...] = ()
    shape: str = field(init=False, repr=False, compare=False)
    """The spec as text, made once: equal specs have equal shapes (what allocation keys on)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", repr(self))


@dataclass(frozen=True, slots=True, kw_only=True)
class AllocatedDevice:
    """One `status.allocation.devices.results` entry."""

    request: str
    id: DeviceId
    admin_access: bool = False
    share_id: str | None = None
    consumed: Mapping[str, Fraction] = field(default_factory=lambda: _NO_CAPACITY)
    binding_conditions: tuple[str, ...] = ()  # the device's, copied (DRADeviceBindingConditions)
    binding_failure_conditions: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Allocation:
    """A claim's `status.allocation`. Where its pods may run, from its `nodeSelector`: `node`,
    when that names one node (`metadata.name In [node]`, what an allocation with a node's own
    devices has); else `node_selector`, the selector's terms (ORed; an allocation of devices
    from `nodeSelector` slices has one, their requirements); both None: any node (no selector:
    devices of `allNodes` slices alone)."""

    devices: tuple[AllocatedDevice, ...]
    config: tuple[tuple[str, ConfigEntry], ...] = ()  # (FromClass | FromClaim, entry)
    node: str | None = None
    node_selector: tuple[NodeSelectorTerm, ...] | None = None

    @property
    def waits(self) -> bool:
        """Whether a pod using it waits for its devices' binding conditions before its bind."""
        return any(d.binding_conditions for d in self.devices)


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceClaim:
    key: ClaimKey
    uid: str = ""
    spec: ClaimSpec = field(default_factory=ClaimSpec)
    allocation: Allocation | None = None
    reserved_for: tuple[str, ...] = ()  # the UIDs of the consumers in status.reservedFor
