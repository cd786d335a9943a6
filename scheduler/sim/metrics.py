"""Event mode's living-cluster figures: waits per pod class, the timeline, the allocation clock.

* Wait: seconds from a job's arrival to the start of each of its pods. Pods are grouped by class:
  `share` (< 1 GPU), `1-gpu`, `2-gpu`, `4-gpu`, `8-gpu`, `gang` (every pod of a job with
  `minMember > 1`, whatever its size), then `cpu`, `other` and `mig` when present. Per class:
  pods arrived, pods started, p50 and p99 (nearest rank, over the pods that started) and the
  longest wait. Separately, the longest wait of any pod asking 8 whole GPUs (gang or not).
* Timeline: the cluster sampled at a fixed period, `TIMELINE_POINTS + 1` instants evenly spaced
  over the arrival window (first to last arrival, both included): GPU allocation and the
  fragmentation amount (FGD's Σ F over nodes), each in percent of GPU capacity. A sample at time
  t shows the state after every event at or before t was handled.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from scheduler.placement import PodRequest
from scheduler.sim.queues import percentile
from scheduler.sim.workload import Job

__all__ = [
    "TIMELINE_POINTS",
    "AllocationClock",
    "ClassWaits",
    "Sample",
    "Timeline",
    "WaitBook",
    "wait_class",
]

TIMELINE_POINTS = 100
GANG = "gang"
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


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


class WaitBook:
    """Collects the waits; the run calls `arrived` per job and `started` per pod."""

    def __init__(self) -> None:
        self._pods: Counter[str] = Counter()
        self._waits: dict[str, list[float]] = {}
        self.longest_8gpu: float | None = None

    def arrived(self, job: Job) -> None:
        self._pods[wait_class(job)] += job.replicas

    def started(self, job: Job, pod: PodRequest, wait: float) -> None:
        self._waits.setdefault(wait_class(job), []).append(wait)
        if pod.gpus == 8:
            self.longest_8gpu = max(wait, self.longest_8gpu or 0.0)

    def report(self) -> dict[str, ClassWaits]:
        known = [c for c in CLASS_ORDER if c in self._pods]
        return {c: self._class(c) for c in known + sorted(set(self._pods) - set(known))}

    def _class(self, name: str) -> ClassWaits:
        waits = self._waits.get(name, [])
        return ClassWaits(
            pods=self._pods[name],
            started=len(waits),
            p50=_rounded(percentile(waits, 0.50)),
            p99=_rounded(percentile(waits, 0.99)),
            longest=_rounded(max(waits, default=None)),
        )


@dataclass(frozen=True, slots=True)
class Sample:
    time: float
    allocation: float  # % of GPU capacity
    fragmentation: float  # % of GPU capacity


class Timeline:
    """Samples `measure()` -> (allocation %, fragmentation %) at the fixed instants of the window
    [start, end]; the run calls `sample_until(t)` before the state changes at time t."""

    def __init__(
        self,
        start: float,
        end: float,
        measure: Callable[[], tuple[float, float]],
        points: int = TIMELINE_POINTS,
    ) -> None:
        step = (end - start) / points if end > start else 0.0
        self.times = [start + i * step for i in range(points)] + [end] if step else [start]
        self.measure = measure
        self.samples: list[Sample] = []

    def sample_until(self, before: float) -> None:
        """Sample every instant earlier than `before` not sampled yet (the current state)."""
        while len(self.samples) < len(self.times) and self.times[len(self.samples)] < before:
            allocation, fragmentation = self.measure()
            self.samples.append(Sample(self.times[len(self.samples)], allocation, fragmentation))

    def finish(self) -> None:
        self.sample_until(float("inf"))

    def mean_fragmentation(self) -> float | None:
        if not self.samples:
            return None
        return round(statistics.fmean(s.fragmentation for s in self.samples), 2)


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
