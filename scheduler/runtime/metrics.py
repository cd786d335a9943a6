"""Scheduler metrics on their own registry (served by `agent.httpserver.MetricsServer`).

Names follow `gputopo_scheduler_<name>_<unit>`; counters end in `_total`. Pending pods by reason
are read at scrape time from a callback (the loop's view), so nothing is computed per decision.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

PREFIX = "gputopo_scheduler"
_CYCLE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_WAIT_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)


class _PendingCollector(Collector):
    """`gputopo_scheduler_pending_pods{reason}` from a callback, evaluated per scrape."""

    def __init__(self, source: Callable[[], Mapping[str, int]]) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            f"{PREFIX}_pending_pods", "Pods waiting to be scheduled, by reason", labels=["reason"]
        )
        for reason, count in sorted(self._source().items()):
            family.add_metric([reason], float(count))
        yield family


QueueSamples = Mapping[str, list[tuple[tuple[str, ...], float]]]
"""Per-queue gauge samples by metric suffix: `used` -> [((queue, resource), value)]."""
_QUEUE_GAUGES = {
    "used": "What the queue's subtree uses (GPUs and CPUs in units, memory in bytes)",
    "borrowed": "What the queue's subtree uses beyond its min",
    "min": "The queue's guaranteed share",
    "max": "The queue's cap",
    "fair_share": "The queue's fair share (min plus its weighted part of idle capacity)",
    "pending_units": "Units (pods or gangs) waiting in the queue",
}


class _QueueCollector(Collector):
    """`gputopo_scheduler_queue_<figure>{queue,resource}` from a callback, per scrape."""

    def __init__(self, source: Callable[[], QueueSamples]) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        samples = self._source()
        for suffix, doc in _QUEUE_GAUGES.items():
            labels = ["queue"] if suffix == "pending_units" else ["queue", "resource"]
            family = GaugeMetricFamily(f"{PREFIX}_queue_{suffix}", doc, labels=labels)
            for values, value in samples.get(suffix, ()):
                family.add_metric(list(values), value)
            yield family


class SchedulerMetrics:
    """Every metric of `gputopo-scheduler run`, registered on `self.registry`."""

    def __init__(self, version: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        reg = self.registry
        self.attempts = Counter(
            f"{PREFIX}_schedule_attempts_total",
            "Scheduling attempts of a pod or gang, by result "
            "(scheduled, unschedulable, share-lock, error)",
            ["result"],
            registry=reg,
        )
        self.cycle_seconds = Histogram(
            f"{PREFIX}_scheduling_cycle_duration_seconds",
            "Time from popping a unit to its binds being issued",
            buckets=_CYCLE_BUCKETS,
            registry=reg,
        )
        self.gang_wait_seconds = Histogram(
            f"{PREFIX}_gang_wait_duration_seconds",
            "Time from a gang's first pending member to its whole minMember being bound",
            buckets=_WAIT_BUCKETS,
            registry=reg,
        )
        self.binds = Counter(
            f"{PREFIX}_binds_total",
            "Pod bindings, by result (bound, conflict, error; locked: a share lock was held)",
            ["result"],
            registry=reg,
        )
        self.api_errors = Counter(
            f"{PREFIX}_api_errors_total",
            "Failed Kubernetes API calls, by operation",
            ["operation"],
            registry=reg,
        )
        self.preemption_victims = Counter(
            f"{PREFIX}_preemption_victims_total",
            "Pods evicted to make room for another unit, by reason (preempt, reclaim)",
            ["reason"],
            registry=reg,
        )
        self.preemption_attempts = Counter(
            f"{PREFIX}_preemption_attempts_total",
            "Victim searches for a unit that could not start, by result (evicted: victims "
            "chosen; none: no victim set lets it start)",
            ["result"],
            registry=reg,
        )
        self.held_gpu_seconds = Counter(
            f"{PREFIX}_held_gpu_seconds_total",
            "GPU-seconds held for starving units (starvation holds: nodes kept from lower-"
            "priority units, nobody evicted)",
            registry=reg,
        )
        self.admission_rejections = Counter(
            f"{PREFIX}_admission_rejections_total",
            "Pods this scheduler bound that the kubelet refused at admission, by the pod's "
            "status reason (UnexpectedAdmissionError, OutOf<resource>): another scheduler took "
            "the same free resources at the same moment",
            ["reason"],
            registry=reg,
        )
        self.leader = Gauge(
            f"{PREFIX}_leader", "1 while this replica holds the lease", registry=reg
        )
        build = Gauge(f"{PREFIX}_build_info", "Build information", ["version"], registry=reg)
        build.labels(version=version).set(1)

    def watch_queues(self, source: Callable[[], QueueSamples]) -> None:
        """Report `source()` as the per-queue gauges on every scrape."""
        self.registry.register(_QueueCollector(source))

    def watch_pending(self, source: Callable[[], Mapping[str, int]]) -> None:
        """Report `source()` as pending pods by reason on every scrape."""
        self.registry.register(_PendingCollector(source))
