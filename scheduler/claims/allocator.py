"""Allocation of a pod's ResourceClaims (or a gang's) on the nodes: the decision API of this room.

`ClaimAllocator.on_node` answers for one node: every claim of the pod allocated there (claims
allocated already are kept as they are, and must be on that node), or the nearest miss.
`place` asks every node and keeps the answer the placement scores prefer: with a node's
`NodeState`, the scheduler's own `Scoring` (binpack, topology, ...) on the whole GPUs the claims
take, with used nodes first when `prefer_used_nodes`; without one, the node whose devices end
fullest; ties to the lowest name. `place_gang` places a gang's pods in order, each seeing the
devices the earlier ones took, a claim shared by several of them allocated once; all or none.

Each node's verdict for a pod's claim shape (the specs, not the names) is kept while neither the
node's pools in `Usage` nor what the shipped scores read of its `NodeState` change (`verdicts`),
so a pod decides in a lookup per unchanged node, as placement's verdict memo does for pods.
Pure: the caller passes what is allocated already (`Usage`) and applies the decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from heapq import nlargest
from operator import attrgetter, itemgetter
from types import MappingProxyType

from scheduler.placement import Assignment, PodRequest, Scoring
from scheduler.placement.fragscores import FragmentationScore
from scheduler.placement.scores import binpack_score

from .candidates import Candidates, Miss, StaticMemo, candidates
from .decision import (
    ClaimAllocation,
    ClaimNode,
    GangDecision,
    PodClaims,
    PodDecision,
    allocations,
    fullness,
    whole_gpus,
)
from .errors import SearchLimitError
from .model import (
    AllocationMode,
    Alternative,
    ClaimKey,
    Constraint,
    DeviceClass,
    ResourceClaim,
)
from .order import OrderMemo, prefer
from .search import DEFAULT_LIMIT, Option, Pick, Slot, applies, search
from .selectors import AttributeReads, Selectors
from .slices import CountersLeft, counters_left, reaches
from .usage import Usage
from .verdicts import NO_FIT, Fit, NodeChanges, Verdicts

__all__ = ["CLAIM_WEIGHTS", "ClaimAllocator"]

_shape_of = attrgetter("spec.shape")
_rank_of = itemgetter(0)
_NEAREST_KEPT = 1_000
_NOTED_LIMIT = 10_000
_key_of = attrgetter("key")

CLAIM_WEIGHTS: Mapping[str, float] = MappingProxyType({"binpack": 10.0, "topology": 5.0})
"""The scores `ClaimAllocator` ranks nodes by when given no `Scoring`."""


class ClaimAllocator:
    """Allocates claims with one set of DeviceClasses; keeps compiled selectors and verdicts."""

    def __init__(
        self,
        classes: Mapping[str, DeviceClass],
        *,
        scoring: Scoring | None = None,
        selectors: Selectors | None = None,
        limit: int = DEFAULT_LIMIT,
        alike: ClaimAllocator | None = None,
    ) -> None:
        """`alike`: an allocator of the same classes deciding against another usage; this one
        shares its compiled selectors, the attributes read and the nodes' likenesses (a node's
        class is then read once for both)."""
        self.classes = classes
        self.scoring = scoring or Scoring.from_weights(CLAIM_WEIGHTS, candidate_limit=0)
        self.selectors: Selectors = (
            alike.selectors if alike is not None else selectors or Selectors()
        )
        self.limit = limit
        self._static: StaticMemo = {}
        self._orders: OrderMemo = {}
        self._reads: AttributeReads = AttributeReads() if alike is None else alike._reads
        """What the classes' and the shapes' selectors and constraints may read of a device's
        attributes: like nodes are alike in those (a GPU's UUID, read by none, tells none apart)."""
        for device_class in classes.values():
            for expression in device_class.selectors:
                self._reads.note_expression(expression)
        self._noted: set[object] = set()  # the shapes whose reads are noted
        self._verdicts: Verdicts = Verdicts(
            self.scoring, self._reads, alike=None if alike is None else alike._verdicts
        )
        self._nearest_nodes: dict[tuple[object, ...], tuple[tuple[int, ...], int]] = {}
        """Per shape, node list, classes' stamp and count shown: the positions of the nearest
        misses and how many nodes miss (`_nearest`)."""
        self._miss_ranks: dict[object, dict[int, tuple[int, int] | None]] = {}
        """Per shape, each class's miss rank (None: it fits), for `_nearest`."""
        self._binpack_weight = sum(
            s.weight
            for s in self.scoring.scores
            if s.fn is binpack_score or isinstance(s.fn, FragmentationScore)
        )
        """What `_device_rank` weighs the devices in use by: the weights of the scores that
        pack GPUs (binpack, and fragmentation, which packs them in the shipped scores)."""
        self._nowhere: set[tuple[object, ...]] = set()
        """Claim shapes that fit no node, per usage epoch and node list (by the number verdicts
        give it): whether claims fit reads nothing else."""

    def on_node(self, pod: PodClaims, node: ClaimNode, usage: Usage) -> PodDecision | Miss:
        """The pod's claims allocated on `node`, or the nearest miss there."""
        kept, fresh = _split(pod.claims)
        pinned = _pinned_elsewhere(kept, node)
        if pinned is not None:
            return pinned
        found = self._solve(pod.key, fresh, node, usage)
        if isinstance(found, Miss):
            return found
        return self._decision(kept, fresh, node, found)

    def _decision(
        self,
        kept: Sequence[ResourceClaim],
        fresh: Sequence[ResourceClaim],
        node: ClaimNode,
        picks: Sequence[Pick],
    ) -> PodDecision:
        old = [
            ClaimAllocation(claim=c, allocation=c.allocation, new=False)
            for c in kept
            if c.allocation
        ]
        made = allocations(fresh, picks, node.devices, self.classes)
        held = [p for p in picks if p.candidate.consumed is None]  # a share is not a whole GPU
        return PodDecision(node=node.name, claims=(*old, *made), gpus=whole_gpus(node, held))

    def _solve(
        self, pod: str, fresh: Sequence[ResourceClaim], node: ClaimNode, usage: Usage
    ) -> list[Pick] | Miss:
        where = f"on node {node.name}"
        counters = None
        if node.devices.counters:  # partitionable devices: what their pools' counters have left
            exclusive, consumed = usage.exclusive, usage.consumed
            counters = counters_left(node.devices, lambda i: i in exclusive or i in consumed)
        slots = []
        for pos, claim in enumerate(fresh):
            for request in claim.spec.requests:
                slot = self._slot(pos, claim, request.alternatives, node, usage, where, counters)
                if isinstance(slot, Miss):
                    return slot
                slots.append(slot)
        try:
            picks = search(slots, usage, self.limit, counters)
        except SearchLimitError as exc:
            return Miss(f"claims of pod {pod}: {exc} {where}", (90, 0))
        if picks is None:
            names = ", ".join(str(c.key) for c in fresh)
            within = " and their pools' shared counters" if counters else ""
            return Miss(
                f"claims {names}: no devices satisfy their constraints{within} together {where}",
                (90, 0),
            )
        return picks

    def _slot(
        self,
        pos: int,
        claim: ResourceClaim,
        alternatives: Sequence[Alternative],
        node: ClaimNode,
        usage: Usage,
        where: str,
        counters: CountersLeft | None = None,
    ) -> Slot | Miss:
        options, misses = [], []
        for alt in alternatives:
            found = candidates(
                claim.key,
                alt,
                self.classes,
                node.devices.devices,
                usage,
                self.selectors,
                where,
                self._static,
                counters,
            )
            miss = found.miss or _incomplete(claim.key, alt, found, node, where)
            if miss is not None:
                misses.append(miss)
                continue
            group_by = _group_by(claim.spec.constraints, alt.name)
            options.append(Option(alt, prefer(found, node.gpus, usage, group_by, self._orders)))
        if not options:
            return max(misses, key=lambda m: m.rank)
        return Slot(pos, tuple(options), claim.spec.constraints)

    def place(
        self,
        pod: PodClaims,
        nodes: Sequence[ClaimNode],
        usage: Usage,
        *,
        explain: bool = True,
        changes: NodeChanges | None = None,
        shown: int | None = None,
    ) -> PodDecision:
        """The best node for the pod's claims, or the reasons no node will do (with `explain`
        every node's nearest miss, nearest first, or with `shown` the nearest `shown` of them
        and how many others there are; without, one line). `changes`: the log of the nodes'
        state changes (placement's `Snapshot` their states are in), when there is one: then only
        the nodes changed since the last pod are looked at again."""
        kept, fresh = _split(pod.claims)
        shape = (tuple(map(_shape_of, fresh)), tuple(map(str, map(_key_of, kept))))
        if shape not in self._noted:
            self._note_reads(fresh)
            self._noted.add(shape)
        listed = self._verdicts.list_number(nodes)
        nowhere = (shape, usage.epoch, listed)
        if not explain and nowhere in self._nowhere:
            return PodDecision(node=None, reasons=(f"no node fits the claims of pod {pod.key}",))
        here = [n for n in nodes if _pinned_elsewhere(kept, n) is None] if kept else nodes
        requests: dict[int, PodRequest] = {}  # by GPU count: one per count for all the nodes
        best = self._verdicts.scan(
            shape,
            here,
            usage,
            lambda node: self._fit(pod.key, fresh, node, usage, requests),
            listed=listed if here is nodes else None,
            changes=changes,
        )
        if best is not None:
            return self._decision(kept, fresh, best[0], best[1].picks)
        if len(self._nowhere) >= 10_000:
            self._nowhere.clear()
        self._nowhere.add(nowhere)  # fits nowhere: exact while devices, usage stay
        if not explain:
            return PodDecision(node=None, reasons=(f"no node fits the claims of pod {pod.key}",))
        if shown is not None and not kept:
            return self._nearest(pod, nodes, usage, (shape, listed), shown)
        decision = self._explain(pod, nodes, usage)
        if shown is None or len(decision.reasons) <= shown:
            return decision
        unshown = len(decision.reasons) - shown
        return PodDecision(node=None, reasons=decision.reasons[:shown], unshown=unshown)

    def _note_reads(self, fresh: Sequence[ResourceClaim]) -> None:
        """What the claims' selectors and constraints may read of a device's attributes is
        read (before any node is classed for them)."""
        if len(self._noted) >= _NOTED_LIMIT:
            self._noted.clear()
        reads = self._reads
        for claim in fresh:
            for request in claim.spec.requests:
                for alt in request.alternatives:
                    for expression in alt.selectors:
                        reads.note_expression(expression)
            for constraint in claim.spec.constraints:
                for name in (constraint.match_attribute, constraint.distinct_attribute):
                    if name:
                        reads.note_name(name)

    def _fit(
        self,
        pod: str,
        fresh: Sequence[ResourceClaim],
        node: ClaimNode,
        usage: Usage,
        requests: dict[int, PodRequest],
    ) -> Fit:
        found = self._solve(pod, fresh, node, usage)
        if isinstance(found, Miss):
            return NO_FIT
        gpus = whole_gpus(node, found)
        state = node.state
        if state is None:
            return Fit(tuple(found), (False, fullness(node, found, usage)))
        if found and not gpus:  # devices that are no whole GPU of the node's topology
            return Fit(tuple(found), self._device_rank(node, found, usage))
        request = requests.get(len(gpus))
        if request is None:
            request = requests[len(gpus)] = PodRequest(key=pod, gpus=len(gpus))
        score = self.scoring.total(request, state, Assignment(node=node.name, gpus=gpus))
        return Fit(tuple(found), (self.scoring.prefer_used_nodes and state.gpu_used(), score))

    def _device_rank(
        self, node: ClaimNode, found: Sequence[Pick], usage: Usage
    ) -> tuple[bool, float]:
        """How a node ranks for picks that hold no whole GPU of its topology (a foreign
        driver's GPUs on a node without NodeResourceTopology, MIG devices, shares): by the share
        of its devices in use once they are taken, weighted as the scores that pack GPUs weigh
        them, used nodes first when the scores prefer them. Scored as a pod without GPUs, such a
        pod spread (the shipped scores spread those)."""
        full = fullness(node, found, usage)
        used = False
        if self.scoring.prefer_used_nodes:
            state = node.state
            used = (state is not None and state.gpu_used()) or any(
                d.id in usage.exclusive or d.id in usage.consumed for d in node.devices.devices
            )
        return used, self._binpack_weight * full

    def _nearest(
        self,
        pod: PodClaims,
        nodes: Sequence[ClaimNode],
        usage: Usage,
        key: tuple[object, int],
        shown: int,
    ) -> PodDecision:
        """The nearest `shown` misses (as `_explain` orders them) and how many others there
        are, after a `place` that found no node. Like nodes miss alike (the same rank: what the
        misses read is what their class says), so the nearest nodes are found from one miss
        per class (kept for the shape: a class's miss is the same wherever it is met), and kept
        for the shape while the nodes' classes stay: a pod refused again costs a miss per node
        shown, not per node; after a change, a miss per class not met before."""
        found = self._verdicts.classes(key[1])
        if found is None:  # no classes kept: every node's miss
            decision = self._explain(pod, nodes, usage)
            unshown = max(0, len(decision.reasons) - shown)
            return PodDecision(node=None, reasons=decision.reasons[:shown], unshown=unshown)
        classes, stamp = found
        kept = self._nearest_nodes.get((*key, stamp, shown))
        if kept is None:
            ranks = self._miss_ranks.get(key[0])
            if ranks is None or len(ranks) >= _NEAREST_KEPT:
                if len(self._miss_ranks) >= _NEAREST_KEPT:
                    self._miss_ranks.clear()
                ranks = self._miss_ranks[key[0]] = {}
            missed: list[tuple[tuple[int, int], int]] = []  # (rank, position), in node order
            for at, (node, number) in enumerate(zip(nodes, classes, strict=True)):
                if number not in ranks:
                    answer = self.on_node(pod, node, usage)
                    ranks[number] = answer.rank if isinstance(answer, Miss) else None
                rank = ranks[number]
                if rank is not None:
                    missed.append((rank, at))
            nearest = nlargest(shown, missed, key=_rank_of)  # ties: in node order
            kept = (tuple(at for _rank, at in nearest), len(missed))
            if len(self._nearest_nodes) >= _NEAREST_KEPT:
                self._nearest_nodes.clear()
            self._nearest_nodes[(*key, stamp, shown)] = kept
        texts = []
        for at in kept[0]:
            answer = self.on_node(pod, nodes[at], usage)
            if isinstance(answer, Miss):
                texts.append(answer.text)
        return PodDecision(
            node=None, reasons=tuple(texts) or ("no nodes",), unshown=kept[1] - len(kept[0])
        )

    def _explain(self, pod: PodClaims, nodes: Sequence[ClaimNode], usage: Usage) -> PodDecision:
        misses = []
        for node in nodes:
            answer = self.on_node(pod, node, usage)
            if isinstance(answer, Miss):
                misses.append(answer)
        ordered = sorted(misses, key=lambda m: m.rank, reverse=True)
        return PodDecision(node=None, reasons=tuple(m.text for m in ordered) or ("no nodes",))

    def place_gang(
        self,
        pods: Sequence[PodClaims],
        nodes: Sequence[ClaimNode],
        usage: Usage,
        *,
        domains: Mapping[str, Sequence[ClaimNode]] | None = None,
        changes: NodeChanges | None = None,
        shown: int | None = None,
    ) -> GangDecision:
        """Every pod placed with the devices the earlier ones took counted, or none. With
        `domains` (a required topology level: its values and their nodes; `nodes` unused) the
        whole gang in one domain: of those where it fits, the one with the fewest free devices
        (binpack), ties to the lowest value; else every domain's first reason. `changes` and
        `shown` (for the pod that does not fit): as `place`'s."""
        if domains is None:
            return self._gang_on(pods, nodes, usage, changes, shown)
        fits, reasons = [], []
        for value in sorted(domains):
            decision = self._gang_on(pods, domains[value], usage, changes, shown)
            if decision.placed:
                free = sum(usage.is_free(d) for n in domains[value] for d in n.devices.devices)
                fits.append((free, value, decision))
            else:
                reasons.append(f"domain {value}: {decision.reasons[0]}")
        if fits:
            return min(fits, key=lambda f: (f[0], f[1]))[2]
        return GangDecision(reasons=tuple(reasons) or ("no topology domain",))

    def _gang_on(
        self,
        pods: Sequence[PodClaims],
        nodes: Sequence[ClaimNode],
        usage: Usage,
        changes: NodeChanges | None,
        shown: int | None,
    ) -> GangDecision:
        """The pods largest first (`_devices_asked`; ties in their order), as placement places
        a gang: a big pod placed after small ones may find every node partly taken where the
        other order fits all. The decisions come back in `pods`' order."""
        usage = usage.copy()
        allocated: dict[ClaimKey, ResourceClaim] = {}
        decisions: dict[int, PodDecision] = {}
        for at in sorted(range(len(pods)), key=lambda i: -_devices_asked(pods[i])):
            pod = pods[at]
            claims = tuple(allocated.get(c.key, c) for c in pod.claims)
            decision = self.place(
                replace(pod, claims=claims), nodes, usage, changes=changes, shown=shown
            )
            if decision.node is None:
                first = decision.reasons[0] if decision.reasons else "no node"
                return GangDecision(
                    reasons=(f"pod {pod.key}: {first}", *decision.reasons[1:]),
                    unshown=decision.unshown,
                )
            for made in decision.claims:
                if made.new:
                    usage.add(made.allocation.devices)
                    allocated[made.claim.key] = replace(made.claim, allocation=made.allocation)
            decisions[at] = decision
        return GangDecision(pods=tuple(decisions[i] for i in range(len(pods))))


def _split(claims: Sequence[ResourceClaim]) -> tuple[list[ResourceClaim], list[ResourceClaim]]:
    """(allocated already, to allocate), each claim once."""
    if len(claims) == 1:  # most pods: one claim
        return ([], [claims[0]]) if claims[0].allocation is None else ([claims[0]], [])
    seen: dict[ClaimKey, ResourceClaim] = {}
    for claim in claims:
        seen.setdefault(claim.key, claim)
    kept = [c for c in seen.values() if c.allocation is not None]
    return kept, [c for c in seen.values() if c.allocation is None]


def _group_by(constraints: Sequence[Constraint], request: str) -> str | None:
    """The attribute the first `matchAttribute` constraint over `request` groups its devices by."""
    for con in constraints:
        if con.match_attribute and applies(con, request):
            return con.match_attribute
    return None


def _pinned_elsewhere(kept: Sequence[ResourceClaim], node: ClaimNode) -> Miss | None:
    """Why a claim allocated already may not be used on `node` (its allocation's nodeSelector)."""
    for claim in kept:
        allocation = claim.allocation
        if allocation is None or reaches(allocation, node.name, node.labels):
            continue
        if allocation.node is not None:
            return Miss(f"claim {claim.key} is allocated on node {allocation.node}", (0, 0))
        return Miss(f"claim {claim.key} is allocated for other nodes (its nodeSelector)", (0, 0))
    return None


def _incomplete(
    claim: ClaimKey, alt: Alternative, found: Candidates, node: ClaimNode, where: str
) -> Miss | None:
    """An `All` request cannot be served while a pool it could use is being republished."""
    pools = node.devices.incomplete_pools
    if alt.mode is not AllocationMode.ALL or not pools:
        return None
    for cand in found.usable:
        dev = cand.device
        if (dev.id.driver, dev.id.pool) in pools:
            text = f"claim {claim} request {alt.name}: pool {dev.id.pool} is incomplete {where}"
            return Miss(text, (80, 0))
    return None


_EVERY_DEVICE = 1 << 20
"""What an `All` request counts as in `_devices_asked`: more than any count."""


def _devices_asked(pod: PodClaims) -> int:
    """How many devices the pod's claims not yet allocated ask (each request's first
    alternative; `All` counts as more than any count): the order a gang is placed in."""
    total = 0
    for claim in pod.claims:
        if claim.allocation is not None:
            continue
        for request in claim.spec.requests:
            first = request.alternatives[0] if request.alternatives else None
            if first is None:
                continue
            total += _EVERY_DEVICE if first.mode is AllocationMode.ALL else first.count
    return total
