"""Event mode's living-cluster figures: waits per pod class, the timeline, the allocation clock.

* Wait: seconds from a job's arrival to the start of each of its pods. Pods are grouped by class:
  `share` (< 1 GPU), `1-gpu`, `2-gpu`, `4-gpu`, `8-gpu`, `gang` (every pod of a job with
  `minMember > 1`, whatever its size), then `cpu`, `other` and `mig` when present. Per class:
  pods arrived, pods started, p50 and p99 (nearest rank, over the pods that started) and the
  longest wait, and the mean; `all` is every pod together. Separately, the longest wait of any
  pod asking 8 whole GPUs (gang or not). An evicted pod runs again from the start, and its wait is
  counted from its job's first arrival to its last start.
* Over all pods: the GPU-weighted mean wait (each pod's wait weighted by the GPUs it asks, shares
  by their fraction). Over jobs that finished: the mean completion time (arrival to the end of the
  job's last pod) and the mean slowdown (completion time over the job's duration). The makespan
  is the time from the first arrival to the last departure.
* Timeline: the cluster sampled at a fixed period, `TIMELINE_POINTS + 1` instants evenly spaced
  over the arrival window (first to last arrival, both included): GPU allocation and the
  fragmentation amount (FGD's Σ F over nodes), each in percent of GPU capacity. A sample at time
  t shows the state after every event at or before t was handled. The figures over time
  (`frag over time%`) are the window's; the samples go on after it, at most `TIMELINE_POINTS`
  more, to the run's end (the last departure), for the plot.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from scheduler.placement import PodRequest
from scheduler.sim.queues import percentile
from scheduler.sim.workload import Job

__all__ = [
    "ALL",
    "TIMELINE_POINTS",
    "AllocationClock",
    "ClassWaits",
    "JobFigures",
    "Sample",
    "Timeline",
    "WaitBook",
    "wait_class",
]

TIMELINE_POINTS = 100
GANG = "gang"
ALL = "all"
CLASS_ORDER = ("share", "1-gpu", "2-gpu", "4-gpu", "8-gpu", GANG, "cpu", "other", "mig")


def wait_class(job: Job) -> str:
    """The class a job's pods are counted in (see the module docstring)."""
    return GANG if job.is_gang else job.pod.pod_class


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassWaits:
    pods: int
    started: int
    p50: float | None
    p99: float | None
    longest: float | None
    mean: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class JobFigures:
    """The figures over every pod or job of a run (module docstring); None: nothing to average."""

    gpu_weighted_wait: float | None
    mean_completion: float | None
    mean_slowdown: float | None
    makespan: float | None


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


class WaitBook:
    """Collects the waits and completions; the run calls `arrived` per job, `started` per pod
    start (a restart after an eviction replaces that pod's wait) and `finished` per pod that ran
    its whole duration."""

    def __init__(self) -> None:
        self._pods: Counter[str] = Counter()
        self._waits: dict[str, tuple[str, float, float]] = {}  # pod -> class, wait, GPUs
        self._left: Counter[str] = Counter()  # job -> pods not finished yet
        self._completions: list[tuple[float, float]] = []  # per finished job: time, duration
        self.first: float | None = None
        self.last_departure: float | None = None

    def arrived(self, job: Job) -> None:
        self._pods[wait_class(job)] += job.replicas
        self._left[job.name] += job.replicas
        self.first = job.arrival if self.first is None else min(self.first, job.arrival)

    def started(self, job: Job, pod: PodRequest, wait: float) -> None:
        self._waits[pod.key] = (wait_class(job), wait, pod.gpu_milli_total / 1000)

    def finished(self, job: Job, now: float) -> None:
        """A pod of `job` ran its whole duration and left at `now`."""
        self.last_departure = now if self.last_departure is None else max(self.last_departure, now)
        self._left[job.name] -= 1
        if self._left[job.name] == 0 and job.duration:
            self._completions.append((now - job.arrival, job.duration))

    @property
    def longest_8gpu(self) -> float | None:
        eight = [w for key, (_c, w, gpus) in self._waits.items() if gpus == 8]
        return max(eight, default=None)

    def report(self) -> dict[str, ClassWaits]:
        """Per class in `CLASS_ORDER` (others after, by name), then `all`."""
        by_class: dict[str, list[float]] = {}
        for name, wait, _gpus in self._waits.values():
            by_class.setdefault(name, []).append(wait)
        known = [c for c in CLASS_ORDER if c in self._pods]
        out = {
            c: _waits(self._pods[c], by_class.get(c, []))
            for c in known + sorted(set(self._pods) - set(known))
        }
        out[ALL] = _waits(sum(self._pods.values()), [w for _c, w, _g in self._waits.values()])
        return out

    def figures(self) -> JobFigures:
        weighted = sum(w * g for _c, w, g in self._waits.values())
        gpus = sum(g for _c, _w, g in self._waits.values())
        done = self._completions
        span = None
        if self.first is not None and self.last_departure is not None:
            span = self.last_departure - self.first
        return JobFigures(
            gpu_weighted_wait=_rounded(weighted / gpus if gpus else None),
            mean_completion=_rounded(statistics.fmean(c for c, _d in done) if done else None),
            mean_slowdown=_rounded(statistics.fmean(c / d for c, d in done) if done else None),
            makespan=_rounded(span),
        )


