"""Event mode: jobs arrive at their times, run for their durations, and gangs wait for room.

Time advances from event to event (an arrival, a pod finishing, a starvation hold ending).
After every event the pending jobs are tried in arrival order, none blocking the ones behind
it: a gang (`minMember > 1`) places its first `minMember` replicas with `place_gang` (members
with claims: `SimClaims.place_gang`), all or none; while it waits it holds nothing but a
starvation hold, see `evictions`; then the rest one by one like any other replica, inside the
domain of its replicas placed when it has a topology constraint (`member_domains`, as the
scheduler keeps a gang's later members). A pod runs
`duration` seconds from the moment it is placed (for ever without one). A job is placed once
all its replicas are; its gang wait is the time from arrival until its gang was placed. The
policy's scoring hears of every pod that waits (`SimScheduler.queued`, on arrival and on
eviction; binding ends the wait), as the scheduler's intake tells it (`Scoring.queued`).

Reported: jobs placed, the mean gang wait, the time-weighted mean and the peak GPU allocation, the
allocation against arrived demand (as in the protocol), fragmentation as the last job arrived, the
pods never placed (by class) and placement decisions per second; and the living-cluster figures
(`metrics`): utilisation (the time-weighted allocation over the arrival window, first to last
arrival), waits per pod class, the longest 8-GPU wait, and the timeline of allocation and
fragmentation, whose mean is the fragmentation over time.

`shuffle_nodes` ranks the nodes by the seed (`0042-<name>`) as the protocol does, so that ties
between equal scores fall on a different fixed node order per seed.
"""

from __future__ import annotations

import heapq
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from functools import partial

from agent.model import MILLI_PER_GPU
from scheduler.config import DEFAULT_TOPOLOGY_LEVELS, SchedulerConfig, load_config
from scheduler.placement import Assignment, PodRequest, member_domains
from scheduler.placement.fgd import Fragmentation, PodShape, TypicalPod, typical_pods
from scheduler.placement.shares import placed_milli as milli
from scheduler.preemption import PreemptionSettings, Preemptor
from scheduler.quota import (
    DEFAULT_QUEUE,
    Amounts,
    QueueOrder,
    QuotaTree,
    Usage,
    admission_problem,
    queue_problem,
)
from scheduler.quota.capacity import nodes_capacity
from scheduler.sim.build import build_cluster, job_requests, node_names, ranked_names
from scheduler.sim.cluster import Cluster
from scheduler.sim.domains import DomainMeter
from scheduler.sim.evictions import SimPreemption
from scheduler.sim.metrics import AllocationClock, Timeline, WaitBook
from scheduler.sim.modelquota import ModelBudgets
from scheduler.sim.policies import SimPolicy, SimScheduler, canonical_policy, make_policy
from scheduler.sim.protocol import RunResult, allocation_by_arrival, fragmented_share
from scheduler.sim.queues import QueueMeter
from scheduler.sim.units import LeafRound, Pending, Unit, enqueue
from scheduler.sim.workload import ClusterSpec, Job, Workload

__all__ = ["run_events"]

Progress = Callable[[int, int], None]


