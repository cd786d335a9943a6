"""Allocation of a pod's ResourceClaims (or a gang's) on the nodes: the decision API of this room.

`ClaimAllocator.on_node` answers for one node: every claim of the pod allocated there (claims
allocated already are kept as they are, and must be on that node), or the nearest miss.
`place` asks every node and keeps the answer the placement scores prefer: with a node's
`NodeState`, the scheduler's own `Scoring` (binpack, topology, ...) on the whole GPUs the claims
take, with used nodes first when `prefer_used_nodes`; without one, the node whose devices end
fullest. `place_gang` places a gang's pods in order, each seeing the devices the earlier ones
took, a claim shared by several of them allocated once; all or none.

Pure: the caller passes what is allocated already (`Usage`) and applies the decision.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from scheduler.placement import Assignment, NodeState, PodRequest, Scoring

from .candidates import Miss, candidates
from .errors import SearchLimitError
from .model import (
    AllocatedDevice,
    Allocation,
    AllocationMode,
    Alternative,
    ClaimKey,
    ConfigEntry,
    DeviceClass,
    ResourceClaim,
)
from .order import GpuMap, prefer
from .search import DEFAULT_LIMIT, Option, Pick, Slot, applies, search
from .selectors import Selectors
from .slices import NodeDevices
from .usage import Usage

__all__ = [
    "CLAIM_WEIGHTS",
    "ClaimAllocation",
    "ClaimAllocator",
    "ClaimNode",
    "GangDecision",
    "PodClaims",
    "PodDecision",
]

CLAIM_WEIGHTS: Mapping[str, float] = MappingProxyType({"binpack": 10.0, "topology": 5.0})
"""The scores `ClaimAllocator` ranks nodes by when given no `Scoring`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimNode:
    """One node as claims see it: its devices, its GPUs (for topology) and placement's state."""

    name: str
    devices: NodeDevices
    gpus: GpuMap | None = None
    state: NodeState | None = None


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
    """`node` and the pod's claims there, or no node and the reasons (nearest miss first)."""

    node: str | None
    claims: tuple[ClaimAllocation, ...] = ()
    gpus: tuple[int, ...] = ()
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class GangDecision:
    pods: tuple[PodDecision, ...] = ()
    reasons: tuple[str, ...] = ()

    @property
    def placed(self) -> bool:
        return not self.reasons


