"""Gang scheduling over PodGroups, ours (`scheduling.x-k8s.io/v1alpha1`) and Kubernetes' own
(`scheduling.k8s.io`, read by `upstream`; `basic` ones place their members one by one): attempts,
timeouts, status.

A gang unit is tried when one of its members is pending. It waits (nothing assumed, nothing
reserved) until bound + pending members reach `minMember`; then every pending member is placed
with `place_gang` on the live snapshot, and only if all fit are they assumed and bound. Once
`minMember` are bound, later members are placed one by one. Binds that keep failing are retried
(the loop re-queues the gang) until `scheduleTimeoutSeconds` after the first bind; then the group
gets the Warning event `GangPartiallyBound` and phase `Failed`, and is not tried again until it
is re-created.

Members lost after they were bound (their node deleted or shut down, a drain, a failure:
`gangstatus`) that leave fewer than `minMember` bound get the Warning event `MembersLost`, the
condition `MembersLost` and phase `Unknown`. Their replacements are a gang again: nothing is
placed until bound + pending reach `minMember`, then all pending members together, on one
snapshot, under a fresh `scheduleTimeoutSeconds`; once `minMember` are bound the condition turns
False (`MembersReplaced`, with a Normal event).

A tree of CompositePodGroups (1.37 alpha, `composite`) is one gang unit, keyed by its root:
its members are every PodGroup's pods below it; it waits until the pods that exist could satisfy
the root, then places every pending pod together (when no group below the root has a topology
constraint), else group by group in kube's order, each group in its own domain, kept only if the
root is satisfied, or none; once the root is satisfied, each PodGroup's later pods are placed as
its own gang, in its groups' domains. A tree that cannot start preempts for room for the fewest
pods that satisfy its root (`Tree.minimum`), as a gang for its minimum; with a topology
constraint below its root the search places that minimum by the same walk (`TreeDemand`), the
ResourceClaims of its pods with each PodGroup (`ClaimCharges.tree_room`). A PodGroup whose
parents reach no root waits, naming why.

An upstream gang (a PodGroup, or a tree) whose pods disagree as kube-scheduler will not try them
(`upstream.members_disagree`: two schedulerNames; on 1.37 also a priority not the root group's,
two preemption policies) is not tried either, its PodGroups' condition `SchedulerError`, in
kube's words. An upstream PodGroup gets only the condition kube-scheduler writes
(`upstream.status_patch`).
Status written to our PodGroup: `phase` (Pending, Scheduling, Scheduled, Running, Finished,
Failed, Unknown), `scheduled`, `running`, `succeeded`, `failed`, `scheduleStartTime` and, once a
member was lost, `conditions` (see `gangstatus.group_status`). A Failed member no longer counts as
bound, neither in the status nor when the gang's placement counts its bound members.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from agent.objkey import DEFAULT_NAMESPACE, ObjectKey, key_of
from scheduler.kubeapi.client import now_rfc3339
from scheduler.placement import (
    Assignment,
    Placer,
    PodRequest,
    Snapshot,
    TopologyConstraint,
    Tree,
    excluding_outside,
    member_domains,
    place_gang,
    place_most_in_one_domain,
    place_subtree,
)
from scheduler.preemption import TreeDemand
from scheduler.runtime.claims.placing import ClaimCharges, ClaimRefusal
from scheduler.runtime.claims.podrefs import has_claims
from scheduler.runtime.cluster.cache import ClusterCache, GroupInfo
from scheduler.runtime.cluster.composite import COMPOSITE_MARK, composite_key
from scheduler.runtime.cluster.groups import gang_priority, group_key, not_found
from scheduler.runtime.cluster.podinfo import PodInfo
from scheduler.runtime.cluster.upstream import members_disagree, status_patch
from scheduler.runtime.gangs.gangstatus import (
    CONDITION_LOST,
    REASON_REPLACED,
    GangProgress,
    Loss,
    LostMembers,
    bound_count,
    group_status,
    holds_place,
)
from scheduler.runtime.metrics import SchedulerMetrics
from scheduler.runtime.pending import SchedulingQueue, UnitKey, UnitKind
from scheduler.runtime.preempting.nominating import OtherForm, Preemption
from scheduler.runtime.queues.queueing import CATEGORY as QUEUE_CATEGORY
from scheduler.runtime.queues.queueing import QueueGate
from scheduler.runtime.reporter import Reporter

log = logging.getLogger(__name__)
INVALID = "invalid"  # the category of a gang this scheduler will not try as it stands
_MODEL_TRIES = 3  # placements of a gang over a model's budget, each without the extra nodes

Binds = list[tuple[PodInfo, Assignment]]
Marker = Callable[[list[PodInfo], str, str], None]
Precheck = Callable[[PodInfo], "tuple[str, str] | None"]
LivePlacer = Callable[[], Placer]
REASON_PARTIAL = "GangPartiallyBound"
REASON_LOST = CONDITION_LOST  # the Event's reason is the condition's type


@dataclass(slots=True)
class GangState:
    uid: str
    first_seen: float
    bind_started: float | None = None
    start_stamp: str = ""
    bound_keys: set[ObjectKey] = field(default_factory=set)
    complete: bool = False
    failed: str = ""
    waiting: str = ""  # why the gang last waited (an upstream group's condition says it)
    refused: bool = False  # why is kube-scheduler's SchedulerError (`members_disagree`)
    losses: LostMembers = field(default_factory=LostMembers)


class GangTracker:
    """Gang bookkeeping; every method runs with `cache.lock` held by the caller or itself."""

    def __init__(
        self,
        cache: ClusterCache,
        queue: SchedulingQueue,
        reporter: Reporter,
        metrics: SchedulerMetrics,
        clock: Callable[[], float],
        mark: Marker,
        precheck: Precheck,
        may_preempt: Callable[[PodInfo, str], bool],
        live_placer: LivePlacer,
        quota: QueueGate,
        preemption: Preemption,
        charges: ClaimCharges,
    ) -> None:
        """`live_placer`: the Placer bound to the cache's live snapshot (called under the lock);
        `quota`: the gang's queue admits its pending members (summed) before they are placed;
        `preemption`: what a gang that cannot start may evict, and the nodes held for others."""
        self._cache, self._queue, self._reporter = cache, queue, reporter
        self._metrics, self._clock, self._mark, self._precheck = metrics, clock, mark, precheck
        self._may_preempt = may_preempt
        self._live_placer, self._quota, self._preemption = live_placer, quota, preemption
        self._states: dict[ObjectKey, GangState] = {}
        self._charges = charges  # members with ResourceClaims: decided and assumed together
        self._claim_refusals: dict[ObjectKey, ClaimRefusal] = {}  # why, a gang with claims

    # -- intake ----------------------------------------------------------------------------
    def on_group(self, etype: str, obj: Mapping[str, Any], *, upstream: bool = False) -> None:
        """A PodGroup event: ours, or with `upstream` a scheduling.k8s.io one."""
        meta = obj.get("metadata") or {}
        namespace = str(meta.get("namespace") or DEFAULT_NAMESPACE)
        gkey = group_key(namespace, str(meta.get("name") or ""), upstream=upstream)
        if etype == "DELETED":
            root = self._cache.unit_of(gkey)
            self._cache.delete_group(gkey)
            self._states.pop(gkey, None)
            self._claim_refusals.pop(gkey, None)
            if root != gkey:  # the tree it was in is tried without it
                self._activate(root)
            return
        old = self._cache.groups.get(gkey)
        group = self._cache.upsert_group(obj, upstream=upstream)
        if group.error:
            self._reporter.warn(obj, "PodGroup", "InvalidPodGroup", group.error)
        if old is None or _group_spec(old) != _group_spec(group):
            self._activate(gkey)
        self.report(gkey)

    def on_workload(self, etype: str, obj: Mapping[str, Any]) -> None:
        """A 1.35 Workload event: the gangs of its pod groups are read again from it (deleted:
        their members wait for it, as kube-scheduler 1.35's do)."""
        if etype == "DELETED":
            for gkey in self._cache.delete_workload(key_of(obj)):
                self._states.pop(gkey, None)
                self._claim_refusals.pop(gkey, None)
                self._activate(gkey)
            return
        before = {k: self._cache.groups.get(k) for k in self._cache.workload_gangs(key_of(obj))}
        for group in self._cache.upsert_workload(obj):
            if group.error:
                self._reporter.warn(obj, "Workload", "InvalidWorkload", group.error)
            old = before.get(group.key)
            if old is None or _group_spec(old) != _group_spec(group):
                self._activate(group.key)

    def on_composite(self, etype: str, obj: Mapping[str, Any]) -> None:
        """A CompositePodGroup event (1.37 alpha): its tree is tried again, and on a deletion
        each PodGroup that was under it (its pods wait for a root again)."""
        meta = obj.get("metadata") or {}
        namespace = str(meta.get("namespace") or DEFAULT_NAMESPACE)
        ckey = composite_key(namespace, str(meta.get("name") or ""))
        below = self._cache.tree_leaves(ckey)
        root = self._cache.unit_of(ckey)
        if etype == "DELETED":
            self._cache.delete_composite(ckey)
            self._states.pop(ckey, None)
        else:
            info = self._cache.upsert_composite(obj)
            if info.error:
                self._reporter.warn(
                    obj, "CompositePodGroup", "InvalidCompositePodGroup", info.error
                )
        for gkey in {root, self._cache.unit_of(ckey), *below}:
            self._activate(gkey)
        for gkey in below:
            self.report(gkey)

    def on_member(self, info: PodInfo, fresh: bool) -> None:
        """A member pod changed; `fresh` when it is newly pending (or its spec changed)."""
        gkey = info.group_key
        if gkey is None:
            return
        state = self._states.setdefault(gkey, GangState(uid="", first_seen=self._clock()))
        deleted = self._cache.pods.get(info.key) is not info
        loss = state.losses.observe(info, deleted)
        if loss is not None:
            self._lost(gkey, state, loss)
        if fresh:
            self._activate(gkey)
        self.report(gkey)

    def _lost(self, gkey: ObjectKey, state: GangState, loss: Loss) -> None:
        """A bound member is gone or Failed: report it when the gang is now short of minMember,
        and make the replacements a gang again (a fresh timeout from their first bind)."""
        state.bound_keys.discard(loss.key)
        group = self._cache.groups.get(gkey)
        bound = bound_count(self._cache.members(gkey))
        if group is None or group.error or bound >= group.min_member:
            log.info("pod group %s: member lost, %d still bound: %s", gkey, bound, loss.describe())
            return
        state.losses.record(loss, now_rfc3339())
        if state.complete:
            state.complete, state.bind_started = False, None
            state.first_seen = self._clock()
        message = state.losses.message(bound, group.min_member)
        log.warning("pod group %s: %s", gkey, message)
        self._reporter.warn(group.obj, group.kind, REASON_LOST, message)

    def _activate(self, gkey: ObjectKey) -> None:
        gkey = self._cache.unit_of(gkey)
        pending = [m for m in self._cache.members(gkey) if m.pending and not m.gated]
        if pending:
            group = self._cache.gang(gkey)
            priority = gang_priority(group, (m.request.priority for m in pending))
            created = min(m.created for m in pending)
            leaf = self._cache.leaf_of(pending[0])[0]
            self._queue.add(UnitKey(UnitKind.GANG, gkey), priority, created, leaf)

    # -- attempts --------------------------------------------------------------------------
    def attempt(self, unit: UnitKey, bind: Callable[[UnitKey, Binds], None]) -> str:
        """Try one gang; `bind` hands over what was placed and assumed."""
        gkey = unit.key
        with self._cache.lock:
            if self._cache.unit_of(gkey) != gkey:  # the group joined a tree since it was queued
                self._queue.done(unit)
                self._activate(gkey)
                return ""
            members = self._cache.members(gkey)
            if any(m.dra_form or m.plugin_form for m in members if m.pending):
                for m in members:
                    self._charges.first_form(m)
                members = self._cache.members(gkey)
            pending = [m for m in members if m.pending and not m.gated]
            group = self._cache.gang(gkey)
            if not pending or (group is None and gkey.endswith(COMPOSITE_MARK)):
                self._queue.done(unit)  # a tree whose root is gone: its groups are queued
                return ""
            blocked = self._blocked(gkey, group, members, pending)
            if blocked is not None or group is None:
                category, message = blocked or ("gang", "")
                return self._park(unit, pending, category, message)
            quota = self._quota.problem(pending)
            trying = pending
            if quota is not None:
                minimum = _minimum(group, members, pending)
                if len(minimum) == len(pending) or self._quota.problem(minimum) is not None:
                    return self._unfit(unit, pending, group, quota, admitted=False)
                trying = minimum  # the queue admits the gang's minimum: start with that
            placed, left, category = self._place_admitted(unit, group, members, trying)
            if not placed:
                admitted = category != QUEUE_CATEGORY
                return self._unfit(unit, pending, group, (category, left), admitted=admitted)
            waits_for = "unschedulable"
            if quota is not None and not left:  # the others wait for room in the queue
                waits_for = quota[0]
                left = f"{quota[1]}: {group.title} starts with its {group.min_field}"
            self._preemption.placed(unit)
            state = self._state(group)
            if state.bind_started is None:
                state.bind_started = self._clock()
                state.start_stamp = state.start_stamp or now_rfc3339()
            if left:  # a complete gang's extra members: some fit now, the rest wait
                self._mark([m for m in pending if m.node is None], left, waits_for)
                self._queue.unschedulable(unit)
            else:
                self._queue.done(unit)
            self.report(gkey)
        bind(unit, placed)
        return "scheduled"

    def _unfit(
        self,
        unit: UnitKey,
        pending: list[PodInfo],
        group: GroupInfo,
        problem: tuple[str, str],
        *,
        admitted: bool,
    ) -> str:
        """The gang cannot start (capacity, or a max on its path): it may preempt, for room for
        its minimum (`_minimum`: its oldest pending members up to `minMember`; the others come
        as room allows). A gang with `minMember` bound places its extra members alone and never
        preempts for them. A gang
        whose members have ResourceClaims preempts with its claims decided together
        (`ClaimCharges.gang_room`), and charged to its queue as a trial allocation takes them
        (`ClaimCharges.claimed`); not while a member waits for a claim. A tree with a topology
        below its root is placed by the search group by group (`_tree_demand`), as `_place_tree`
        will, its claims with each group (`ClaimCharges.tree_room`)."""
        category, message = problem
        members = self._cache.members(unit.key)
        wanted = _minimum(group, members, pending)  # room for the minimum is what it needs
        tree = None
        if group.tree is not None and group.tree.inner_topology():
            tree = _tree_demand(group.tree, members, wanted)
        devices, claimed = None, None
        if _claims(wanted):
            refusal = self._claim_refusals.get(unit.key)
            searched = refusal is None or refusal.room or refusal.quota
            if tree is not None:  # its claims placed group by group, with the walk
                room = self._charges.tree_room(wanted) if searched else None
                if room is None:
                    return self._park(unit, pending, category, message)
                tree = replace(tree, devices=room)
            else:
                devices = self._charges.gang_room(wanted, group.topology) if searched else None
                if devices is None:
                    return self._park(unit, pending, category, message)
            claimed = self._charges.claimed(wanted)
            if refusal is not None and refusal.quota:
                category, admitted = QUEUE_CATEGORY, False
        if not _started(group, members) and self._may_preempt(pending[0], category):
            message = self._preemption.unfit(
                unit,
                wanted,
                group,
                message,
                admitted=admitted,
                live=self._live_placer(),
                gang_devices=devices,
                claimed=claimed,
                tree=tree,
                other=None if tree is not None else self._other_form(wanted, group),
            )
        return self._park(unit, pending, category, message)

    def _other_form(self, wanted: Sequence[PodInfo], group: GroupInfo) -> OtherForm | None:
        """The gang's pods with their made claims, for a victim search on the nodes that do
        not offer the resources, when every one has that form (None: not)."""
        dras = [m.dra_form for m in wanted]
        forms = [d for d in dras if d is not None]
        if not forms or len(forms) != len(wanted):
            return None
        room = self._charges.gang_room(forms, group.topology)
        if room is None:
            return None
        excluded = frozenset().union(*(self._charges.offering(d) for d in forms))
        claimed = self._charges.claimed(forms)
        return OtherForm(infos=forms, gang_devices=room, claimed=claimed, excluded=excluded)

    def _park(self, unit: UnitKey, pending: list[PodInfo], category: str, message: str) -> str:
        state = self._states.get(unit.key)
        if state is not None:
            state.waiting, state.refused = message, category == INVALID
        self._mark(pending, message, category)
        self._queue.unschedulable(unit)
        self.report(unit.key)
        return "unschedulable"

    def _blocked(
        self,
        gkey: ObjectKey,
        group: GroupInfo | None,
        members: Sequence[PodInfo],
        pending: Sequence[PodInfo],
    ) -> tuple[str, str] | None:
        """Why the gang cannot be placed whatever the cluster looks like (or waits for members)."""
        if group is None:
            return "gang", not_found(gkey)
        state = self._state(group)
        if group.error:
            return INVALID, group.error
        if state.failed:
            return "gang", f"{group.title} failed: {state.failed}"
        for info in pending:
            problem = self._precheck(info)
            if problem is not None:
                return problem[0], f"pod group member {info.key}: {problem[1]}"
        broken = self._cache.broken_chain(group)
        if broken:  # its pods wait for a whole tree, as upstream's do
            return "gang", f"{group.title}: {broken}"
        if group.tree is not None:
            exist = Counter(m.group_key for m in members if holds_place(m))
            exist.update(m.group_key for m in pending)
            if not group.tree.satisfied(lambda k: exist[k]):
                return "gang", (
                    f"waiting for {group.title}: fewer than {group.min_field} "
                    f"({group.min_member}) of its groups have their minimum of pods"
                )
        else:
            present = sum(1 for m in members if holds_place(m)) + len(pending)
            if present < group.min_member:
                # No count in the text: it would change (and be written again) with every member.
                return "gang", (
                    f"waiting for {group.title}: fewer than {group.min_field} "
                    f"({group.min_member}) pods exist"
                )
        if group.upstream and group.workload is None:  # as kube-scheduler, before it tries
            bound = [m.obj for m in members if holds_place(m)]
            disagree = members_disagree(group.obj, [*(m.obj for m in pending), *bound])
            if disagree is not None:
                return INVALID, disagree
        return None

    def _place_admitted(
        self,
        unit: UnitKey,
        group: GroupInfo,
        members: Sequence[PodInfo],
        pending: list[PodInfo],
    ) -> tuple[Binds, str, str]:
        """Place pending members off nodes held for others and off GPU models whose quota
        they would breach; (placed, why the others were not, the category of that why). The
        members placed are admitted only if together they fit every model key (DESIGN §10)."""
        self._claim_refusals.pop(unit.key, None)
        priority = gang_priority(group, (m.request.priority for m in pending))
        models = self._quota.model_filter(pending)
        excluded = models.excluded(self._preemption.excluded(unit, priority))
        why = ""
        for _ in range(_MODEL_TRIES):
            attempt = partial(self._place, group, members, pending)
            placed, left = models.place(excluded, attempt, self._forget)
            breach = self._quota.gang_problem(placed)
            if breach is None:
                category = QUEUE_CATEGORY if models.nodes else "unschedulable"
                return placed, models.explain(left) if left else left, category
            self._forget(placed)  # together over a model's budget: not on its extra nodes
            why, excluded = breach[0], frozenset(excluded or ()) | breach[1]
        return [], why, QUEUE_CATEGORY

    def _forget(self, placed: Binds) -> None:
        for info, _ in placed:
            self._charges.forget(info.key)

    def _place(
        self,
        group: GroupInfo,
        members: Sequence[PodInfo],
        pending: list[PodInfo],
        excluded: AbstractSet[str] | None,
    ) -> tuple[Binds, str]:
        """Place and assume pending members: (what was placed, why the others were not).

        Before `minMember` are bound: every pending member together (`place_gang`); if they do
        not all fit, the first of them that make up `minMember` together, and then the others
        each on its own as room allows (as Coscheduling and kube-scheduler let a gang start
        with its minimum); else none. After, each member on its own. Never on `excluded` (nodes
        held for other units). Under a topology constraint, members go to the domain the
        members holding places are in (`_confined`); a `basic` group with none placed starts
        where most of its pending pods fit.
        """
        placer = self._live_placer()
        held = [m.node for m in members if holds_place(m) and m.node is not None]
        confined = self._confined(placer, group, held)
        if isinstance(confined, str):
            return [], confined
        if group.tree is not None:
            return self._place_tree(placer, group, group.tree, members, pending, excluded, confined)
        bound = len(held)
        if bound >= group.min_member or group.basic:  # `basic`: no gang, each on its own
            if group.basic and not bound and group.topology is not None:
                return self._start_in_one_domain(placer, group.topology, pending, excluded)
            return self._place_each(placer, pending, excluded, confined)
        why = ""
        for allowed in confined:
            placed, why = self._place_together(placer, group, bound, pending, excluded, allowed)
            if placed:
                return placed, ""
        need = group.min_member - bound
        if len(pending) <= need:
            return [], why
        topology = group.topology
        if topology is not None and topology.required and not bound and not _claims(pending):
            # kube-scheduler 1.37 too takes the domain that holds the most of the gang's pods
            return self._start_in_one_domain(
                placer, topology, pending, excluded, least=need, min_resources=group.min_resources
            )
        for allowed in confined:  # the minimum first, then the rest as room allows
            placed, _ = self._place_together(
                placer, group, bound, pending[:need], excluded, allowed
            )
            if placed:
                nodes = [*held, *(a.node for _, a in placed)]
                rest = self._confined(placer, group, nodes)
                if isinstance(rest, str):
                    return placed, rest
                more, left = self._place_each(placer, pending[need:], excluded, rest)
                return placed + more, left
        return [], why

    def _place_tree(
        self,
        placer: Placer,
        group: GroupInfo,
        tree: Tree,
        members: Sequence[PodInfo],
        pending: list[PodInfo],
        excluded: AbstractSet[str] | None,
        confined: Sequence[frozenset[str] | None],
    ) -> tuple[Binds, str]:
        """A root CompositePodGroup's tree (`composite`). Until the pods holding places satisfy
        the root: every pending pod together, in one of `confined` (the root's topology), when
        no group below has a topology of its own; else group by group (`_place_subtree`, kube's
        order), kept only if the root is satisfied; else none. Once it is, each group's pods as
        room allows, each PodGroup as its own gang would be placed."""
        held = Counter(m.group_key for m in members if holds_place(m))
        if tree.satisfied(lambda k: held[k]):
            placed, _, left = self._place_subtree(tree, pending, excluded, None, keep=True)
            return placed, left
        why = ""
        if not tree.inner_topology():
            for allowed in confined:
                placed, why = self._place_together(
                    placer, group, sum(held.values()), pending, excluded, allowed
                )
                if placed:
                    return placed, ""
        placed, satisfied, left = self._place_subtree(tree, pending, excluded, None, keep=False)
        return (placed, left) if satisfied else ([], why or left)

    def _place_subtree(
        self,
        node: Tree,
        pending: Sequence[PodInfo],
        excluded: AbstractSet[str] | None,
        allowed: frozenset[str] | None,
        *,
        keep: bool,
    ) -> tuple[Binds, bool, str]:
        """Place `node`'s pending pods within `allowed` (None: anywhere): (placed, whether the
        group is satisfied then, why pods were left), by the walk the victim search runs too
        (`place_subtree`): each PodGroup as its own gang (`_place_leaf`), each
        CompositePodGroup's children in one domain of its topology; unless `keep` (a started
        tree), what a level placed is undone when too few children are satisfied."""
        walk = _TreeWalk(self, self._live_placer().snapshot, pending, excluded)
        return place_subtree(node, walk, allowed, keep=keep)

    def _place_leaf(
        self,
        node: Tree,
        held: Sequence[PodInfo],
        pending: Sequence[PodInfo],
        excluded: AbstractSet[str] | None,
        allowed: frozenset[str] | None,
    ) -> tuple[Binds, bool, str]:
        """One PodGroup of a tree, as `_place_subtree` places it."""
        leaf = self._cache.groups.get(node.key)
        waiting = [m for m in pending if m.group_key == node.key and m.node is None]
        if leaf is None:
            return [], False, ""
        if len(held) >= leaf.min_member and not waiting:
            return [], True, ""
        if len(held) + len(waiting) < leaf.min_member:
            return (
                [],
                len(held) >= leaf.min_member,
                (
                    f"waiting for {leaf.title}: fewer than {leaf.min_field} ({leaf.min_member}) "
                    "pods exist"
                ),
            )
        off = excluding_outside(self._live_placer().snapshot, excluded, allowed)
        placed, why = self._place(leaf, self._cache.members(node.key), waiting, off)
        return placed, len(held) + len(placed) >= leaf.min_member, why

    def _confined(
        self, placer: Placer, group: GroupInfo, nodes: Sequence[str]
    ) -> list[frozenset[str] | None] | str:
        """Where members may go, in the order to try (`member_domains`, `nodes` those its
        members hold), or why nowhere."""
        confined = member_domains(placer.snapshot, group.topology, nodes)
        return f"{group.title}: {confined}" if isinstance(confined, str) else confined

    def _place_each(
        self,
        placer: Placer,
        pending: Sequence[PodInfo],
        excluded: AbstractSet[str] | None,
        confined: Sequence[frozenset[str] | None],
    ) -> tuple[Binds, str]:
        """Each pending member on its own, in the first of `confined` that holds it."""
        placed: Binds = []
        why = ""
        for info in pending:
            refusal = ""
            for allowed in confined:
                assignment, refusal = self._place_alone(placer, info, excluded, allowed)
                if assignment is not None:  # the form placed (`_place_alone`)
                    placed.append((self._cache.pods.get(info.key) or info, assignment))
                    break
            else:
                why = why or refusal
        return placed, why

    def _place_together(
        self,
        placer: Placer,
        group: GroupInfo,
        bound: int,
        pending: list[PodInfo],
        excluded: AbstractSet[str] | None,
        allowed: frozenset[str] | None,
    ) -> tuple[Binds, str]:
        """Every pending member or none, within `allowed` (None: anywhere)."""
        off = excluding_outside(placer.snapshot, excluded, allowed)
        if any(has_claims(m.obj) for m in pending):
            claimed = self._charges.place_gang(placer, pending, off, group.topology)
            if isinstance(claimed, ClaimRefusal):
                self._claim_refusals[group.key] = claimed
                return [], claimed.message
            return [(info, c.assignment) for info, c in zip(pending, claimed, strict=True)], ""
        result = place_gang(
            [m.request for m in pending],
            placer,
            topology=group.topology,
            min_resources=None if bound else group.min_resources,
            excluded=off,
            prefer_clique=self._cache.prefers_cliques,
        )
        if not result.ok:
            by_claims = self._charges.place_gang_dra_forms(placer, pending, off, group.topology)
            if isinstance(by_claims, list):  # with claims, on the nodes DRA serves them on
                return [(info, c.assignment) for info, c in by_claims], ""
            if by_claims is not None:  # it preempts as the device plugin's nodes read it
                return [], f"{result.reason}; {by_claims.message}"
            return [], result.reason
        placed: Binds = []
        for info in pending:
            self._cache.assume(info.key, result.assignments[info.key])
            placed.append((info, result.assignments[info.key]))
        return placed, ""

    def _start_in_one_domain(
        self,
        placer: Placer,
        topology: TopologyConstraint,
        pending: list[PodInfo],
        excluded: AbstractSet[str] | None,
        *,
        least: int = 1,
        min_resources: Mapping[str, int] | None = None,
    ) -> tuple[Binds, str]:
        """A group with a required topology constraint and no member placed (a `basic` one, or
        a gang whose pending pods do not all fit one domain): as many pending pods as one domain
        holds, at least `least`, go there (`place_most_in_one_domain`), the rest each on its own
        in that domain. With ResourceClaims (`basic` only), the first pod's node chooses the
        domain."""
        domains = placer.snapshot.domains(topology.label)
        if _claims(pending):
            labelled = frozenset(n for d in domains.values() for n in d.members())
            if not labelled:
                return [], f"no node has the topology label {topology.label}"
            first, why = self._place_alone(placer, pending[0], excluded, labelled)
            if first is None:
                return [], why
            placed: Binds = [(self._cache.pods.get(pending[0].key) or pending[0], first)]
            rest = pending[1:]
            value = placer.snapshot.node(first.node).labels.get(topology.label)
        else:
            result = place_most_in_one_domain(
                [m.request for m in pending],
                placer,
                topology,
                least=least,
                excluded=excluded,
                min_resources=min_resources,
            )
            if not result.ok:
                return [], result.reason
            placed = []
            for info in pending:
                if info.key in result.assignments:
                    self._cache.assume(info.key, result.assignments[info.key])
                    placed.append((info, result.assignments[info.key]))
            rest = [m for m in pending if m.key not in result.assignments]
            value = result.domain
        if not rest:
            return placed, ""
        inside = None if value is None else domains[value].members()
        more, why = self._place_each(placer, rest, excluded, [inside])
        return placed + more, why

    def _place_alone(
        self,
        placer: Placer,
        info: PodInfo,
        excluded: AbstractSet[str] | None,
        allowed: frozenset[str] | None = None,
    ) -> tuple[Assignment | None, str]:
        """One member placed and assumed on its own (its claims too), within `allowed` (None:
        anywhere): where, or why not. Placed with its made claim (`PodInfo.dra_form`), that
        form is the cache's entry."""
        if has_claims(info.obj):
            claimed = self._charges.place(
                placer, info, excluding_outside(placer.snapshot, excluded, allowed)
            )
            if isinstance(claimed, ClaimRefusal):
                return None, claimed.message
            return claimed.assignment, ""
        decision = placer.decide(info.request, allowed=allowed, excluded=excluded)
        if decision.assignment is None:
            off = excluding_outside(placer.snapshot, excluded, allowed)
            by_claim = self._charges.place_dra_form(placer, info, off)
            if isinstance(by_claim, tuple):  # with its claim, on a node DRA serves it on
                return by_claim[1].assignment, ""
            if by_claim is not None:
                return None, f"{decision.message()}; {by_claim.message}"
            return None, decision.message()
        self._cache.assume(info.key, decision.assignment)
        return decision.assignment, ""

    def _state(self, group: GroupInfo) -> GangState:
        gkey = group.key
        state = self._states.get(gkey)
        if state is None or (state.uid and state.uid != group.uid):
            state = self._states[gkey] = GangState(uid=group.uid, first_seen=self._clock())
        state.uid = group.uid
        return state

    # -- binding outcomes and timeouts -----------------------------------------------------
    def bound(self, unit: UnitKey, key: ObjectKey) -> None:
        gkey = unit.key
        with self._cache.lock:
            group, state = self._cache.gang(gkey), self._states.get(gkey)
            if group is None or state is None:
                return
            state.bound_keys.add(key)
            members = self._cache.members(gkey)
            confirmed = {m.key for m in members if holds_place(m) and not m.assumed}
            if not state.complete and _reached(group, members, confirmed | state.bound_keys):
                state.complete = True
                self._metrics.gang_wait_seconds.observe(self._clock() - state.first_seen)
                log.info("pod group %s: minMember %d bound", gkey, group.min_member)
            self.report(gkey)

    def bind_failed(self, unit: UnitKey, key: ObjectKey) -> None:
        log.info("pod group %s: bind of %s failed; the gang will be re-placed", unit.key, key)

    def check_timeouts(self) -> None:
        """Fail gangs whose binds did not complete within `scheduleTimeoutSeconds`."""
        now = self._clock()
        for gkey, state in list(self._states.items()):
            group = self._cache.gang(gkey)
            if group is None or state.complete or state.failed or state.bind_started is None:
                continue
            if now - state.bind_started > group.timeout:
                self._fail(group, state)

    def _fail(self, group: GroupInfo, state: GangState) -> None:
        gkey = group.key
        members = self._cache.members(gkey)
        bound = bound_count(members)
        state.failed = (
            f"{bound} of {group.min_field} {group.min_member} pods bound; the rest could not be "
            f"bound within scheduleTimeoutSeconds ({group.timeout:g}s)"
        )
        log.warning("pod group %s: %s", gkey, state.failed)
        self._reporter.warn(group.obj, group.kind, REASON_PARTIAL, state.failed)
        self._queue.remove(UnitKey(UnitKind.GANG, gkey))
        pending = [m for m in members if m.pending]
        self._mark(pending, f"{group.title} failed: {state.failed}", "gang")
        self.report(gkey)

    # -- status ----------------------------------------------------------------------------
    def report(self, gkey: ObjectKey) -> None:
        """Write the group's status when it changed (a tree's: each of its PodGroups')."""
        if gkey.endswith(COMPOSITE_MARK):  # kube-scheduler 1.37.2 writes none on the composite
            for leaf in self._cache.tree_leaves(gkey):
                self.report(leaf)
            return
        group = self._cache.groups.get(gkey)
        if group is not None and group.workload is not None:
            return  # a 1.35 Workload has no status; its pods' PodScheduled conditions tell
        if group is not None and group.upstream:
            self._report_upstream(group)
            return
        if group is None or group.error:
            return
        members = self._cache.members(gkey)
        state = self._states.get(gkey)
        if state is not None:
            self._settle(group, state, members)
        status = group_status(group, members, _progress(state))
        current = group.obj.get("status") or {}
        if any(current.get(k) != v for k, v in status.items()):
            self._reporter.group_status(group.obj, status)

    def _report_upstream(self, group: GroupInfo) -> None:
        """The condition kube-scheduler writes on an upstream PodGroup, when it changed."""
        state = self._states.get(group.key)
        bound = bound_count(self._cache.members(group.key))
        complete = state is not None and state.complete
        if group.parent is not None:  # in a tree: tried with it, started with its minCount
            state = self._states.get(self._cache.unit_of(group.key))
            complete = bound >= group.min_member
        status = status_patch(
            group,
            bound=bound,
            complete=complete,
            waiting="" if state is None else state.waiting,
            now=now_rfc3339(),
            refused=state is not None and state.refused,
        )
        if status is not None:
            self._reporter.group_status(group.obj, status)

    def _settle(self, group: GroupInfo, state: GangState, members: Sequence[PodInfo]) -> None:
        """Lost members replaced (minMember bound again): say so once."""
        replaced = state.losses.settle(bound_count(members), group.min_member, now_rfc3339())
        if replaced:
            message = state.losses.replaced_message(group.min_member)
            log.info("pod group %s: %s", group.key, message)
            self._reporter.note(group.obj, group.kind, REASON_REPLACED, message)


def _progress(state: GangState | None) -> GangProgress:
    if state is None:
        return GangProgress(now=now_rfc3339())
    return GangProgress(
        failed=bool(state.failed),
        binding=state.bind_started is not None,
        start_stamp=state.start_stamp,
        losses=state.losses,
        now=now_rfc3339(),
    )


def _group_spec(group: GroupInfo) -> tuple[Any, ...]:
    meta = group.obj.get("metadata") or {}
    return (group.uid, group.obj.get("spec"), meta.get("annotations"))


def _minimum(group: GroupInfo, members: Sequence[PodInfo], pending: list[PodInfo]) -> list[PodInfo]:
    """The oldest pending members that bring a gang to `minMember` (all of `pending` when it
    takes them all, when `minMember` is bound already, or for a `basic` group)."""
    if group.tree is not None:  # the fewest pods that satisfy its root (`Tree.minimum`)
        held = Counter(m.group_key for m in members if holds_place(m))
        present = held + Counter(m.group_key for m in pending)
        chosen = group.tree.minimum(lambda k: present[k], lambda k: held[k]) or {}
        return [m for m in pending if _taken(chosen, m.group_key)] or pending
    need = group.min_member - sum(1 for m in members if holds_place(m))
    return pending[:need] if not group.basic and 0 < need < len(pending) else pending


def _requests(pods: Sequence[PodInfo]) -> list[PodRequest]:
    return [m.request for m in pods]


def _started(group: GroupInfo, members: Sequence[PodInfo]) -> bool:
    """Whether the members holding places bring the gang to its minimum (it then places its
    others alone and never preempts for them)."""
    return _reached(group, members, {m.key for m in members if holds_place(m)})


def _reached(group: GroupInfo, members: Sequence[PodInfo], bound: AbstractSet[ObjectKey]) -> bool:
    """Whether the members in `bound` bring the gang to its minimum (a tree: satisfy its root)."""
    if group.tree is None:
        return len(bound) >= group.min_member
    counts = Counter(m.group_key for m in members if m.key in bound)
    return group.tree.satisfied(lambda k: counts[k])


def _taken(chosen: dict[ObjectKey, int], gkey: ObjectKey | None) -> bool:
    """Take one more pod of PodGroup `gkey` into a tree's minimum (counts `chosen` down)."""
    if gkey is None or chosen.get(gkey, 0) <= 0:
        return False
    chosen[gkey] -= 1
    return True


def _tree_demand(tree: Tree, members: Sequence[PodInfo], wanted: Sequence[PodInfo]) -> TreeDemand:
    """A tree's minimum (`wanted`) as the victim search places it, group by group."""
    held: dict[ObjectKey, list[str]] = {}
    for m in members:
        if holds_place(m) and m.node is not None and m.group_key is not None:
            held.setdefault(m.group_key, []).append(m.node)
    return TreeDemand(
        tree=tree,
        groups={m.key: m.group_key for m in wanted if m.group_key is not None},
        held={key: tuple(nodes) for key, nodes in held.items()},
    )


def _claims(pods: Sequence[PodInfo]) -> bool:
    """Whether any of `pods` uses ResourceClaims (placed through `ClaimCharges`)."""
    return any(has_claims(m.obj) for m in pods)


class _TreeWalk:
    """A tree's pending pods as `GangTracker` places them: `place_subtree`'s `TreeSide`."""

    def __init__(
        self,
        tracker: GangTracker,
        snapshot: Snapshot,
        pending: Sequence[PodInfo],
        excluded: AbstractSet[str] | None,
    ) -> None:
        self._tracker, self._snapshot = tracker, snapshot
        self._pending, self._excluded = pending, excluded
        self._cache = tracker._cache

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    def held_nodes(self, node: Tree) -> list[str]:
        return [n for m in self._held(node.leaves()) if (n := m.node) is not None]

    def waiting(self, node: Tree) -> list[PodRequest]:
        keys = set(node.leaves())
        return [m.request for m in self._pending if m.group_key in keys and m.node is None]

    def place_leaf(self, leaf: Tree, allowed: frozenset[str] | None) -> tuple[Binds, bool, str]:
        held = self._held([leaf.key])
        return self._tracker._place_leaf(leaf, held, self._pending, self._excluded, allowed)

    def undo(self, placed: Binds) -> None:
        self._tracker._forget(placed)

    def _held(self, keys: Sequence[ObjectKey]) -> list[PodInfo]:
        return [m for k in keys for m in self._cache.members(k) if holds_place(m)]