def _waits(pods: int, waits: list[float]) -> ClassWaits:
    return ClassWaits(
        pods=pods,
        started=len(waits),
        p50=_rounded(percentile(waits, 0.50)),
        p99=_rounded(percentile(waits, 0.99)),
        longest=_rounded(max(waits, default=None)),
        mean=_rounded(statistics.fmean(waits) if waits else None),
    )


@dataclass(frozen=True, slots=True)
class Sample:
    time: float
    allocation: float  # % of GPU capacity
    fragmentation: float  # % of GPU capacity


class Timeline:
    """Samples `measure()` -> (allocation %, fragmentation %) at the fixed instants of the window
    [start, end], then on after it at the same period to the run's end (`finish(at)`); the run
    calls `sample_until(t)` before the state changes at time t.

    After the window at most `points` instants are kept: each time there would be more, every
    other one is dropped and the period doubles, so that a long tail costs no more than the window
    and every run over the same window samples a subset of the same instants.
    """

    def __init__(
        self,
        start: float,
        end: float,
        measure: Callable[[], tuple[float, float]],
        points: int = TIMELINE_POINTS,
    ) -> None:
        self.step = (end - start) / points if end > start else 0.0
        self.times = (
            [start + i * self.step for i in range(points)] + [end] if self.step else [start]
        )
        self.end = end
        self.points = points
        self.measure = measure
        self.samples: list[Sample] = []
        self._tail: list[tuple[int, Sample]] = []  # (k, sample at end + k * step)
        self._stride = 1

    def sample_until(self, before: float) -> None:
        """Sample every instant earlier than `before` not sampled yet (the current state)."""
        self._window_until(before)
        if len(self.samples) == len(self.times) and self.step:
            self._tail_until(before)

    def finish(self, at: float | None = None) -> None:
        """Sample the window's instants left, then the tail before `at` (the run's end) and `at`."""
        self._window_until(math.inf)
        if at is not None and self.step and at > self.end:
            self._tail_until(at)
            self._tail.append((0, self._sample(at)))

    def _window_until(self, before: float) -> None:
        while len(self.samples) < len(self.times) and self.times[len(self.samples)] < before:
            self.samples.append(self._sample(self.times[len(self.samples)]))

    def _tail_until(self, before: float) -> None:
        k = self._tail[-1][0] + self._stride if self._tail else self._stride
        while self.end + k * self.step < before:
            self._tail.append((k, self._sample(self.end + k * self.step)))
            if len(self._tail) > self.points:
                self._stride *= 2
                self._tail = [(i, t) for i, t in self._tail if i % self._stride == 0]
            k = self._tail[-1][0] + self._stride if self._tail else self._stride

    @property
    def all_samples(self) -> list[Sample]:
        """The window's samples, then the tail's: the cluster from the first arrival to the end."""
        return self.samples + [t for _k, t in self._tail]

    def mean_fragmentation(self) -> float | None:
        """The mean over the window's samples (the arrival window)."""
        if not self.samples:
            return None
        return round(statistics.fmean(s.fragmentation for s in self.samples), 2)

    def _sample(self, time: float) -> Sample:
        allocation, fragmentation = self.measure()
        return Sample(time, allocation, fragmentation)


@dataclass(slots=True)
class AllocationClock:
    """Event mode's GPU allocation integrated over time (milli-GPU; the mean, the peak and the
    utilisation over the arrival window)."""

    capacity: int
    start: float = 0.0
    now: float = 0.0
    used: int = 0
    area: float = 0.0
    peak: int = 0
    window_end: float = 0.0  # the last arrival
    window_area: float = 0.0  # the area up to window_end

    def advance(self, to: float) -> None:
        self.area += self.used * (to - self.now)
        inside = min(to, self.window_end) - min(self.now, self.window_end)
        self.window_area += self.used * max(0.0, inside)
        self.now = to

    def charge(self, milli: int) -> None:
        self.used += milli
        self.peak = max(self.peak, self.used)

    def mean_percent(self) -> float:
        span = self.now - self.start
        if span <= 0 or not self.capacity:
            return round(100.0 * self.used / self.capacity, 2) if self.capacity else 0.0
        return round(100.0 * self.area / span / self.capacity, 2)

    def utilisation(self, at_last_arrival: float) -> float:
        """The mean over [start, window_end]; `at_last_arrival` when that window is empty."""
        span = self.window_end - self.start
        if span <= 0 or not self.capacity:
            return round(at_last_arrival, 2)
        return round(100.0 * self.window_area / span / self.capacity, 2)
