"""Preemption and reclaim in the scheduling loop (DESIGN §11): what happens when a unit U (a pod,
or a gang's pending members) cannot start.

`unfit` runs in U's scheduling cycle, under `cache.lock`, after placement (capacity) or admission
(a max on U's path) refused it. Unless U is already nominated, it builds the `Preemptor` and asks
the pure victim search (`find_victims`, on the live snapshot and the cache's `RunningIndex`, which
it leaves unchanged); a choice is recorded at once — the victims leave the index, U is nominated
on their nodes — and the API writes go to the `EvictionWriter`'s threads. While any victim of U
is terminating, U never searches again; the nodes it was nominated on are kept from every unit of
equal or lower priority (`excluded`) until U is placed, deleted, or the nomination
times out after its last victim is gone; U still not fitting once its victims are gone (one
could not be deleted) searches again, on the room they left. With no victim set, U's reason
says why (the search's `NoChoice`). A pod with claims is searched for with its claims' devices
(`DeviceFit`): a node takes it once its victims' claims free enough devices (a gang's, together:
`GangDeviceFit`), and a starvation hold asks room for the whole GPUs they take; a set of no
victims (the room of pods already gone is on its way: their claims are being deallocated)
evicts nobody and nominates nothing. The starvation guard gives the first unit of its queue
that passed admission and waited longer than `starvationSeconds` a hold on the nodes with the
fewest GPUs in use, without evicting anyone (`take_hold`, the simulator's code path too). A hold
whose nodes drained is renewed on them at its end, in `tick`, before any unit behind U is tried
(`_renew`); one that ran out keeps U's cooldown (`_forget` releases with `waits=True`).

A new leader (`recover`) rebuilds the nominations from the API: victims carry `DisruptionTarget`
naming their preemptor's unit, preemptors `status.nominatedNodeName`. A victim marked but not yet
deleted when the old leader stopped is deleted now, so a gang is never left half evicted; no
unit searches again while its victims terminate, so none is evicted twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from dataclasses import dataclass, replace

from agent.objkey import ObjectKey
from scheduler.kubeapi.client import KubeClient
from scheduler.kubeapi.leader import Fence
from scheduler.placement import Assignment, Placer, PodRequest
from scheduler.preemption import (
    Claimed,
    DeviceFit,
    GangDeviceFit,
    NoChoice,
    Nominations,
    PreemptionSettings,
    Preemptor,
    TreeDemand,
    VictimChoice,
    VictimReason,
    find_victims,
    find_victims_where_it_may_start,
    take_hold,
)
from scheduler.runtime.cluster.cache import ClusterCache, GroupInfo
from scheduler.runtime.cluster.groups import gang_priority
from scheduler.runtime.cluster.podinfo import PodInfo
from scheduler.runtime.cluster.running import unit_name
from scheduler.runtime.metrics import SchedulerMetrics
from scheduler.runtime.pending import UnitKey
from scheduler.runtime.preempting.evicting import (
    EvictionWriter,
    Victim,
    disruption_message,
    preemptor_of,
)
from scheduler.runtime.queues.modelquota import model_filter
from scheduler.runtime.reporter import Reporter

__all__ = ["OtherForm", "Preemption"]

log = logging.getLogger(__name__)

NEVER = "Never"  # spec.preemptionPolicy of a pod that never evicts


@dataclass(frozen=True, slots=True, kw_only=True)
class OtherForm:
    """A pending pod read another way, for a second victim search: one asking a resource a
    DeviceClass maps, with its made claim (`PodInfo.dra_form`), on the nodes that do not offer
    the resource (`excluded`: those that do), or a gang of such pods; `devices`,
    `gang_devices` and `claimed` as `Preemption.unfit`'s."""

    infos: Sequence[PodInfo]
    devices: DeviceFit | None = None
    gang_devices: GangDeviceFit | None = None
    claimed: Claimed
    excluded: frozenset[str]


