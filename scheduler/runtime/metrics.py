"""Scheduler metrics on their own registry (served by `agent.httpserver.MetricsServer`).

Names follow `gputopo_scheduler_<name>_<unit>`; counters end in `_total`. Views of state (pending
pods and their oldest age by reason, per-queue figures, GPUs by model, kind and state) are read at
scrape time from callbacks, so nothing is computed per decision. They describe the cluster, not
the replica, so only the leader (`leading()`) exports them: a standby's cache sees the same
cluster (its pending pods all `queued`), and a sum over two replicas would count it twice, an
alert on them fire twice. Counters whose label values are known up front start at zero for each,
so a rate over them is 0, not missing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from scheduler.preemption import VictimReason
from scheduler.runtime.gpucount import GpuCounts

PREFIX = "gputopo_scheduler"
_CYCLE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_WAIT_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)


QueueSamples = Mapping[str, list[tuple[tuple[str, ...], float]]]
"""Per-queue gauge samples by metric suffix: `used` -> [((queue, resource), value)]."""
_QUEUE_GAUGES = {
    "used": "What the queue's subtree uses (GPUs and CPUs in units, memory in bytes)",
    "borrowed": "What the queue's subtree uses beyond its min",
    "min": "The queue's guaranteed share",
    "max": "The queue's cap",
    "fair_share": "The queue's fair share (min plus its weighted part of idle capacity)",
    "pending_units": "Units (pods or gangs) waiting in the queue",
    "paused": "1 while the queue, an ancestor or the whole scheduler is paused",
}
_PER_QUEUE = frozenset({"pending_units", "paused"})


class _QueueCollector(Collector):
    """`gputopo_scheduler_queue_<figure>{queue,resource}` from a callback, per scrape."""

    def __init__(self, source: Callable[[], QueueSamples], leading: Callable[[], bool]) -> None:
        self._source, self._leading = source, leading

    def collect(self) -> Iterator[Metric]:
        if not self._leading():
            return
        samples = self._source()
        for suffix, doc in _QUEUE_GAUGES.items():
            labels = ["queue"] if suffix in _PER_QUEUE else ["queue", "resource"]
            family = GaugeMetricFamily(f"{PREFIX}_queue_{suffix}", doc, labels=labels)
            for values, value in samples.get(suffix, ()):
                family.add_metric(list(values), value)
            yield family


class _LabelledGaugeCollector(Collector):
    """One gauge family `{labels: value}` from a callback, evaluated per scrape."""

    def __init__(
        self,
        name: str,
        doc: str,
        labels: list[str],
        source: Callable[[], Mapping[tuple[str, ...], float]],
        leading: Callable[[], bool],
    ) -> None:
        self._name, self._doc, self._labels, self._source = name, doc, labels, source
        self._leading = leading

    def collect(self) -> Iterator[Metric]:
        if not self._leading():
            return
        family = GaugeMetricFamily(self._name, self._doc, labels=self._labels)
        for values, value in sorted(self._source().items()):
            family.add_metric(list(values), float(value))
        yield family


class _GpuCollector(Collector):
    """`gputopo_scheduler_gpus{model,kind,state}` and `..._fragmented_gpus{model}`, per scrape."""

    def __init__(self, source: Callable[[], GpuCounts], leading: Callable[[], bool]) -> None:
        self._source, self._leading = source, leading

    def collect(self) -> Iterator[Metric]:
        if not self._leading():
            return
        counts = self._source()
        gpus = GaugeMetricFamily(
            f"{PREFIX}_gpus",
            "GPUs in the scheduler's cache by model, kind (whole, mig, share) and state "
            "(allocated, free, unhealthy)",
            labels=["model", "kind", "state"],
        )
        for labels, count in sorted(counts.gpus.items()):
            gpus.add_metric(list(labels), float(count))
        fragmented = GaugeMetricFamily(
            f"{PREFIX}_fragmented_gpus",
            "GPUs partly taken (a share or some MIG devices in use, room left), by model",
            labels=["model"],
        )
        for model, count in sorted(counts.fragmented.items()):
            fragmented.add_metric([model], float(count))
        yield gpus
        yield fragmented


_KNOWN_RESULTS = {
    "attempts": ("scheduled", "unschedulable", "error"),
    "binds": (
        "bound",
        "conflict",
        "fenced",
        "error",
        "binding-failed",  # a DRA device's binding failure condition
        "binding-timeout",  # its binding conditions not met in time
        "stopped",  # the scheduler stopped while a bind waited for them
    ),
    "preemption_victims": tuple(VictimReason),
    "preemption_attempts": ("evicted", "none"),
}


class SchedulerMetrics:
    """Every metric of `gputopo-scheduler run`, registered on `self.registry`; the cluster views
    (`watch_*`) only while `leading()` (the fence's `may_bind`: the replica that binds)."""

    def __init__(
        self,
        version: str,
        registry: CollectorRegistry | None = None,
        *,
        leading: Callable[[], bool] = lambda: True,
    ) -> None:
        self._leading = leading
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
        for attribute, values in _KNOWN_RESULTS.items():
            for value in values:
                getattr(self, attribute).labels(value)

    def watch_queues(self, source: Callable[[], QueueSamples]) -> None:
        """Report `source()` as the per-queue gauges on every scrape."""
        self.registry.register(_QueueCollector(source, self._leading))

    def watch_pending(self, source: Callable[[], Mapping[str, int]]) -> None:
        """Report `source()` as pending pods by reason on every scrape."""
        self.registry.register(
            _LabelledGaugeCollector(
                f"{PREFIX}_pending_pods",
                "Pods waiting to be scheduled, by reason",
                ["reason"],
                lambda: {(reason,): count for reason, count in source().items()},
                self._leading,
            )
        )

    def watch_pending_age(self, source: Callable[[], Mapping[str, float]]) -> None:
        """Report `source()` (reason -> seconds) as the oldest pending pod's age by reason."""
        self.registry.register(
            _LabelledGaugeCollector(
                f"{PREFIX}_pending_oldest_seconds",
                "Age of the oldest pod waiting to be scheduled, by reason",
                ["reason"],
                lambda: {(reason,): age for reason, age in source().items()},
                self._leading,
            )
        )

    def watch_gpus(self, source: Callable[[], GpuCounts]) -> None:
        """Report `source()` as GPUs by model, kind and state, and fragmented GPUs by model."""
        self.registry.register(_GpuCollector(source, self._leading))
