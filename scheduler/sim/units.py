"""Event mode's pending work: jobs waiting in their leaf queue, and the units they start as.

A unit is what admission and placement decide on at once: a gang's first `minMember` replicas
(their requests summed, placed all or none), or one pod (any replica of a plain job, and a gang's
replicas beyond `minMember` once its gang started). Inside a leaf, jobs wait in order of priority
(higher first), then arrival, then name; a job's units follow each other.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from scheduler.placement import PodRequest
from scheduler.quota import add_into, request_amounts
from scheduler.quota.models import model_amounts, models_named
from scheduler.sim.workload import Job

__all__ = ["LeafRound", "Pending", "Unit", "enqueue"]


@dataclass(slots=True)
class Pending:
    """A job that arrived and has replicas not yet started."""

    job: Job
    requests: list[PodRequest]
    gang_placed: bool = False
    placed: set[str] = field(default_factory=set)
    demands: dict[str, Mapping[str, int]] = field(default_factory=dict)
    """What each unit asks of its queue (`asked`), by pod key ("": the gang's first `minMember`
    replicas): a unit is made again at every pass of its leaf, its demand once."""

    @property
    def done(self) -> bool:
        return len(self.placed) == len(self.requests)

    @property
    def order(self) -> tuple[int, float, str]:
        return -self.job.priority, self.job.arrival, self.job.name


@dataclass(slots=True)
class Unit:
    entry: Pending
    pods: list[PodRequest]
    gang: bool
    demand: Mapping[str, int] = field(init=False)

    def __post_init__(self) -> None:
        key = "" if self.gang else self.pods[0].key
        demand = self.entry.demands.get(key)
        if demand is None:
            summed: dict[str, int] = {}
            for pod in self.pods:
                add_into(summed, asked(pod))
            demand = self.entry.demands[key] = summed
        self.demand = demand


def asked(pod: PodRequest) -> dict[str, int]:
    """What a waiting pod asks of its queue: its request, under its model's key too when it
    can run on one model only (DESIGN §10 "Per GPU model", as the runtime asks)."""
    amounts = request_amounts(pod)
    models = models_named(pod)
    if len(models) != 1:
        return amounts
    return amounts | model_amounts(amounts, next(iter(models)))


def enqueue(entries: list[Pending], entry: Pending) -> None:
    """Insert `entry` in its place (priority, arrival, name) among a leaf's waiting jobs."""
    bisect.insort(entries, entry, key=lambda e: e.order)


def _units(entries: list[Pending]) -> Iterator[Unit]:
    """The units of `entries`, in order, read as they are tried (a gang that starts goes on with
    its remaining replicas; one that does not start is passed over whole)."""
    for entry in entries:
        job = entry.job
        if job.is_gang and not entry.gang_placed:
            yield Unit(entry, entry.requests[: job.min_member], gang=True)
            if not entry.gang_placed:
                continue
        for pod in entry.requests:
            if pod.key not in entry.placed:
                yield Unit(entry, [pod], gang=False)


class LeafRound:
    """One pass over a leaf's units: each is offered once (`head`, then `take`)."""

    def __init__(self, entries: list[Pending]) -> None:
        self._units = _units(entries)
        self._head: Unit | None = None

    def head(self) -> Unit | None:
        """The next unit not yet offered (None: the leaf has nothing more this pass)."""
        if self._head is None:
            self._head = next(self._units, None)
        return self._head

    def take(self) -> Unit:
        unit = self.head()
        if unit is None:
            raise LookupError("no unit left in this round")
        self._head = None
        return unit
