"""What the allocator is asked and answers, and how a search's picks become claim allocations.

`ClaimNode` (a node's devices, GPUs and placement state), `PodClaims` (a pod's claims),
`PodDecision` / `GangDecision` (the answer), `ClaimAllocation` (one claim's `status.allocation`).
`allocations` turns the picks of `search` into one `Allocation` per claim: results in pick order,
a deterministic share ID and the consumed capacity for a shared device, the classes' config
(FromClass, for the requests that used each class) then the claim's (FromClaim), and where it
may be used (`slices.allocation_reach`: the node, when a device is the node's own).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from itertools import repeat
from types import MappingProxyType

from agent.model import LinkMatrix
from scheduler.placement import NodeState
from scheduler.placement.node_slots import static_shape

from .model import AllocatedDevice, Allocation, ConfigEntry, DeviceClass, ResourceClaim
from .order import GpuMap
from .search import Pick
from .slices import NodeDevices, allocation_reach
from .usage import Usage

_NOTHING: Mapping[str, Fraction] = MappingProxyType({})
"""What an exclusive device's result consumes (shared by all: it cannot change)."""
_NO_LABELS: Mapping[str, str] = MappingProxyType({})

__all__ = [
    "ClaimAllocation",
    "ClaimNode",
    "GangDecision",
    "Hashed",
    "PodClaims",
    "PodDecision",
    "allocations",
    "fullness",
    "whole_gpus",
]


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ClaimNode:
    """One node as claims see it: its devices, its GPUs (for topology) and placement's state.
    Equal only to itself: verdicts are kept per object (its state changes in place), and a node
    list is known again by `==`, which then compares object identities in C."""

    name: str
    devices: NodeDevices
    gpus: GpuMap | None = None
    state: NodeState | None = None
    labels: Mapping[str, str] = field(default_factory=lambda: _NO_LABELS)
    """The node's labels: what a claim allocated with a nodeSelector is matched by (`reaches`)."""
    rest: tuple[object, ...] = field(init=False, repr=False)
    """What a verdict reads of the node that is fixed for its life besides its devices, made
    with it: its state's static shape (placement's `static_shape`, which a state keeps for
    life), its GPU map by device position, the GPU selector by the layout it was made from, or
    when it was given, itself (compared as the same object)."""
    _likeness: Hashed | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rest", _fixed_rest(self.devices, self.gpus, self.state))

    @property
    def likeness(self) -> Hashed:
        """All a verdict reads of the node that is fixed for its life, made once when first
        asked: its devices up to their pool names (`NodeDevices.likeness`) and `rest`. Nodes of
        equal likenesses decide alike (`verdicts`)."""
        made = self._likeness
        if made is None:
            made = Hashed((self.devices.likeness, *self.rest))
            object.__setattr__(self, "_likeness", made)
        return made


class Hashed:
    """A value with its hash computed once, compared by hash, then value (a likeness made once
    and looked up often)."""

    __slots__ = ("_hash", "value")

    def __init__(self, value: tuple[object, ...]) -> None:
        self.value = value
        self._hash = hash(value)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Hashed) and other._hash == self._hash and other.value == self.value


def _fixed_rest(
    devices: NodeDevices, gpus: GpuMap | None, state: NodeState | None
) -> tuple[object, ...]:
    shape = None if state is None else tuple(map(_linked, static_shape(state)))
    if gpus is None:
        return (shape, None)
    whole = tuple(map(gpus.whole.get, devices.ids, repeat(-1)))
    parent = tuple(map(gpus.parent.get, devices.ids, repeat(-1)))
    made = gpus.selector if gpus.layout is None else (_Links(gpus.layout[0]), gpus.layout[1])
    return (shape, (made, whole, parent))


def _linked(value: object) -> object:
    return _Links(value) if isinstance(value, LinkMatrix) else value


