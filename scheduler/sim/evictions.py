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

The starvation guard runs as in the scheduler, with the same `Nominations` book and the same
`take_hold`: a unit first in its leaf's order (the first of the leaf's pass that could not
start), admitted, and waiting (since it first could not start) longer than `starvationSeconds`
gets a hold; placement keeps every other unit of equal or lower priority off its nodes
(`blocked`) until U starts or the hold runs out. A hold whose nodes drained is renewed on them
the moment it runs out (a unit holding now never backs off, so nothing else is placed between
the two). A victim choice nominates U for the moment it is placed, which ends the holds that
give way to it (DESIGN §11).

Reported (`EvictionReport`): the victim sets applied, pods evicted, GPU-seconds lost, gangs cut
beyond their spares (must be 0), evictions after which U still did not start (must be 0), the
starvation holds taken and the GPU-seconds they held.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from scheduler.placement import Placer, PodRequest
from scheduler.preemption import (
    NoChoice,
    Nominations,
    PreemptionSettings,
    Preemptor,
    Running,
    RunningIndex,
    VictimChoice,
    VictimReason,
    find_victims,
    find_victims_where_it_may_start,
    take_hold,
)
from scheduler.quota import Amounts, QuotaTree, Usage

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
    holds: int = 0  # starvation holds taken
    held_gpu_seconds: float = 0.0  # GPU-seconds those holds kept


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
        self,
        placer: Placer,
        tree: QuotaTree,
        usage: Usage,
        settings: PreemptionSettings,
        capacity: Amounts,
    ) -> None:
        """`capacity`: the root's (`scheduler.quota.capacity`), which fair shares divide."""
        self.placer, self.tree, self.usage, self.settings = placer, tree, usage, settings
        self.capacity = capacity
        self.index = RunningIndex(placer.snapshot)
        self._jobs: dict[str, _Job] = {}
        self._job_of: dict[str, str] = {}  # pod key -> job name
        self._pods: dict[str, dict[str, PodRequest]] = {}  # job -> running pods
        self._since: dict[str, float] = {}  # pod key -> when it started
        self._retry: dict[str, float] = {}  # unit key -> no search before
        self._retry_hold: dict[str, float] = {}  # unit key -> no hold looked for before
        self.preemptions = self.evicted = self.partial = self.wasted = 0
        self.reasons: Counter[str] = Counter()
        self.lost = 0.0
        self.nominations = Nominations()
        self._waiting: dict[str, float] = {}  # unit key -> when it first could not start
        self.holds = 0
        self.now = 0.0
        self.wake: list[float] = []  # times the run must look again (a hold times out)

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

    def search(self, u: Preemptor, now: float) -> VictimChoice | None:
        """Victims that let unit `u` start, or None (then no search for a while)."""
        key = u.key
        if self._retry.get(key, -1.0) > now:
            return None
        held = self.nominations.held_from(u.priority, key)
        found = find_victims_where_it_may_start(
            u,
            held,
            lambda p: find_victims(
                p, self.placer, self.index, self.tree, self.usage, (), self.settings, self.capacity
            ),
        )
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

    def blocked(self, key: str, priority: int) -> AbstractSet[str] | None:
        """Nodes unit `key` must not be placed on: held for other units of at least `priority`."""
        return self.nominations.blocked(priority, key) if len(self.nominations) else None

    def tick(self, now: float) -> None:
        """Holds past `starvationHoldSeconds` end (the next starving unit gets its turn)."""
        self.now = now
        if len(self.nominations):
            self.nominations.expire(now, self.settings)

    def nominate(self, key: str, priority: int, choice: VictimChoice, now: float) -> None:
        """U evicts for `choice`: the holds on its nodes that give way to it end."""
        reclaim = any(e.reason is VictimReason.RECLAIM for e in choice.evictions)
        self.nominations.nominate(key, priority, choice.nodes, (), now, reclaim=reclaim)

    def placed(self, key: str, now: float) -> None:
        """Unit `key` started: it no longer waits, and what was held for it is free."""
        if self._waiting.pop(key, None) is not None or len(self.nominations):
            self.nominations.release(key, now)

    def starving(self, preemptor: Preemptor, now: float, *, head: bool, admitted: bool) -> None:
        """`preemptor` could not start at `now`; the first of its leaf (`head`), admitted and
        waiting longer than `starvationSeconds`, gets a hold if one is free."""
        since = self._waiting.setdefault(preemptor.key, now)
        if not (head and admitted and now - since >= self.settings.starvation_seconds):
            return
        if self._retry_hold.get(preemptor.key, -1.0) > now or self.nominations.holds(preemptor.key):
            return  # (a unit holding now may hold again the moment its hold runs out)
        settings = self.settings
        if take_hold(self.nominations, preemptor, self.placer, self.index, now, settings):
            self.holds += 1
            self.wake.append(now + settings.starvation_hold_seconds + 1.0)  # it times out then
        else:  # none free or none found: look again after the backoff
            self._retry_hold[preemptor.key] = now + RETRY_SECONDS

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
            holds=self.holds,
            held_gpu_seconds=round(self.nominations.held_gpu_seconds(self.now), 1),
        )
