"""Event mode: jobs arrive at their times, run for their durations, and gangs wait for room.

Time advances from event to event (an arrival or a pod finishing). After every event the pending
jobs are tried in arrival order, none blocking the ones behind it: a gang (`minMember > 1`) places
its first `minMember` replicas with `place_gang` (all or none; nothing is held while it waits),
then the rest one by one like any other replica. A pod runs `duration` seconds from the moment it
is placed (for ever without one). A job is placed once all its replicas are; its gang wait is the
time from arrival until its gang was placed.

Reported: jobs placed, the mean gang wait, the time-weighted mean and the peak GPU allocation, the
allocation against arrived demand (as in the protocol), fragmentation as the last job arrived, the
pods never placed (by class) and placement decisions per second.
"""

from __future__ import annotations

import heapq
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from agent.model import MILLI_PER_GPU
from scheduler.config import SchedulerConfig
from scheduler.placement import Assignment, PodRequest, place_gang
from scheduler.placement.fgd import Fragmentation, PodShape, typical_pods
from scheduler.sim.build import build_cluster, job_requests
from scheduler.sim.policies import SimScheduler, make_policy
from scheduler.sim.protocol import RunResult, allocation_by_arrival, fragmented_share
from scheduler.sim.workload import ClusterSpec, Job, Workload

__all__ = ["run_events"]

Progress = Callable[[int, int], None]


@dataclass(slots=True)
class _Pending:
    job: Job
    requests: list[PodRequest]
    gang_placed: bool = False
    placed: set[str] = field(default_factory=set)


@dataclass(slots=True)
class _Clock:
    """Integrates the allocation over time."""

    capacity: int
    start: float = 0.0
    now: float = 0.0
    used: int = 0
    area: float = 0.0
    peak: int = 0

    def advance(self, to: float) -> None:
        self.area += self.used * (to - self.now)
        self.now = to

    def charge(self, milli: int) -> None:
        self.used += milli
        self.peak = max(self.peak, self.used)

    def mean_percent(self) -> float:
        span = self.now - self.start
        if span <= 0 or not self.capacity:
            return round(100.0 * self.used / self.capacity, 2) if self.capacity else 0.0
        return round(100.0 * self.area / span / self.capacity, 2)


class _EventRun:
    def __init__(self, spec: ClusterSpec, workload: Workload, scheduler: SimScheduler) -> None:
        self.scheduler = scheduler
        self.jobs = sorted(workload.jobs, key=lambda j: (j.arrival, j.name))
        self.clock = _Clock(capacity=spec.gpu_count * MILLI_PER_GPU)
        self.finishing: list[tuple[float, int, str, int]] = []
        self.pending: list[_Pending] = []
        self.waits: list[float] = []
        self.jobs_placed = 0
        self.decisions = 0
        self.seconds = 0.0
        self.arrived = 0
        self.events: list[tuple[int, int]] = []
        self._seq = 0
        self.fragmented: tuple[float, int] = (0.0, 0)
        self.measure: Callable[[], tuple[float, int]] = lambda: (0.0, 0)

    def run(self, progress: Progress | None) -> None:
        self.clock.start = self.clock.now = self.jobs[0].arrival if self.jobs else 0.0
        next_job = 0
        while next_job < len(self.jobs) or self.finishing:
            arrival = self.jobs[next_job].arrival if next_job < len(self.jobs) else float("inf")
            finish = self.finishing[0][0] if self.finishing else float("inf")
            self.clock.advance(min(arrival, finish))
            while self.finishing and self.finishing[0][0] <= self.clock.now:
                _t, _seq, key, milli = heapq.heappop(self.finishing)
                self.scheduler.unbind(key)
                self.clock.charge(-milli)
            while next_job < len(self.jobs) and self.jobs[next_job].arrival <= self.clock.now:
                job = self.jobs[next_job]
                self.pending.append(_Pending(job, job_requests(job)))
                self.arrived += job.replicas * job.pod.gpu_milli_total
                next_job += 1
            self._schedule()
            if next_job == len(self.jobs) and self.fragmented == (0.0, 0):
                self.fragmented = self.measure()  # the cluster as the last job arrived
            if progress is not None:
                progress(next_job, len(self.jobs))

    def _schedule(self) -> None:
        still: list[_Pending] = []
        for entry in self.pending:
            if not self._try(entry):
                still.append(entry)
        self.pending = still

    def _try(self, entry: _Pending) -> bool:
        job = entry.job
        if job.is_gang and not entry.gang_placed:
            members = entry.requests[: job.min_member]
            start = time.perf_counter()
            result = place_gang(members, self.scheduler.placer)
            self._account(start, len(members))
            if not result.ok:
                return False
            for pod in members:
                self._started(pod, result.assignments[pod.key], entry)
            entry.gang_placed = True
            self.waits.append(self.clock.now - job.arrival)
        for pod in entry.requests:
            if pod.key in entry.placed:
                continue
            start = time.perf_counter()
            assignment = self.scheduler.choose(pod)
            self._account(start, 1)
            if assignment is None:
                continue
            self._started(pod, assignment, entry)
        if len(entry.placed) < len(entry.requests):
            return False
        self.jobs_placed += 1
        return True

    def _account(self, start: float, decisions: int) -> None:
        self.seconds += time.perf_counter() - start
        self.decisions += decisions

    def _started(self, pod: PodRequest, assignment: Assignment, entry: _Pending) -> None:
        self.scheduler.bind(pod, assignment)
        entry.placed.add(pod.key)
        self.clock.charge(pod.gpu_milli_total)
        self.events.append((self.arrived, self.clock.used))
        if entry.job.duration is not None:
            self._seq += 1
            end = self.clock.now + entry.job.duration
            heapq.heappush(self.finishing, (end, self._seq, pod.key, pod.gpu_milli_total))

    def failed(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for entry in self.pending:
            out[entry.job.pod.pod_class] += len(entry.requests) - len(entry.placed)
        return out


def run_events(
    spec: ClusterSpec,
    workload: Workload,
    policy_name: str,
    seed: int,
    *,
    config: SchedulerConfig | None = None,
    progress: Progress | None = None,
) -> RunResult:
    """One event-mode run; `seed` draws the random policy's choices."""
    cluster = build_cluster(spec)
    shapes = [
        PodShape.of(j.pod.cpu_milli, j.pod.gpus, j.pod.gpu_milli, j.pod.gpu_models)
        for j in workload.jobs
        for _ in range(j.replicas)
    ]
    typical = typical_pods(shapes)
    scheduler = SimScheduler(
        cluster, make_policy(policy_name, typical, config), random.Random(seed)
    )
    state = _EventRun(spec, workload, scheduler)
    fragmentation = Fragmentation(typical)
    state.measure = lambda: (
        fragmented_share(cluster, fragmentation, state.clock.capacity),
        cluster.stats().fragmented_gpus,
    )
    state.run(progress)
    capacity = state.clock.capacity
    failed = state.failed()
    total_pods = sum(j.replicas for j in workload.jobs)
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
    )