class _Links:
    """A link matrix compared by identity first, then by value, and hashed by its size only:
    hashing one costs more than a verdict, and nodes of one shape often share the object."""

    __slots__ = ("value",)

    def __init__(self, value: LinkMatrix) -> None:
        self.value = value

    def __hash__(self) -> int:
        return self.value.size

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Links) and (
            other.value is self.value or other.value == self.value
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class PodClaims:
    """A pod (`key` = `ns/name`) and its claims in `spec.resourceClaims` order."""

    key: str
    claims: tuple[ResourceClaim, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimAllocation:
    """A claim and its allocation; `new` is False for a claim that was allocated already."""

    claim: ResourceClaim
    allocation: Allocation
    new: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class PodDecision:
    """`node` and the pod's claims there (with the whole GPUs they take, by index), or no node
    and the reasons (nearest miss first); `unshown`: the further misses left out (when only
    the nearest few were asked for)."""

    node: str | None
    claims: tuple[ClaimAllocation, ...] = ()
    gpus: tuple[int, ...] = ()
    reasons: tuple[str, ...] = ()
    unshown: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class GangDecision:
    pods: tuple[PodDecision, ...] = ()
    reasons: tuple[str, ...] = ()
    unshown: int = 0  # as `PodDecision.unshown`

    @property
    def placed(self) -> bool:
        return not self.reasons


def allocations(
    fresh: Sequence[ResourceClaim],
    picks: Sequence[Pick],
    found: NodeDevices,
    classes: Mapping[str, DeviceClass],
) -> list[ClaimAllocation]:
    """One allocation per claim of `fresh` (`Pick.claim` is a position in it), of devices of
    `found` (the node's)."""
    out = []
    for pos, claim in enumerate(fresh):
        mine = [p for p in picks if p.claim == pos]
        results = tuple(_result(claim, p) for p in mine)
        config = _config(claim, mine, classes)
        node, selector = allocation_reach((r.id for r in results), found)
        if any(p.candidate.device.binds_to_node for p in mine):  # for this node alone
            node, selector = found.node, None
        made = Allocation(devices=results, config=config, node=node, node_selector=selector)
        out.append(ClaimAllocation(claim=claim, allocation=made))
    return out


def _result(claim: ResourceClaim, pick: Pick) -> AllocatedDevice:
    consumed = pick.candidate.consumed
    device = pick.candidate.device
    return AllocatedDevice(
        request=pick.alternative.name,
        id=device.id,
        admin_access=pick.alternative.admin_access,
        share_id=None if consumed is None else _share_id(claim, pick),
        consumed=consumed or _NOTHING,
        binding_conditions=device.binding_conditions,
        binding_failure_conditions=device.binding_failure_conditions,
    )


def _config(
    claim: ResourceClaim, picks: Sequence[Pick], classes: Mapping[str, DeviceClass]
) -> tuple[tuple[str, ConfigEntry], ...]:
    by_class: dict[str, list[str]] = {}
    for pick in picks:
        names = by_class.setdefault(pick.alternative.device_class, [])
        if pick.alternative.name not in names:
            names.append(pick.alternative.name)
    out: list[tuple[str, ConfigEntry]] = []
    for class_name, requests in by_class.items():
        for entry in classes[class_name].config:
            out.append(("FromClass", replace(entry, requests=tuple(requests))))
    out.extend(("FromClaim", entry) for entry in claim.spec.config)
    return tuple(out)


def _share_id(claim: ResourceClaim, pick: Pick) -> str:
    """A share's ID, the same for the same claim, request and device (no randomness here)."""
    dev = pick.candidate.device.id
    seed = f"{claim.uid or claim.key}/{pick.alternative.name}/{dev.driver}/{dev.pool}/{dev.device}"
    return str(uuid.uuid5(uuid.NAMESPACE_URL, seed))


def whole_gpus(node: ClaimNode, picks: Sequence[Pick]) -> tuple[int, ...]:
    """The model GPUs (indices) the picks take whole."""
    if node.gpus is None:
        return ()
    whole = node.gpus.whole
    found = {whole[p.candidate.device.id] for p in picks if p.candidate.device.id in whole}
    return tuple(sorted(found))


def fullness(node: ClaimNode, picks: Sequence[Pick], usage: Usage) -> float:
    """The share of the node's devices in use once the picks are taken (binpack), in 0..100."""
    devices = node.devices.devices
    if not devices:
        return 0.0
    taken = {p.candidate.device.id for p in picks}
    used = sum(
        1 for d in devices if d.id in taken or not usage.is_free(d) or d.id in usage.consumed
    )
    return 100.0 * used / len(devices)
