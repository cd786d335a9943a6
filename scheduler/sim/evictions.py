"""Event mode's preemption and reclaim (DESIGN §11), with the runtime's pure victim search.

The simulator keeps what `scheduler.preemption` reads as the scheduler does: a `RunningIndex`
of the running units (a gang job's started pods are one unit, its pods above `minMember` its
spares; each replica of a plain job is a unit of its own), updated as pods start and finish.
When a unit can start neither for lack of room nor under a max, `search` asks `find_victims`;
the run then evicts the victims at once (the simulator has no grace period, so no nomination is
needed: nothing can take the room before U) and starts U. An evicted pod goes back to its job's
queue and runs its whole duration again once placed: the GPU-seconds it had run are lost.

A unit that found no victim set does not search again for `RETRY_SECONDS` of simulated time
(the scheduler's backoff), which keeps a crowded run from searching after every event.

Reported (`EvictionReport`): the victim sets applied, pods evicted, GPU-seconds lost, gangs cut
beyond their spares (must be 0), and evictions after which U still did not start (must be 0).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from scheduler.placement import Placer, PodRequest
from scheduler.preemption import (
    NoChoice,
    PreemptionSettings,
    Preemptor,
    Running,
    RunningIndex,
    VictimChoice,
    find_victims,
)
from scheduler.quota import QuotaTree, Usage

__all__ = ["RETRY_SECONDS", "EvictionReport", "SimPreemption"]

RETRY_SECONDS = 60.0


@dataclass(frozen=True, slots=True, kw_only=True)
class EvictionReport:
    """What preemption did in one run."""

    preemptions: int
    pods_evicted: int
    gpu_seconds_lost: float
    partial_gangs: int
    wasted: int  # victim sets after which the preemptor still did not start
    by_reason: Mapping[str, int] = field(default_factory=dict)  # pods evicted per VictimReason


@dataclass(slots=True, kw_only=True)
class _Job:
    """A job's running pods as one unit (gang) or one unit per pod."""

    leaf: str
    priority: int
    gang: int  # minMember (0: not a gang)
    started: float = 0.0


class SimPreemption:
    """The run's running units, the victim search, and what evictions cost."""

    def __init__(
        self, placer: Placer, tree: QuotaTree, usage: Usage, settings: PreemptionSettings
    ) -> None:
        self.placer, self.tree, self.usage, self.settings = placer, tree, usage, settings
        self.index = RunningIndex(placer.snapshot)
        self._jobs: dict[str, _Job] = {}
        self._job_of: dict[str, str] = {}  # pod key -> job name
        self._pods: dict[str, dict[str, PodRequest]] = {}  # job -> running pods
        self._since: dict[str, float] = {}  # pod key -> when it started
        self._retry: dict[str, float] = {}  # unit key -> no search before
        self.preemptions = self.evicted = self.partial = self.wasted = 0
        self.reasons: Counter[str] = Counter()
        self.lost = 0.0

    def started(
        self, job: str, pod: PodRequest, *, leaf: str, priority: int, gang: int, now: float
    ) -> None:
        """`pod` of `job` runs from `now` (bound and charged already)."""
        info = self._jobs.setdefault(job, _Job(leaf=leaf, priority=priority, gang=gang))
        pods = self._pods.setdefault(job, {})
        if not pods:
            info.started = now
        pods[pod.key] = pod
        self._job_of[pod.key] = job
        self._since[pod.key] = now
        self._reindex(job, [pod.key])

    def finished(self, key: str) -> None:
        """`key` is gone (finished or evicted; unbound already)."""
        job = self._job_of.pop(key, None)
        self._since.pop(key, None)
        if job is None:
            return
        self._pods[job].pop(key, None)
        self._reindex(job, [key])

    def _reindex(self, job: str, changed: Sequence[str]) -> None:
        info, pods = self._jobs[job], self._pods[job]
        if not info.gang:
            for key in changed:
                self.index.remove(key)
                if key in pods:
                    self.index.add(self._unit(key, (key,), info, self._since[key], 0))
            return
        self.index.remove(job)
        if pods:
            spare = max(0, len(pods) - info.gang)
            self.index.add(self._unit(job, tuple(sorted(pods)), info, info.started, spare))

    @staticmethod
    def _unit(key: str, pods: tuple[str, ...], info: _Job, started: float, spare: int) -> Running:
        return Running(
            key=key,
            pods=pods,
            leaf=info.leaf,
            priority=info.priority,
            started=started,
            spare=spare,
        )

    def search(
        self, key: str, pods: Sequence[PodRequest], leaf: str, priority: int, now: float
    ) -> VictimChoice | None:
        """Victims that let unit `key` start, or None (then no search for a while)."""
        if self._retry.get(key, -1.0) > now:
            return None
        u = Preemptor(key=key, pods=tuple(pods), leaf=leaf, priority=priority)
        found = find_victims(u, self.placer, self.index, self.tree, self.usage, (), self.settings)
        if isinstance(found, NoChoice) or not found.evictions:
            self._retry[key] = now + RETRY_SECONDS
            return None
        self._retry.pop(key, None)
        self.preemptions += 1
        for eviction in found.evictions:
            self.reasons[eviction.reason.value] += len(eviction.pods)
            unit = self.index.get(eviction.unit)
            whole = unit is not None and set(eviction.pods) == set(unit.pods)
            if unit is not None and not whole and len(eviction.pods) > unit.spare:
                self.partial += 1
        return found

    def evicting(self, key: str, gpu_milli: int, now: float) -> None:
        """`key` is about to be evicted: count the GPU-seconds it ran."""
        self.evicted += 1
        self.lost += gpu_milli / 1000 * (now - self._since.get(key, now))

    def report(self) -> EvictionReport:
        return EvictionReport(
            preemptions=self.preemptions,
            pods_evicted=self.evicted,
            gpu_seconds_lost=round(self.lost, 1),
            partial_gangs=self.partial,
            wasted=self.wasted,
            by_reason=dict(sorted(self.reasons.items())),
        )