class _EventRun:
    def __init__(
        self,
        spec: ClusterSpec,
        workload: Workload,
        scheduler: SimScheduler,
        preemption: PreemptionSettings | None = None,
        levels: Sequence[str] = DEFAULT_TOPOLOGY_LEVELS,
    ) -> None:
        self.scheduler = scheduler
        self.jobs = sorted(workload.jobs, key=lambda j: (j.arrival, j.name))
        self.clock = AllocationClock(capacity=spec.gpu_count * MILLI_PER_GPU)
        self.finishing: list[tuple[float, int, str, int]] = []
        self.leaves: dict[str, list[Pending]] = {}
        self.tree = QuotaTree.build(workload.queues)
        self.usage = Usage(self.tree)
        self._order = QueueOrder()
        self.models = ModelBudgets(self.tree, self.usage, scheduler.cluster.snapshot)
        self.capacity = nodes_capacity(scheduler.cluster.snapshot.nodes.values())
        self.meter = QueueMeter(self.tree, self.usage)
        self.waits: list[float] = []
        self.jobs_placed = 0
        self.decisions = 0
        self.seconds = 0.0
        self.arrived = 0
        self.events: list[tuple[int, int]] = []
        self._seq = 0
        self.fragmented: tuple[float, int] = (0.0, 0)
        self.measure: Callable[[], tuple[float, int]] = lambda: (0.0, 0)
        self.book = WaitBook()
        first, last = (self.jobs[0].arrival, self.jobs[-1].arrival) if self.jobs else (0.0, 0.0)
        self.clock.window_end = last
        self.timeline = Timeline(first, last, lambda: (0.0, 0.0))
        self.domains = DomainMeter(scheduler.cluster.snapshot, levels, first, last)
        self.preemption = (
            None
            if preemption is None
            else SimPreemption(scheduler.placer, self.tree, self.usage, preemption, self.capacity)
        )
        self._running: dict[str, tuple[Pending, str, PodRequest]] = {}  # pod key -> its job
        self._seq_of: dict[str, int] = {}  # pod key -> its finishing event (absent: cancelled)
        self._requeue: list[tuple[str, Pending]] = []  # evicted, back in their queue next pass
        self._restarted: set[str] = set()
        self._stuck: set[str] = set()  # leaves with a unit that could not start, this pass
        self.restart: tuple[float, Callable[[], SimPolicy], bool] | None = None
        """When the scheduler restarts, the policy it restarts with, and whether its learning
        scores are shown the running pods (`run_events`'s `restart_at`)."""

    def run(self, progress: Progress | None) -> None:
        self.clock.start = self.clock.now = self.jobs[0].arrival if self.jobs else 0.0
        next_job = 0
        while next_job < len(self.jobs) or self.finishing:
            arrival = self.jobs[next_job].arrival if next_job < len(self.jobs) else float("inf")
            finish = self.finishing[0][0] if self.finishing else float("inf")
            self.timeline.sample_until(min(arrival, finish))
            self.meter.advance(min(arrival, finish) - self.clock.now)
            self.clock.advance(min(arrival, finish))
            self.domains.advance(min(arrival, finish))
            if self.restart is not None and self.restart[0] <= self.clock.now:
                self._restart(*self.restart[1:])
            while self.finishing and self.finishing[0][0] <= self.clock.now:
                _t, seq, key, _milli = heapq.heappop(self.finishing)
                if self._seq_of.get(key) == seq:
                    self.book.finished(self._running[key][0].job, self.clock.now)
                    self._stopped(key)
            if self.preemption is not None:
                self.preemption.tick(self.clock.now)
            while next_job < len(self.jobs) and self.jobs[next_job].arrival <= self.clock.now:
                self._arrive(self.jobs[next_job])
                next_job += 1
            self._schedule()
            self._wake_later()
            if next_job == len(self.jobs) and self.fragmented == (0.0, 0):
                self.fragmented = self.measure()  # the cluster as the last job arrived
            if progress is not None:
                progress(next_job, len(self.jobs))
        self.timeline.finish(self.clock.now)

    def _restart(self, fresh: Callable[[], SimPolicy], relearn: bool) -> None:
        """The scheduler restarts: a fresh policy, shown the running pods when `relearn`."""
        self.restart = None
        running = [pod for _entry, _leaf, pod in self._running.values()] if relearn else []
        waiting = [
            pod
            for entries in self.leaves.values()
            for entry in entries
            for pod in entry.requests
            if pod.key not in entry.placed
        ]
        self.scheduler.restart(fresh(), running, waiting)
        if self.preemption is not None:
            self.preemption.placer = self.scheduler.placer

    def _arrive(self, job: Job) -> None:
        leaf = job.queue or DEFAULT_QUEUE
        requests = job_requests(job)
        if job.pod.claims:
            self.scheduler.claims.update((r.key, job.pod.claims) for r in requests)
        enqueue(self.leaves.setdefault(leaf, []), Pending(job, requests))
        for request in requests:
            self.scheduler.queued(request)
        self.arrived += job.replicas * job.pod.gpu_milli_total
        self.meter.arrived(leaf, job.replicas, job.replicas * job.pod.gpu_milli_total)
        self.book.arrived(job)

    def _wake_later(self) -> None:
        """A starvation hold ends at a time no pod event may come: that time is an event too (a
        timer in `finishing` that stops no pod)."""
        if self.preemption is not None:
            for when in self.preemption.wake:
                heapq.heappush(self.finishing, (when, 0, "", 0))
            self.preemption.wake.clear()

    def _schedule(self) -> None:
        """Offer every waiting unit once: the leaf `QueueOrder` puts first offers its next unit,
        then the order is asked again; a unit that does not start never blocks those behind it."""
        rounds = {leaf: LeafRound(entries) for leaf, entries in self.leaves.items() if entries}
        self._stuck.clear()
        while heads := _heads(rounds):
            leaf = next(iter(heads)) if len(heads) == 1 else self._choose(heads)
            self._try(leaf, rounds[leaf].take())
        for leaf, entry in self._requeue:
            entries = self.leaves.setdefault(leaf, [])
            if entry not in entries:
                enqueue(entries, entry)
        self._requeue.clear()
        for entries in self.leaves.values():
            entries[:] = [e for e in entries if not e.done]
        fresh = {leaf: LeafRound(entries) for leaf, entries in self.leaves.items() if entries}
        self.meter.settle(_heads(fresh))

    def _choose(self, heads: Mapping[str, Amounts]) -> str:
        # The demand is its own token: an equal demand has the same within-guarantee answer.
        tokens = {leaf: tuple(sorted(demand.items())) for leaf, demand in heads.items()}
        return self._order.choose(self.tree, self.usage, self.capacity, tokens, heads.__getitem__)

    def _admits(self, leaf: str, unit: Unit) -> bool:
        return (
            queue_problem(self.tree, leaf) is None
            and admission_problem(self.tree, self.usage, leaf, unit.demand) is None
        )

    def _try(self, leaf: str, unit: Unit) -> None:
        admitted = self._admits(leaf, unit)
        if admitted and self._place(leaf, unit):
            return
        head = leaf not in self._stuck  # the first unit of its leaf that cannot start
        self._stuck.add(leaf)
        preemption = self.preemption
        if preemption is None or queue_problem(self.tree, leaf) is not None:
            return
        job = unit.entry.job
        key = job.name if unit.gang else unit.pods[0].key
        off = self.models.filter(leaf, unit.pods).nodes  # models whose max the queue reached
        devices, gang_devices = self.scheduler.claim_fits(unit.pods, gang=unit.gang)
        u = Preemptor(
            key=key,
            pods=tuple(unit.pods),
            leaf=leaf,
            priority=job.priority,
            topology=job.topology if unit.gang else None,
            excluded=off,
            prefer_clique=self.scheduler.policy.prefer_clique,
            devices=devices,
            gang_devices=gang_devices,
        )
        if not self._preempt(preemption, leaf, unit, u):
            preemption.starving(u, self.clock.now, head=head, admitted=admitted)

    def _place(self, leaf: str, unit: Unit) -> bool:
        """Start `unit` where the policy puts it, off the nodes held for others; False when it
        does not fit."""
        entry, start = unit.entry, time.perf_counter()
        key = entry.job.name if unit.gang else unit.pods[0].key
        held = None if self.preemption is None else self.preemption.blocked(key, entry.job.priority)
        models = self.models.filter(leaf, unit.pods)
        if unit.gang:
            gang = partial(self.scheduler.choose_gang, unit.pods, entry.job.topology)
            result = models.decide(held, lambda off: gang(excluded=off), lambda r: r.ok)
            self._account(start, len(unit.pods))
            if not result.ok or not self.models.gang_fits(leaf, unit.pods, result.assignments):
                return False
            for pod in unit.pods:
                self._started(leaf, pod, result.assignments[pod.key], entry)
            entry.gang_placed = True
            self.waits.append(self.clock.now - entry.job.arrival)
            self._gang_started(unit.pods, result.assignments)
        else:
            confined = self._confined(entry)
            if isinstance(confined, str):
                return False
            choose = partial(self._choose_within, unit.pods[0], confined)
            assignment = models.decide(held, choose, lambda a: a is not None)
            self._account(start, 1)
            if assignment is None:
                return False
            self._started(leaf, unit.pods[0], assignment, entry)
        if self.preemption is not None:
            self.preemption.placed(key, self.clock.now)
        if entry.done:
            self.jobs_placed += 1
        return True

    def _confined(self, entry: Pending) -> list[frozenset[str] | None] | str:
        """Where a replica of `entry` may go (`member_domains`): a gang's later replicas only
        to the domain of its replicas placed, as the scheduler keeps them."""
        job = entry.job
        if not job.is_gang or job.topology is None or not entry.placed:
            return [None]
        snapshot = self.scheduler.cluster.snapshot
        nodes = [node for key in entry.placed if (node := snapshot.node_of(key)) is not None]
        return member_domains(snapshot, job.topology, nodes)

    def _choose_within(
        self,
        pod: PodRequest,
        confined: Sequence[frozenset[str] | None],
        excluded: AbstractSet[str] | None,
    ) -> Assignment | None:
        """The policy's node for `pod` in the first of `confined` that holds it, off `excluded`."""
        for allowed in confined:
            found = self.scheduler.choose(pod, excluded, allowed)
            if found is not None:
                return found
        return None

    def _gang_started(self, pods: Sequence[PodRequest], where: Mapping[str, Assignment]) -> None:
        gpus = sum(p.gpu_milli_total for p in pods) // MILLI_PER_GPU
        wait = self.clock.now - self._running[pods[0].key][0].job.arrival
        self.domains.gang((a.node for a in where.values()), gpus, wait)

    def _preempt(self, preemption: SimPreemption, leaf: str, unit: Unit, u: Preemptor) -> bool:
        """Evict the victims the search chooses for `unit` (`u`), then start it; False when
        the search found none."""
        choice = preemption.search(u, self.clock.now)
        if choice is None:
            return False
        preemption.nominate(u.key, u.priority, choice, self.clock.now)
        for pod_key in choice.pods:
            preemption.evicting(pod_key, self._running[pod_key][2].gpu_milli_total, self.clock.now)
            self._evict(pod_key)
        if not (self._admits(leaf, unit) and self._place(leaf, unit)):
            preemption.wasted += 1
            preemption.placed(u.key, self.clock.now)  # the nomination ends either way
        return True

    def _evict(self, key: str) -> None:
        """`key` is deleted by preemption: its job waits for it again."""
        entry, leaf, pod = self._running[key]
        self._stopped(key)
        self.scheduler.queued(pod)
        self.jobs_placed -= entry.done  # placed again when all its pods run again
        entry.placed.discard(key)
        if entry.job.is_gang and len(entry.placed) < entry.job.min_member:
            entry.gang_placed = False
        if (leaf, entry) not in self._requeue:
            self._requeue.append((leaf, entry))
        self.meter.requeued(leaf, pod.gpu_milli_total)
        self._restarted.add(key)

    def _stopped(self, key: str) -> None:
        """`key` no longer runs (finished or evicted)."""
        _entry, _leaf, pod = self._running.pop(key)
        self._seq_of.pop(key, None)
        assignment = self.scheduler.unbind(key)
        if assignment is not None:
            self.domains.charge(assignment.node, -milli(pod, assignment))
        self.usage.charge(key, None)
        self.clock.charge(-(pod.gpu_milli_total if assignment is None else milli(pod, assignment)))
        if self.preemption is not None:
            self.preemption.finished(key)

    def _account(self, start: float, decisions: int) -> None:
        self.seconds += time.perf_counter() - start
        self.decisions += decisions

    def _started(self, leaf: str, pod: PodRequest, assignment: Assignment, entry: Pending) -> None:
        self.scheduler.bind(pod, assignment)
        self.usage.charge(pod.key, (leaf, self.models.amounts(pod, assignment)))
        wait = self.clock.now - entry.job.arrival
        used = milli(pod, assignment)  # a share's milli depends on its GPU (DESIGN §12)
        if pod.key in self._restarted:  # the queue counted its wait when it first started
            self.meter.restarted(leaf, pod.gpu_milli_total)
        else:
            self.meter.started(leaf, pod.gpu_milli_total, wait)
        self.book.started(entry.job, pod, wait)  # from the first arrival to the last start
        entry.placed.add(pod.key)
        self._running[pod.key] = (entry, leaf, pod)
        self.clock.charge(used)
        self.domains.charge(assignment.node, used)
        self.events.append((self.arrived, self.clock.used))
        if self.preemption is not None:
            job = entry.job
            gang = job.min_member if job.is_gang else 0
            self.preemption.started(
                job.name, pod, leaf=leaf, priority=job.priority, gang=gang, now=self.clock.now
            )
        if entry.job.duration is not None:
            self._seq += 1
            self._seq_of[pod.key] = self._seq
            end = self.clock.now + entry.job.duration
            heapq.heappush(self.finishing, (end, self._seq, pod.key, used))

    def failed(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for entries in self.leaves.values():
            for entry in entries:
                out[entry.job.pod.pod_class] += len(entry.requests) - len(entry.placed)
        return out


def _heads(rounds: dict[str, LeafRound]) -> dict[str, Amounts]:
    """Each leaf's next unit's demand; leaves with nothing left drop out of `rounds`."""
    heads: dict[str, Amounts] = {}
    for leaf, leaf_round in list(rounds.items()):
        unit = leaf_round.head()
        if unit is None:
            del rounds[leaf]
        else:
            heads[leaf] = unit.demand
    return heads


def _check_queues(workload: Workload) -> None:
    tree = QuotaTree.build(workload.queues)
    for job in workload.jobs:
        if job.queue is not None and not tree.is_leaf(job.queue):
            raise ValueError(f"job {job.name}: queue {job.queue} is not a leaf of the workload")


def _cluster(spec: ClusterSpec, rng: random.Random, shuffle_nodes: bool) -> Cluster:
    if not shuffle_nodes:
        return build_cluster(spec)
    names = node_names(spec)
    order = list(range(len(names)))
    rng.shuffle(order)
    return build_cluster(spec, ranked_names(names, order).__getitem__)


def _typical(workload: Workload) -> Sequence[TypicalPod]:
    return typical_pods(
        PodShape.of(j.pod.cpu_milli, j.pod.gpus, j.pod.gpu_milli, j.pod.gpu_models)
        for j in workload.jobs
        for _ in range(j.replicas)
    )


def _instrument(state: _EventRun, cluster: Cluster, typical: Sequence[TypicalPod]) -> None:
    fragmentation = Fragmentation(typical)
    capacity = state.clock.capacity

    def share() -> float:
        return fragmented_share(cluster, fragmentation, capacity)

    def used() -> float:
        return round(100.0 * state.clock.used / capacity, 2) if capacity else 0.0

    state.measure = lambda: (share(), cluster.stats().fragmented_gpus)
    state.timeline.measure = lambda: (used(), share())


def run_events(
    spec: ClusterSpec,
    workload: Workload,
    policy_name: str,
    seed: int,
    *,
    config: SchedulerConfig | None = None,
    progress: Progress | None = None,
    shuffle_nodes: bool = False,
    preemption: PreemptionSettings | bool = True,
    history: Workload | None = None,
    restart_at: float | None = None,
    relearn: bool = True,
) -> RunResult:
    """One event-mode run; `seed` draws the random policy's choices (and the node order when
    `shuffle_nodes`). Units that cannot start evict victims and starving units get holds
    (DESIGN §11, `evictions`) with the `preemption:` settings of `config` (True, the default:
    the shipped ones unless `config` says otherwise), those given, or none (False), for every
    policy alike.

    What the policies know of the workload in advance: without `history`, `fgd` is handed this
    workload's own typical pods (an oracle) and the learning scores start from their prior;
    with it (the pods of an earlier day), `fgd` gets `history`'s typical pods and the learning
    scores have seen its pods (`Scoring.seen`) before the first arrival. The fragmentation the
    run reports is measured against this workload's typical pods either way.

    `restart_at`: the scheduler restarts at the first event at or after this time, with the
    policy made afresh (a learning score forgets what it learned); with `relearn` its learning
    scores are shown the pods running then, as the runtime's intake shows them."""
    if preemption is True:
        preemption = (config or load_config(None)).preemption
    settings = preemption if isinstance(preemption, PreemptionSettings) else None
    rng = random.Random(seed)
    cluster = _cluster(spec, rng, shuffle_nodes)
    typical = _typical(workload)
    known = typical if history is None else _typical(history)
    policy_name = canonical_policy(policy_name)

    def fresh() -> SimPolicy:
        return make_policy(policy_name, known, config)

    scheduler = SimScheduler(cluster, fresh(), rng)
    if history is not None:
        for job in history.jobs:
            for request in job_requests(job):
                scheduler.policy.scoring.seen(request)
    _check_queues(workload)
    levels = DEFAULT_TOPOLOGY_LEVELS if config is None else config.topology_levels
    state = _EventRun(spec, workload, scheduler, settings, levels)
    if restart_at is not None:
        state.restart = (restart_at, fresh, relearn)
    _instrument(state, cluster, typical)
    state.run(progress)
    return _result(state, workload, policy_name, seed)


def _result(state: _EventRun, workload: Workload, policy_name: str, seed: int) -> RunResult:
    capacity = state.clock.capacity
    failed = state.failed()
    total_pods = sum(j.replicas for j in workload.jobs)
    samples = state.timeline.samples
    longest = state.book.longest_8gpu
    return RunResult(
        policy=policy_name,
        seed=seed,
        allocation=allocation_by_arrival(state.events, capacity) if capacity else {},
        fragmented_share=state.fragmented[0],
        fragmented_gpus=state.fragmented[1],
        pods_arrived=total_pods,
        pods_placed=total_pods - sum(failed.values()),
        failed=dict(sorted(failed.items())),
        decisions_per_second=round(state.decisions / state.seconds, 1) if state.seconds else 0.0,
        gang_wait_seconds=round(statistics.fmean(state.waits), 2) if state.waits else None,
        mean_allocation=state.clock.mean_percent(),
        peak_allocation=round(100.0 * state.clock.peak / capacity, 2) if capacity else 0.0,
        jobs_total=len(workload.jobs),
        jobs_placed=state.jobs_placed,
        queues=state.meter.reports() if workload.queues else (),
        utilisation=state.clock.utilisation(samples[-1].allocation if samples else 0.0),
        fragmentation_mean=state.timeline.mean_fragmentation(),
        waits=state.book.report(),
        longest_8gpu_wait=None if longest is None else round(longest, 2),
        timeline=tuple(state.timeline.all_samples),
        preemption=None if state.preemption is None else state.preemption.report(),
        domains=state.domains.figures(),
        gang_wait_p99=state.domains.gang_wait_p99(),
        figures=state.book.figures(),
    )