class ClaimAllocator:
    """Allocates claims with one set of DeviceClasses; keeps the compiled selectors."""

    def __init__(
        self,
        classes: Mapping[str, DeviceClass],
        *,
        scoring: Scoring | None = None,
        selectors: Selectors | None = None,
        limit: int = DEFAULT_LIMIT,
    ) -> None:
        self.classes = classes
        self.scoring = scoring or Scoring.from_weights(CLAIM_WEIGHTS, candidate_limit=0)
        self.selectors = selectors or Selectors()
        self.limit = limit

    def on_node(self, pod: PodClaims, node: ClaimNode, usage: Usage) -> PodDecision | Miss:
        """The pod's claims allocated on `node`, or the nearest miss there."""
        where = f"on node {node.name}"
        kept, fresh = [], []
        for claim in _unique(pod.claims):
            if claim.allocation is None:
                fresh.append(claim)
            elif claim.allocation.node not in (None, node.name):
                text = f"claim {claim.key} is allocated on node {claim.allocation.node}"
                return Miss(text, (0, 0))
            else:
                kept.append(ClaimAllocation(claim=claim, allocation=claim.allocation, new=False))
        slots = []
        for pos, claim in enumerate(fresh):
            for request in claim.spec.requests:
                slot = self._slot(pos, claim, request.alternatives, node, usage, where)
                if isinstance(slot, Miss):
                    return slot
                slots.append(slot)
        try:
            picks = search(slots, usage, self.limit)
        except SearchLimitError as exc:
            return Miss(f"claims of pod {pod.key}: {exc} {where}", (90, 0))
        if picks is None:
            names = ", ".join(str(c.key) for c in fresh)
            text = f"claims {names}: no devices satisfy their constraints together {where}"
            return Miss(text, (90, 0))
        made = [self._allocation(pos, c, picks, node.name) for pos, c in enumerate(fresh)]
        gpus = _whole_gpus(node, picks)
        return PodDecision(node=node.name, claims=(*kept, *made), gpus=gpus)

    def _slot(
        self,
        pos: int,
        claim: ResourceClaim,
        alternatives: Sequence[Alternative],
        node: ClaimNode,
        usage: Usage,
        where: str,
    ) -> Slot | Miss:
        options, misses = [], []
        for alt in alternatives:
            found = candidates(
                claim.key, alt, self.classes, node.devices.devices, usage, self.selectors, where
            )
            miss = found.miss or _incomplete(claim.key, alt, found.usable, node, where)
            if miss is not None:
                misses.append(miss)
                continue
            group_by = next(
                (
                    c.match_attribute
                    for c in claim.spec.constraints
                    if c.match_attribute and applies(c, alt.name)
                ),
                None,
            )
            options.append(Option(alt, prefer(found, node.gpus, usage, group_by)))
        if not options:
            return max(misses, key=lambda m: m.rank)
        return Slot(pos, tuple(options), claim.spec.constraints)

    def _allocation(
        self, pos: int, claim: ResourceClaim, picks: Sequence[Pick], node: str
    ) -> ClaimAllocation:
        results = []
        for pick in picks:
            if pick.claim != pos:
                continue
            dev, consumed = pick.candidate.device, pick.candidate.consumed
            share = None if consumed is None else _share_id(claim, pick)
            results.append(
                AllocatedDevice(
                    request=pick.alternative.name,
                    id=dev.id,
                    admin_access=pick.alternative.admin_access,
                    share_id=share,
                    consumed=consumed or {},
                )
            )
        allocation = Allocation(
            devices=tuple(results), config=self._config(claim, picks, pos), node=node
        )
        return ClaimAllocation(claim=claim, allocation=allocation)

    def _config(
        self, claim: ResourceClaim, picks: Sequence[Pick], pos: int
    ) -> tuple[tuple[str, ConfigEntry], ...]:
        """The classes' config (FromClass, for the requests of each class), then the claim's."""
        by_class: dict[str, list[str]] = {}
        for pick in picks:
            if pick.claim == pos:
                names = by_class.setdefault(pick.alternative.device_class, [])
                if pick.alternative.name not in names:
                    names.append(pick.alternative.name)
        out: list[tuple[str, ConfigEntry]] = []
        for class_name, requests in by_class.items():
            for entry in self.classes[class_name].config:
                out.append(("FromClass", replace(entry, requests=tuple(requests))))
        out.extend(("FromClaim", entry) for entry in claim.spec.config)
        return tuple(out)

    def place(self, pod: PodClaims, nodes: Sequence[ClaimNode], usage: Usage) -> PodDecision:
        """The best node for the pod's claims, or the reasons no node will do."""
        best: tuple[tuple[bool, float, str], PodDecision] | None = None
        misses: list[Miss] = []
        for node in nodes:
            answer = self.on_node(pod, node, usage)
            if isinstance(answer, Miss):
                misses.append(answer)
                continue
            key = self._rank(pod, node, answer, usage)
            if best is None or key > best[0]:
                best = key, answer
        if best is not None:
            return best[1]
        ordered = sorted(misses, key=lambda m: m.rank, reverse=True)
        return PodDecision(node=None, reasons=tuple(m.text for m in ordered))

    def _rank(
        self, pod: PodClaims, node: ClaimNode, answer: PodDecision, usage: Usage
    ) -> tuple[bool, float, str]:
        """(used node first, score, lowest name): larger wins."""
        name_key = "".join(chr(0x10FFFF - ord(ch)) for ch in node.name)
        state = node.state
        if state is None:
            return False, _fullness(node, answer, usage), name_key
        request = PodRequest(key=pod.key, gpus=len(answer.gpus))
        assignment = Assignment(node=node.name, gpus=answer.gpus)
        used = self.scoring.prefer_used_nodes and state.gpu_used()
        return used, self.scoring.total(request, state, assignment), name_key

    def place_gang(
        self, pods: Sequence[PodClaims], nodes: Sequence[ClaimNode], usage: Usage
    ) -> GangDecision:
        """Every pod placed with the devices the earlier ones took counted, or none."""
        usage = usage.copy()
        allocated: dict[ClaimKey, ResourceClaim] = {}
        decisions = []
        for pod in pods:
            claims = tuple(allocated.get(c.key, c) for c in pod.claims)
            decision = self.place(replace(pod, claims=claims), nodes, usage)
            if decision.node is None:
                first = decision.reasons[0] if decision.reasons else "no node"
                return GangDecision(reasons=(f"pod {pod.key}: {first}", *decision.reasons[1:]))
            for made in decision.claims:
                if made.new:
                    usage.add(made.allocation.devices)
                    allocated[made.claim.key] = replace(made.claim, allocation=made.allocation)
            decisions.append(decision)
        return GangDecision(pods=tuple(decisions))


def _unique(claims: Sequence[ResourceClaim]) -> list[ResourceClaim]:
    seen: dict[ClaimKey, ResourceClaim] = {}
    for claim in claims:
        seen.setdefault(claim.key, claim)
    return list(seen.values())


def _incomplete(
    claim: ClaimKey, alt: Alternative, usable: Sequence[object], node: ClaimNode, where: str
) -> Miss | None:
    """An `All` request cannot be served while a pool it could use is being republished."""
    pools = node.devices.incomplete_pools
    if alt.mode is not AllocationMode.ALL or not pools:
        return None
    for cand in usable:
        dev = cand.device  # type: ignore[attr-defined]
        if (dev.id.driver, dev.id.pool) in pools:
            text = f"claim {claim} request {alt.name}: pool {dev.id.pool} is incomplete {where}"
            return Miss(text, (80, 0))
    return None


def _whole_gpus(node: ClaimNode, picks: Sequence[Pick]) -> tuple[int, ...]:
    if node.gpus is None:
        return ()
    whole = node.gpus.whole
    found = {whole[p.candidate.device.id] for p in picks if p.candidate.device.id in whole}
    return tuple(sorted(found))


def _fullness(node: ClaimNode, answer: PodDecision, usage: Usage) -> float:
    """The share of the node's devices in use once the answer is applied (binpack)."""
    devices = node.devices.devices
    if not devices:
        return 0.0
    taken = {d.id for c in answer.claims if c.new for d in c.allocation.devices}
    used = sum(
        1 for d in devices if d.id in taken or not usage.is_free(d) or d.id in usage.consumed
    )
    return 100.0 * used / len(devices)


def _share_id(claim: ResourceClaim, pick: Pick) -> str:
    """A share's ID, the same for the same claim, request and device (no randomness here)."""
    dev = pick.candidate.device.id
    seed = f"{claim.uid or claim.key}/{pick.alternative.name}/{dev.driver}/{dev.pool}/{dev.device}"
    return str(uuid.uuid5(uuid.NAMESPACE_URL, seed))
