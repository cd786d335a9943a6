"""Pods with ResourceClaims decided on the live cache and charged there until bound.

Placement filters the nodes for each pod's other resources, the claim allocator chooses among
them (a gang's pods all together or none, within one domain of a required topology level), and
each pod is assumed with the GPUs its claims take (CLAIMS.md steps 4 and 6), so binpack,
topology and queues see them; the shares its claims take of shared GPUs are charged to its queue
(`PodInfo.claim_shares`), not to placement (a DRA GPU is never the device plugin's, DESIGN §14).
`ClaimCharges` keeps each assumed pod's `ClaimPlacement` until its bind ends: `bound` drops it,
`forget` undoes the assumption (the pod's request as read again, its claims' allocations free
again). A refusal (`ClaimRefusal`) is the message the pod waits with: the claims' reasons
(claim, request and nearest miss), or placement's when no node fits the rest; then more room
would help, and `room` gives the victim search the pod's claims (`ClaimRoom`; a gang's,
`gang_room`).
Called with `cache.lock` held.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from functools import partial
from typing import NamedTuple
from weakref import ref

from agent.objkey import ObjectKey
from scheduler.claims.charge import ClaimShare
from scheduler.claims.decision import ClaimNode, PodClaims, PodDecision
from scheduler.claims.usage import Usage
from scheduler.placement import Assignment, Placer, PodRequest, Snapshot, TopologyConstraint
from scheduler.preemption import Claimed
from scheduler.quota import request_amounts
from scheduler.runtime.binding.claimbind import GroupRef
from scheduler.runtime.claims.book import ClaimBook, made_key
from scheduler.runtime.claims.podrefs import claim_refs
from scheduler.runtime.claims.room import ClaimRoom, GangClaimRoom, Leaving, Pods, TreeClaimRoom
from scheduler.runtime.cluster.cache import ClusterCache
from scheduler.runtime.cluster.groups import GroupInfo
from scheduler.runtime.cluster.podinfo import PodInfo

__all__ = ["ClaimCharges", "ClaimPlacement", "ClaimRefusal"]

_SHOWN = 3  # the nearest misses a waiting pod's message names
_LISTS_KEPT = 8  # node lists of claim views kept (a pod's feasible nodes, every node, ...)

Admit = Callable[[Sequence[PodInfo]], str | None]
"""Why a queue holds pods back as they ask now (None: admitted)."""


class _Built(NamedTuple):
    """What a list of claim views was built from: the snapshot, its nodes' version and the
    book's views' version."""

    snapshot: Callable[[], Snapshot | None]  # not kept alive by it
    nodes_version: int
    views_version: tuple[int, int]

    def holds(self, now: _Built) -> bool:
        """Whether views built then are those `now` gives."""
        return self.snapshot() is now.snapshot() and self[1:] == now[1:]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimRefusal:
    """Why a pod (or gang) with claims waits; `room`: more room would let it start (no node
    fits its claims or the rest of it); `quota`: a max on its queue's path refuses the GPUs its
    claims take. Either way it may preempt; not while it waits for a claim."""

    message: str
    room: bool = False
    quota: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimPlacement:
    """`request`: the pod's own, with the GPUs its claims take (`original`: as read);
    `shares`: the shares of shared GPUs its claims hold (charged to its queue)."""

    original: PodRequest
    request: PodRequest
    assignment: Assignment
    decision: PodDecision
    shares: tuple[ClaimShare, ...] = ()


class ClaimCharges:
    def __init__(self, book: ClaimBook, cache: ClusterCache, admit: Admit | None = None) -> None:
        """`admit`: why a pod's (or a gang's) queue holds it back once it asks for the GPUs its
        claims take (None: admitted)."""
        self._book, self._cache, self._admit = book, cache, admit
        self._held: dict[ObjectKey, ClaimPlacement] = {}
        self._lists: dict[tuple[str, ...], tuple[_Built, tuple[ClaimNode, ...]]] = {}
        self._given: dict[int, tuple[tuple[str, ...], _Built, tuple[ClaimNode, ...]]] = {}
        """By the id of a tuple of names given (held, so the id stays its own): its nodes."""
        self._nothing = Usage()  # nodes emptied of every claim (`claimed`): never added to

    def place(
        self,
        placer: Placer,
        info: PodInfo,
        excluded: AbstractSet[str] | None,
    ) -> ClaimPlacement | ClaimRefusal:
        """Decide `info` and assume it; the placement, or why it waits."""
        claims = self._pod_claims(info)
        if isinstance(claims, str):
            return ClaimRefusal(message=claims)
        nodes = self._nodes(placer, [info], excluded)
        if isinstance(nodes, str):
            return ClaimRefusal(message=nodes, room=True)
        usage, changes = self._book.usage(), self._cache.snapshot
        decision = self._book.allocator.place(claims, nodes, usage, changes=changes, shown=_SHOWN)
        if decision.node is None:
            message = self._refusal(decision.reasons, decision.unshown)
            return ClaimRefusal(message=message, room=True)
        placed = self._charged(placer, info, decision)
        if isinstance(placed, str):
            return ClaimRefusal(message=placed, room=True)
        why = _refused([(info, placed)], self._admit)
        if why is not None:
            return ClaimRefusal(message=why, quota=True)
        self._hold(info, placed)
        return placed

    # -- a pod read two ways: as the device plugin's nodes read it, and with a made claim ----
    def first_form(self, info: PodInfo) -> PodInfo:
        """The form of a waiting pod that asks a resource a DeviceClass maps to try first,
        made the cache's entry: as it is where some node offers a resource its made claim asks
        (the device plugin's nodes), else with its made claim (`PodInfo.dra_form`); `info`
        itself for any other pod, and for one assumed or bound."""
        if info.node is not None or (info.dra_form is None and info.plugin_form is None):
            return info
        plugin = info.plugin_form or info
        dra = plugin.dra_form
        if dra is None:
            return info
        return self._use(plugin if self.offering(dra) else dra)

    def place_dra_form(
        self, placer: Placer, info: PodInfo, excluded: AbstractSet[str] | None
    ) -> tuple[PodInfo, ClaimPlacement] | ClaimRefusal | None:
        """`info`, which found no node as the device plugin's nodes read it, placed with its
        made claim on the nodes that do not offer the resources it asks (the form placed, and
        where); None: it has no such form. Refused, the cache's entry is `info` again."""
        dra = info.dra_form
        if dra is None or info.node is not None:
            return None
        off = _joined(excluded, self.offering(dra))
        placed = self.place(placer, self._use(dra), off)
        if isinstance(placed, ClaimRefusal):
            self._use(info)
            return replace(placed, message=self._by_claims(dra, placed.message))
        return dra, placed

    def place_gang_dra_forms(
        self,
        placer: Placer,
        infos: Sequence[PodInfo],
        excluded: AbstractSet[str] | None,
        topology: TopologyConstraint | None,
    ) -> list[tuple[PodInfo, ClaimPlacement]] | ClaimRefusal | None:
        """`place_dra_form` for a gang's pods, together; None: some has no such form."""
        forms = [i.dra_form for i in infos if i.node is None]
        dras = [f for f in forms if f is not None]
        if not infos or len(dras) != len(infos):
            return None
        off = frozenset(excluded or ())
        for dra in dras:
            off |= self.offering(dra)
        placed = self.place_gang(placer, [self._use(d) for d in dras], off or None, topology)
        if isinstance(placed, ClaimRefusal):
            for info in infos:
                self._use(info)
            return replace(placed, message=self._by_claims(dras[0], placed.message))
        return list(zip(dras, placed, strict=True))

    def offering(self, dra: PodInfo) -> frozenset[str]:
        """The nodes that offer a resource the made claim of `dra` asks (none: no made claim)."""
        made = self._book.made(made_key(dra.namespace, dra.name))
        return frozenset() if made is None else self._cache.offering_any(made.ask.resources)

    def _by_claims(self, dra: PodInfo, message: str) -> str:
        made = self._book.made(made_key(dra.namespace, dra.name))
        names = ", ".join(sorted(made.ask.resources)) if made is not None else "its resources"
        return f"with a claim for {names}, on the nodes that do not offer it: {message}"

    def _use(self, form: PodInfo) -> PodInfo:
        """`form` made the cache's entry for its pod (one waiting pod's other form)."""
        if self._cache.pods.get(form.key) is not form:
            self._cache.upsert_pod(form.obj, form)
        return form

    def room(self, info: PodInfo) -> ClaimRoom | None:
        """`info`'s claims as a victim search judges them (None: it waits for its claims)."""
        claims = self._book.pod_claims(info.key, info.obj)
        if isinstance(claims, str):
            return None
        return ClaimRoom(self._book, claims, self._claim_node, self._leaving())

    def claimed(self, infos: Sequence[PodInfo]) -> Claimed:
        """What the claims of `infos` (a pod, or a gang's pending pods) would take beyond the
        pods' requests, as a trial allocation on the nodes emptied of every claim takes them:
        charged to their queue (their whole GPUs and shares) and whole GPUs on nodes; nothing
        when a pod waits for a claim or they fit on no node even so."""
        pods: list[PodClaims] = []
        for info in infos:
            claims = self._pod_claims(info)
            if isinstance(claims, str):
                return Claimed()
            pods.append(claims)
        snapshot, trial = self._cache.snapshot, self._book.trial
        nodes = self._claim_nodes(snapshot.names())
        decisions: tuple[PodDecision, ...]
        if len(pods) == 1:  # the one empty usage, never changed: its classes are kept
            one = trial.place(pods[0], nodes, self._nothing, explain=False, changes=snapshot)
            decisions = (one,) if one.node is not None else ()
        else:
            decision = trial.place_gang(pods, nodes, self._nothing, changes=snapshot)
            decisions = decision.pods if decision.placed else ()
        if not decisions:
            return Claimed()
        extra: dict[str, int] = {}
        for info, made in zip(infos, decisions, strict=True):
            request, charge = info.request, self._book.decision_charge(made)
            shares = charge.shares
            # a DRA GPU is never the device plugin's; held though the node has no GPU map
            gpus = request.gpus + max(len(made.gpus), len(charge.gpus))
            charged = request_amounts(replace(request, gpus=gpus), claimed=shares)
            asked = request_amounts(request)
            for name, qty in charged.items():
                if qty > asked.get(name, 0):
                    extra[name] = extra.get(name, 0) + qty - asked.get(name, 0)
        pairs = zip(infos, decisions, strict=True)
        return Claimed(amounts=extra, gpus={str(i.key): len(m.gpus) for i, m in pairs})

    def gang_room(
        self, infos: Sequence[PodInfo], topology: TopologyConstraint | None
    ) -> GangClaimRoom | None:
        """A gang's pending pods' claims as a victim search judges them, together, within one
        domain of a required `topology` level (None: a pod waits for its claims)."""
        pods: list[PodClaims] = []
        for info in infos:
            claims = self._pod_claims(info)
            if isinstance(claims, str):
                return None
            pods.append(claims)
        domain = None
        if topology is not None and topology.required:
            domain = partial(self._label, topology.label)
        return GangClaimRoom(self._book, pods, self._claim_node, self._leaving(), domain)

    def tree_room(self, infos: Sequence[PodInfo]) -> TreeClaimRoom | None:
        """A tree's pending pods' claims as a victim search judges them, PodGroup by PodGroup
        as its walk places the groups (None: a pod waits for its claims)."""
        pods: dict[str, PodClaims] = {}
        for info in infos:
            claims = self._pod_claims(info)
            if isinstance(claims, str):
                return None
            pods[info.request.key] = claims
        return TreeClaimRoom(self._book, pods, self._claim_node, self._leaving())

    def _leaving(self) -> Leaving:
        """What victims' claims free (the pods read when a search first asks)."""
        return Leaving(self._book, self._pods)

    def _pods(self) -> Pods:
        """The pods that may be victims, by key, and the UIDs of those alive."""
        pods = self._cache.pods.values()
        uids = {str(p.key): p.uid for p in pods if p.counted}
        alive = {p.uid for p in pods if not p.terminal}  # a finished pod's claims are let go
        alive.update(g.uid for g in self._cache.groups.values())  # claims of a PodGroup
        return uids, alive

    def _label(self, label: str, node: str) -> str | None:
        info = self._cache.nodes.get(node)
        return None if info is None else info.labels.get(label)

    def place_gang(
        self,
        placer: Placer,
        infos: Sequence[PodInfo],
        excluded: AbstractSet[str] | None,
        topology: TopologyConstraint | None,
    ) -> list[ClaimPlacement] | ClaimRefusal:
        """Decide a gang's pods together and assume them all, or none; why not."""
        pods: list[PodClaims] = []
        for info in infos:
            claims = self._pod_claims(info)
            if isinstance(claims, str):
                return ClaimRefusal(message=f"pod {info.key}: {claims}")
            pods.append(claims)
        nodes = self._nodes(placer, infos, excluded)
        if isinstance(nodes, str):
            return ClaimRefusal(message=nodes, room=True)
        usage, allocator, changes = self._book.usage(), self._book.allocator, self._cache.snapshot
        domains = None if topology is None else self._domains(nodes, topology.label)
        decision = allocator.place_gang(
            pods, nodes, usage, domains=domains, changes=changes, shown=_SHOWN
        )
        if not decision.placed and domains is not None and topology and not topology.required:
            # preferred: one domain if any
            decision = allocator.place_gang(pods, nodes, usage, changes=changes, shown=_SHOWN)
        if not decision.placed:
            message = self._refusal(decision.reasons, decision.unshown)
            return ClaimRefusal(message=message, room=True)
        placed: list[ClaimPlacement] = []
        for info, made in zip(infos, decision.pods, strict=True):
            one = self._charged(placer, info, made)  # on the snapshot the earlier ones took
            if isinstance(one, str):
                for done in infos[: len(placed)]:
                    self.forget(done.key)
                return ClaimRefusal(message=one, room=True)
            self._hold(info, one)
            placed.append(one)
        for done in infos:  # asked for together, as they are charged: not charged twice
            self.forget(done.key)
        why = _refused(list(zip(infos, placed, strict=True)), self._admit)
        if why is not None:
            return ClaimRefusal(message=why, quota=True)
        for info, one in zip(infos, placed, strict=True):
            self._hold(info, one)
        return placed

    def group_of(self, info: PodInfo) -> GroupInfo | None:
        """`info`'s PodGroup (None: none, or not seen yet): its claims are the group's."""
        return None if info.group_key is None else self._cache.groups.get(info.group_key)

    def group_ref(self, info: PodInfo) -> GroupRef | None:
        """`info`'s PodGroup as the consumer of its group claims (None: it uses none)."""
        group = self.group_of(info)
        if group is None or not group.claims:
            return None
        grouped = claim_refs(info.obj, group.claims).for_group
        return GroupRef(name=group.name, uid=group.uid, claims=grouped) if grouped else None

    def _pod_claims(self, info: PodInfo) -> PodClaims | str:
        return self._book.pod_claims(info.key, info.obj, self.group_of(info))

    def held(self, key: ObjectKey) -> ClaimPlacement | None:
        """The placement of `key`, assumed and not yet bound (None: not a pod with claims)."""
        return self._held.get(key)

    def bound(self, key: ObjectKey) -> None:
        self._held.pop(key, None)

    def forget(self, key: ObjectKey) -> bool:
        """Undo the assumption of `key` (`ClusterCache.forget`), its claims' allocations too."""
        placed = self._held.pop(key, None)
        if placed is not None:
            self._book.forget(placed.decision)
            current = self._cache.pods.get(key)
            if current is not None and current.request is placed.request:
                current.request = placed.original  # before `forget` charges it again
                current.claim_shares = ()
        return self._cache.forget(key)

    def _charged(
        self, placer: Placer, info: PodInfo, decision: PodDecision
    ) -> ClaimPlacement | str:
        """What `info` is charged with `decision`: its devices on the node, the claims' GPUs."""
        node = decision.node
        base = None if node is None else placer.assignment_on(info.request, node)
        if node is None or base is None:
            return f"pod {info.key} no longer fits node {node}"
        gpus = tuple(sorted({*base.gpus, *decision.gpus}))
        charge = self._book.decision_charge(decision)
        # the whole GPUs its claims hold count though the node has no GPU map (a foreign
        # driver's node without NRT), as they will once it is bound (`Intake._claims_charged`)
        count = max(len(gpus), info.request.gpus + len(charge.gpus))
        return ClaimPlacement(
            original=info.request,
            request=replace(info.request, gpus=count),
            assignment=replace(base, gpus=gpus),
            decision=decision,
            shares=charge.shares,
        )

    def _hold(self, info: PodInfo, placed: ClaimPlacement) -> None:
        """Assume `info` as `placed` says (its claims' allocations held too)."""
        decision = placed.decision
        info.request, info.claim_shares = placed.request, placed.shares
        self._cache.assume(info.key, placed.assignment)
        self._book.assume(decision)
        self._held[info.key] = placed

    def _nodes(
        self, placer: Placer, infos: Sequence[PodInfo], excluded: AbstractSet[str] | None
    ) -> tuple[ClaimNode, ...] | str:
        """The nodes every one of `infos` fits for its other resources, as claims see them."""
        names: Sequence[str] | None = None
        for info in infos:
            fits: Sequence[str] = placer.feasible(info.request)  # sorted
            if excluded:
                fits = [n for n in fits if n not in excluded]
            if not fits:
                return placer.decide(info.request, excluded=excluded).message()
            if names is not None:
                kept = set(fits)
                fits = [n for n in names if n in kept]
            names = fits
        if not names:
            return "no node fits every member's other resources"
        return self._claim_nodes(names)

    def _claim_nodes(self, names: Sequence[str]) -> tuple[ClaimNode, ...]:
        """The nodes named (sorted), as claims see them: the tuple given before for the same
        names while nothing they are built from changed (the book's slices, and the snapshot's
        nodes, with which their labels, inventories and states change), so that a pod costs
        no view per node and the allocator meets the same tuple again (known by identity).
        A tuple of names given before (the placer's unchanged `feasible`, the snapshot's
        `names`) is known by identity too: no pass over its names, which at 20,000 nodes cost
        a pod more than its decision."""
        snapshot = self._cache.snapshot
        built = _Built(ref(snapshot), snapshot.nodes_version, self._book.views_version)
        given = self._given.get(id(names))
        if given is not None and given[0] is names and given[1].holds(built):
            return given[2]
        key = tuple(names)
        found = self._lists.get(key)
        if found is not None and found[0].holds(built):
            nodes = found[1]
        else:
            if len(self._lists) >= _LISTS_KEPT:
                self._lists.clear()
            nodes = tuple(self._claim_node(name) for name in key)
            self._lists[key] = (built, nodes)
        if key is names:  # a tuple was given
            if len(self._given) >= _LISTS_KEPT:
                self._given.clear()
            self._given[id(key)] = (key, built, nodes)
        return nodes

    def _domains(self, nodes: Sequence[ClaimNode], label: str) -> Mapping[str, list[ClaimNode]]:
        out: dict[str, list[ClaimNode]] = {}
        for node in nodes:
            value = self._label(label, node.name)
            if value is not None:
                out.setdefault(value, []).append(node)
        return out

    def _refusal(self, reasons: Sequence[str], unshown: int) -> str:
        """The nearest misses shown, and how many others there are (`unshown` beyond those
        `reasons` gives)."""
        shown = "; ".join(reasons[:_SHOWN])
        more = len(reasons) - min(len(reasons), _SHOWN) + unshown
        tail = f" (and {more} more)" if more > 0 else ""
        total = len(self._cache.nodes)
        return f"0/{total} nodes are available: claims do not fit: {shown}{tail}"

    def _claim_node(self, name: str) -> ClaimNode:
        cache = self._cache
        node, nrt = cache.nodes.get(name), cache.nrts.get(name)
        return self._book.node(
            name,
            node.labels if node is not None else {},
            None if nrt is None else nrt.inventory,
            cache.snapshot.node(name) if name in cache.snapshot else None,
        )


def _joined(excluded: AbstractSet[str] | None, more: frozenset[str]) -> AbstractSet[str] | None:
    if not more:
        return excluded
    return more if not excluded else frozenset(excluded) | more


def _refused(placed: Sequence[tuple[PodInfo, ClaimPlacement]], admit: Admit | None) -> str | None:
    """`admit` asked with each pod's request as its claims make it (put back after)."""
    if admit is None:
        return None
    for info, one in placed:
        info.request, info.claim_shares = one.request, one.shares
    try:
        return admit([info for info, _ in placed])
    finally:
        for info, one in placed:
            info.request, info.claim_shares = one.original, ()