class Preemption:
    """Every method runs with `cache.lock` held, except the writer's callback (`_failed`)."""

    def __init__(
        self,
        cache: ClusterCache,
        kube: KubeClient,
        fence: Fence,
        reporter: Reporter,
        metrics: SchedulerMetrics,
        settings: PreemptionSettings,
        clock: Callable[[], float],
        retry: Callable[[], object],
    ) -> None:
        """`retry`: every parked unit is tried again (an eviction failed: U may search anew)."""
        self._cache, self._metrics, self.settings, self._clock = cache, metrics, settings, clock
        self._retry = retry
        self._writer = EvictionWriter(kube, fence, reporter, metrics, self._failed)
        self._nominations = Nominations()
        self._nominated: dict[str, dict[ObjectKey, str]] = {}  # unit -> its pods' nodes
        self._priority: dict[str, int] = {}  # unit nominated or holding -> its priority
        self._holds: dict[str, Preemptor] = {}  # unit holding against starvation -> itself
        self._victims: dict[str, list[ObjectKey]] = {}  # nominated unit -> its victims
        self._waiting: dict[str, float] = {}  # unit -> when it first could not start
        self._order: dict[str, tuple[str, int, float]] = {}  # unit -> leaf, priority, created
        self._heads: dict[str, str] | None = None  # leaf -> its first waiting unit (per tick)
        self._held = 0.0  # held GPU-seconds already counted in the metric

    # -- what placement may use ------------------------------------------------------------
    def excluded(self, unit: UnitKey, priority: int) -> AbstractSet[str] | None:
        """The nodes `unit` must not be placed on (None: none): those held for other units of
        at least `priority`, but those `unit` is nominated on too once its own victims are gone:
        units nominated on one node share the room their victims free (each search counted the
        others), so none waits for another; a unit whose victims still terminate must not take
        the room another's victims freed (that one would search again, and the first one's
        victims would go in vain). A starvation hold frees nothing: another's hold on the same
        nodes keeps `unit` off them (as in the simulator). Costs nothing while no unit waits,
        else O(what is held)."""
        if not self._waiting:  # no nomination nor hold without a waiting unit
            return None
        name = str(unit)
        blocked = self._nominations.blocked(priority, name)
        if not blocked:
            return None
        own = None if name in self._holds else self._nominations.nodes_of(name)
        if own and not self._nominations.terminating(name):
            blocked = blocked - set(own.values())
        return blocked or None

    @contextmanager
    def _nominees_placed(self, name: str, priority: int) -> Iterator[None]:
        """While open, the live snapshot holds the pods nominated for other units of at least
        `priority` on their nodes, in the place of their victims (as kube-scheduler adds
        nominated pods in its dry run), so a search never counts room already promised; undone
        on exit. The search must read the snapshot its index reads: the live one, changed here
        only under `cache.lock`."""
        others = [n for n, p in self._priority.items() if n != name and p >= priority]
        snapshot = self._cache.snapshot
        taken: list[tuple[PodRequest, Assignment]] = []
        added: list[str] = []
        try:
            for other in others:
                if other in self._holds:
                    continue
                for victim in self._victims.get(other, ()):  # their room is the nominee's
                    node = snapshot.node_of(victim)
                    if node is not None:
                        request = snapshot.node(node).pods[victim][0]
                        taken.append((request, snapshot.forget(victim) or Assignment(node=node)))
                for pod, node in (self._nominations.nodes_of(other) or {}).items():
                    info = self._cache.pods.get(ObjectKey(pod))
                    if info is not None and info.pending and node in snapshot:
                        snapshot.assume_on(info.request, node)
                        added.append(pod)
            yield
        finally:
            for pod in added:
                snapshot.forget(pod)
            for request, assignment in taken:
                snapshot.assume(request, assignment)

    # -- a unit that cannot start ----------------------------------------------------------
    def unfit(
        self,
        unit: UnitKey,
        infos: Sequence[PodInfo],
        group: GroupInfo | None,
        message: str,
        *,
        admitted: bool,
        live: Placer,
        devices: DeviceFit | None = None,
        gang_devices: GangDeviceFit | None = None,
        claimed: Claimed | None = None,
        tree: TreeDemand | None = None,
        other: OtherForm | None = None,
    ) -> str:
        """`unit` (its pending pods `infos`) cannot start for `message`; evict for it if a victim
        set lets it start, else maybe hold nodes against starvation. Returns what U shows.
        `live`: the Placer on the live snapshot; `devices`: what a pod needs besides its
        request (its claims), judged with the victims gone; `gang_devices`: what a gang's pods
        need so, together; `claimed`: what those will be charged to U's queue (quota units);
        `tree`: U's tree of pod groups, placed group by group (`Preemptor.tree`); `other`: U
        read another way, searched when U as it is finds no victims (`OtherForm`)."""
        name, now = str(unit), self._clock()
        since = self._waiting.setdefault(name, now)
        if self._nominations.terminating(name) or self._shared_room_coming(name):
            nodes = ", ".join(sorted(set((self._nominations.nodes_of(name) or {}).values())))
            return f"{message}; preemption: waiting for the victims on {nodes} to terminate"
        if name in self._nominated:  # its victims are gone, yet it does not start: look again
            self._forget(name)
        preemptor = replace(
            self._preemptor(name, infos, group, devices),
            gang_devices=gang_devices,
            claimed=claimed or Claimed(),
            tree=tree,
        )
        self._order[name] = (preemptor.leaf, preemptor.priority, min(i.created for i in infos))
        choice: VictimChoice | NoChoice | None = None
        with self._nominees_placed(name, preemptor.priority):
            if self.settings.enabled or self.settings.reclaim:
                choice = self._search(preemptor, live)
                if other is not None and not isinstance(choice, VictimChoice):
                    second = replace(
                        self._preemptor(name, other.infos, group, other.devices),
                        gang_devices=other.gang_devices,
                        claimed=other.claimed,
                    )
                    second = replace(second, excluded=second.excluded | other.excluded)
                    found = self._search(second, live)
                    if isinstance(found, VictimChoice):
                        choice, preemptor, infos = found, second, other.infos
            starved = admitted and now - since >= self.settings.starvation_seconds
            if not isinstance(choice, VictimChoice) and starved and self._first_in_queue(name):
                self._starving(preemptor, live, now)
        if isinstance(choice, VictimChoice) and not choice.pods:  # freed, not yet free
            return f"{message}; preemption: waiting for the room of pods already gone"
        if isinstance(choice, VictimChoice):
            return self._evict(preemptor, infos, choice, now)
        if choice is None or choice.nothing_eligible:  # reads as it would without preemption
            return message
        return f"{message}; {choice.reason}"  # something stands in the way: say what

    def _shared_room_coming(self, name: str) -> bool:
        """Another unit nominated on one of `name`'s nodes still has victims terminating: units
        share the room their victims free, so the room `name` counted on may yet come (another
        may have taken `name`'s first). Searching now would evict in vain."""
        own = set((self._nominated.get(name) or {}).values())
        return bool(own) and any(
            other != name and own & set(nodes.values()) and self._nominations.terminating(other)
            for other, nodes in self._nominated.items()
        )

    def _preemptor(
        self,
        name: str,
        infos: Sequence[PodInfo],
        group: GroupInfo | None,
        devices: DeviceFit | None,
    ) -> Preemptor:
        """U as the search sees it; kept off the GPU models whose max its queue has reached."""
        spec = infos[0].obj.get("spec") or {}
        leaf = self._cache.leaf_of(infos[0])[0]
        pods = tuple(i.request for i in infos)
        return Preemptor(
            key=name,
            pods=pods,
            leaf=leaf,
            priority=gang_priority(group, (i.request.priority for i in infos)),
            never=spec.get("preemptionPolicy") == NEVER
            or (group is not None and group.never_preempts),
            topology=None if group is None else group.topology,
            min_resources=None if group is None else group.min_resources,
            excluded=model_filter(self._cache.queues, self._cache.snapshot, leaf, pods).nodes,
            prefer_clique=self._cache.prefers_cliques,
            devices=devices,
        )

    def _search(self, preemptor: Preemptor, placer: Placer) -> VictimChoice | NoChoice:
        book = self._cache.queues
        budgets, capacity = self._cache.budgets.budgets(), book.capacity()
        choice = find_victims_where_it_may_start(
            preemptor,
            self._nominations.held_from(preemptor.priority, preemptor.key),
            lambda u: find_victims(
                u,
                placer,
                self._cache.running.index,
                book.tree,
                book.usage,
                budgets,
                self.settings,
                capacity,
            ),
        )
        result = "evicted" if isinstance(choice, VictimChoice) else "none"
        self._metrics.preemption_attempts.labels(result=result).inc()
        return choice

    def _evict(
        self, preemptor: Preemptor, infos: Sequence[PodInfo], choice: VictimChoice, now: float
    ) -> str:
        name, pods = preemptor.key, [ObjectKey(key) for key in choice.pods]
        victims = [self._victim(key) for key in pods if key in self._cache.pods]
        self._cache.doom(pods)
        nodes = sorted(set(choice.nodes.values()))
        reclaim = any(e.reason is VictimReason.RECLAIM for e in choice.evictions)
        ended = self._nominations.nominate(
            name, preemptor.priority, choice.nodes, pods, now, reclaim=reclaim
        )
        self._claimed(name, preemptor.priority, ended)
        self._nominated[name] = {ObjectKey(k): node for k, node in choice.nodes.items()}
        self._victims[name] = pods
        for eviction in choice.evictions:
            self._metrics.preemption_victims.labels(reason=eviction.reason).inc(len(eviction.pods))
        where = ", ".join(nodes)
        violated = f", violating {', '.join(choice.violated)}" if choice.violated else ""
        note = f"preempting {len(pods)} pods on {where}{violated}"
        log.info("%s: %s (%s)", name, note, ", ".join(pods))
        message = disruption_message(self._cache.scheduler_name, name, preemptor.priority)
        self._writer.evict(name, message, victims)
        self._writer.nominate(
            {i.key: (i.obj, choice.nodes.get(i.key)) for i in infos if i.key in choice.nodes},
            f"{note}; waiting for them to terminate",
        )
        return f"{note}; waiting for them to terminate"

    def _victim(self, key: ObjectKey) -> Victim:
        info = self._cache.pods[key]
        return Victim(
            key=key,
            namespace=info.namespace,
            name=info.name,
            uid=info.uid,
            node=info.node or "",
            obj=info.obj,
        )

    def _first_in_queue(self, name: str) -> bool:
        """Is `name` first in its leaf's order (priority, then age) among the waiting units?
        Worked out at most once per housekeeping tick."""
        if self._heads is None:
            best: dict[str, tuple[int, float, str]] = {}
            for unit, (leaf, priority, created) in self._order.items():
                rank = (-priority, created, unit)
                if leaf not in best or rank < best[leaf]:
                    best[leaf] = rank
            self._heads = {leaf: rank[2] for leaf, rank in best.items()}
        order = self._order.get(name)
        return order is not None and self._heads.get(order[0]) == name

    def _starving(self, preemptor: Preemptor, placer: Placer, now: float) -> None:
        index, book = self._cache.running.index, self._nominations
        nodes = take_hold(book, preemptor, placer, index, now, self.settings)
        if nodes:
            self._priority[preemptor.key] = preemptor.priority
            self._holds[preemptor.key] = preemptor
            where = ", ".join(sorted(set(nodes.values())))
            log.info("%s starves: %s held for it", preemptor.key, where)

    # -- what ends a nomination ------------------------------------------------------------
    def placed(self, unit: UnitKey) -> None:
        """`unit` was placed: what was held for it is free again."""
        if self._waiting:
            self._end(str(unit))

    def pod_gone(self, old: PodInfo) -> None:
        """A pod was deleted or finished: a victim gone, or a nominated unit's pod deleted."""
        self._nominations.victim_gone(old.key, self._clock())
        name = unit_name(old)
        if name in self._waiting and not self._pending(old):
            self._end(name)

    def _pending(self, old: PodInfo) -> bool:
        if old.group_key is None:
            return False
        return any(m.pending for m in self._cache.members(old.group_key))

    def _claimed(self, name: str, priority: int, ended: list[str]) -> None:
        """`name` is nominated; the starvation holds in `ended` gave way to it."""
        self._holds.pop(name, None)
        self._priority[name] = priority
        for other in ended:
            log.info("%s: its starvation hold gives way to %s", other, name)
            self._holds.pop(other, None)
            self._priority.pop(other, None)

    def _end(self, name: str) -> None:
        """`name` was placed or deleted."""
        self._waiting.pop(name, None)
        if self._order.pop(name, None) is not None:
            self._heads = None
        self._forget(name, done=True)

    def _forget(self, name: str, *, done: bool = False) -> None:
        """What `name` held ended, but it still waits (it may search or starve again; its turn
        for holds is kept), or it is `done` (placed or deleted)."""
        self._nominations.release(name, self._clock(), waits=not done)
        self._priority.pop(name, None)
        self._holds.pop(name, None)
        self._victims.pop(name, None)
        nodes = self._nominated.pop(name, None)
        if nodes:
            pods = {k: (self._cache.pods[k].obj, None) for k in nodes if k in self._cache.pods}
            self._writer.nominate(pods, "")

    def tick(self, live: Placer | None = None) -> None:
        """Housekeeping: nominations and holds past their timeout end, a hold whose nodes
        drained is renewed at once (`live`: the Placer on the live snapshot), and every parked
        unit is tried again (the room they held is free now, and no pod event says so); held
        GPU-seconds are counted."""
        now = self._clock()
        self._heads = None
        holding = dict(self._holds)
        ended = self._nominations.expire(now, self.settings)
        for name in ended:
            log.info("%s: its nomination or hold timed out", name)
            self._forget(name)
            if name in holding and live is not None:
                self._renew(holding[name], live, now)
        if ended:
            self._retry()
        held = self._nominations.held_gpu_seconds(now)
        if held > self._held:
            self._metrics.held_gpu_seconds.inc(held - self._held)
            self._held = held

    def _renew(self, preemptor: Preemptor, live: Placer, now: float) -> None:
        """`preemptor`'s hold ran out: it holds again now if `take_hold` renews it (its nodes
        drained), before the units behind it are tried and take what drained (the simulator
        renews in the same pass). Only while it still waits, its pods unchanged, first in line."""
        name = preemptor.key
        pods = [self._cache.pods.get(ObjectKey(p.key)) for p in preemptor.pods]
        if not all(i is not None and i.pending for i in pods) or not self._first_in_queue(name):
            return
        with self._nominees_placed(name, preemptor.priority):
            self._starving(preemptor, live, now)

    def _failed(self, name: str, pod: ObjectKey) -> None:
        """(writer thread) A victim could not be evicted: it may be chosen again, and once the
        other victims are gone U, still not fitting, searches again (on the room they left)."""
        with self._cache.lock:
            self._cache.spare([pod])
            self._nominations.victim_gone(pod, self._clock())
        self._retry()

    # -- a new leader ----------------------------------------------------------------------
    def recover(self) -> None:
        """Rebuild the nominations the API shows; finish evictions the old leader began. The
        pending pods are grouped by unit only when some unit has victims or a nomination (a
        start with thousands pending and no preemption under way makes one pass over them)."""
        victims: dict[str, list[PodInfo]] = {}
        nominated: dict[str, dict[ObjectKey, str]] = {}
        waiting: list[PodInfo] = []
        for info in self._cache.pods.values():
            unit = preemptor_of(info.obj, self._cache.scheduler_name)
            if unit is not None and info.counted:
                victims.setdefault(unit, []).append(info)
            if info.pending:
                waiting.append(info)
                node = (info.obj.get("status") or {}).get("nominatedNodeName")
                if node:
                    nominated.setdefault(unit_name(info), {})[info.key] = str(node)
        names = (set(victims) | set(nominated)) - set(self._nominated)
        pending: dict[str, list[PodInfo]] = {}
        for info in waiting if names else ():
            if (name := unit_name(info)) in names:
                pending.setdefault(name, []).append(info)
        for name in sorted(names & set(pending)):
            self._recover_one(name, victims.get(name, []), nominated.get(name, {}), pending[name])

    def _recover_one(
        self,
        name: str,
        victims: list[PodInfo],
        nodes: dict[ObjectKey, str],
        pending: list[PodInfo],
    ) -> None:
        self._waiting.setdefault(name, self._clock())
        priority = max(i.request.priority for i in pending)
        keys = [v.key for v in victims]
        self._cache.doom(keys)
        where = sorted({str(v.node) for v in victims} | set(nodes.values()))
        held: dict[str, str] = {str(k): v for k, v in nodes.items()}
        held = held or {i.key: where[0] for i in pending if where}
        ended = self._nominations.nominate(name, priority, held, keys, self._clock())
        self._claimed(name, priority, ended)
        self._nominated[name] = {ObjectKey(k): node for k, node in held.items()}
        self._victims[name] = keys
        unfinished = [self._victim(v.key) for v in victims if not v.terminating]
        if unfinished:
            message = disruption_message(self._cache.scheduler_name, name, priority)
            self._writer.evict(name, message, unfinished)
        log.info("%s: nomination on %s recovered (%d victims left)", name, where, len(keys))

    def close(self) -> None:
        self._writer.close()
