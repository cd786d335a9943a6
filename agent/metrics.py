"""Agent metrics on their own registry (served by `agent.httpserver.MetricsServer`).

Per-GPU gauges come from a custom Collector over the last `MetricsSnapshot` handed in (nothing is
read from NVML per scrape). The device plugin observes its RPC latency through
`AgentMetrics.observe_rpc` / `time_rpc`; the publisher its writes through `observe_publish` and
each successful pass through `publish_passed`. Xid events and kubelet registrations are counts the
device plugin keeps, read per scrape through `watch_device_plugin` (with whether MPS serves).
Names follow `gputopo_agent_<name>_<unit>`; counters end in `_total`; per-GPU labels are `gpu`
(index), `uuid` and `model`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agent.httpserver import register_build_info
from agent.model import Gpu, NodeInventory
from agent.nvml.backend import GpuTelemetry
from agent.quantity import MIB

PREFIX = "gputopo_agent"
_RPC_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_PUBLISH_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricsSnapshot:
    """What the per-GPU gauges show; replaced as the node's state changes."""

    inventory: NodeInventory
    unhealthy: frozenset[str] = frozenset()
    telemetry: Mapping[str, GpuTelemetry] = field(default_factory=dict)
    allocated: Mapping[int, int] = field(default_factory=dict)  # GPU index -> devices held by pods
    shares: Mapping[int, tuple[int, int]] = field(default_factory=dict)
    """Shared GPUs only: GPU index -> (replicas, bytes of memory its shares use), DESIGN §12."""


_GPU_GAUGES: tuple[tuple[str, str], ...] = (
    ("gpu_healthy", "1 when the GPU is Healthy, 0 when the health checker marked it Unhealthy"),
    (
        "gpu_utilization_ratio",
        "GPU utilization (0-1) as NVML reports it; absent where unsupported (MIG)",
    ),
    ("gpu_memory_used_bytes", "Framebuffer memory in use"),
    ("gpu_memory_total_bytes", "Framebuffer memory of the GPU"),
    ("gpu_temperature_celsius", "GPU temperature"),
    ("gpu_power_watts", "GPU power draw"),
    (
        "gpu_allocated_devices",
        "Devices of this GPU (whole GPU, MIG slices or replicas) held by pods",
    ),
    ("gpu_mig_devices", "MIG devices configured on the GPU"),
    ("gpu_shares", "Replicas a shared GPU is split into (absent when not shared)"),
    (
        "gpu_share_memory_bytes",
        "GPU memory the shares on a shared GPU ask (an equal split where a share names none)",
    ),
)


def _gpu_values(gpu: Gpu, snap: MetricsSnapshot) -> dict[str, float | None]:
    tele = snap.telemetry.get(str(gpu.uuid))
    util = (
        None if tele is None or tele.utilization_percent is None else tele.utilization_percent / 100
    )
    used = None if tele is None or tele.memory_used_mib is None else tele.memory_used_mib * MIB
    share = snap.shares.get(gpu.index)
    return {
        "gpu_healthy": 0.0 if str(gpu.uuid) in snap.unhealthy else 1.0,
        "gpu_utilization_ratio": util,
        "gpu_memory_used_bytes": used,
        "gpu_memory_total_bytes": float(gpu.memory_mib * MIB),
        "gpu_temperature_celsius": None if tele is None else tele.temperature_c,
        "gpu_power_watts": None if tele is None else tele.power_w,
        "gpu_allocated_devices": float(snap.allocated.get(gpu.index, 0)),
        "gpu_mig_devices": float(len(gpu.mig_devices)),
        "gpu_shares": float(share[0]) if share else None,
        "gpu_share_memory_bytes": float(share[1]) if share else None,
    }


class _SnapshotCollector(Collector):
    def __init__(self, source: Callable[[], MetricsSnapshot | None]) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        snap = self._source()
        families = {
            name: GaugeMetricFamily(f"{PREFIX}_{name}", text, labels=["gpu", "uuid", "model"])
            for name, text in _GPU_GAUGES
        }
        if snap is not None:
            for gpu in snap.inventory.gpus:
                labels = [str(gpu.index), str(gpu.uuid), gpu.product]
                for name, value in _gpu_values(gpu, snap).items():
                    if value is not None:
                        families[name].add_metric(labels, float(value))
        yield from families.values()


XidCounts = Mapping[tuple[str, int], int]
"""Xid events read, by (GPU UUID, Xid)."""
RegistrationCounts = Mapping[tuple[str, str], int]
"""Register calls to the kubelet, by (resource, result `ok` or `error`)."""


class _DevicePluginCollector(Collector):
    def __init__(
        self,
        xids: Callable[[], XidCounts],
        registrations: Callable[[], RegistrationCounts],
        mps_serving: Callable[[], bool | None],
    ) -> None:
        self._xids, self._registrations = xids, registrations
        self._mps_serving = mps_serving

    def collect(self) -> Iterator[Metric]:
        xids = CounterMetricFamily(
            f"{PREFIX}_xid_events",
            "NVML Xid events read (ignored ones too), by GPU UUID and Xid",
            labels=["uuid", "xid"],
        )
        for (uuid, xid), count in sorted(self._xids().items()):
            xids.add_metric([uuid, str(xid)], float(count))
        registrations = CounterMetricFamily(
            f"{PREFIX}_deviceplugin_registrations",
            "Register calls to the kubelet, by resource and result (ok, error)",
            labels=["resource", "result"],
        )
        for (resource, result), count in sorted(self._registrations().items()):
            registrations.add_metric([resource, result], float(count))
        mps = GaugeMetricFamily(
            f"{PREFIX}_mps_serving",
            "Under sharing.mps: 1 while the MPS status file says MPS serves, 0 while its replicas "
            "are Unhealthy for it",
        )
        serving = self._mps_serving()
        if serving is not None:
            mps.add_metric([], 1.0 if serving else 0.0)
        yield xids
        yield registrations
        yield mps


class AgentMetrics:
    """Every metric of `gputopo-agent run`, registered on `self.registry` (never the global one)."""

    def __init__(self, version: str = "", registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._snapshot: MetricsSnapshot | None = None
        reg = self.registry
        self.rpc_seconds = Histogram(
            f"{PREFIX}_deviceplugin_rpc_duration_seconds",
            "Device-plugin RPC latency by method, resource and gRPC status code",
            ["method", "resource", "code"],
            buckets=_RPC_BUCKETS,
            registry=reg,
        )
        self.rpc_errors = Counter(
            f"{PREFIX}_deviceplugin_rpc_errors_total",
            "Device-plugin RPCs that did not end OK, by method and resource",
            ["method", "resource"],
            registry=reg,
        )
        self.publish_seconds = Histogram(
            f"{PREFIX}_publish_duration_seconds",
            "Time to write the NodeResourceTopology (one apply)",
            buckets=_PUBLISH_BUCKETS,
            registry=reg,
        )
        self.publish_writes = Counter(
            f"{PREFIX}_publish_writes_total",
            "NodeResourceTopology writes that landed",
            registry=reg,
        )
        self.publish_failures = Counter(
            f"{PREFIX}_publish_failures_total",
            "Failed NodeResourceTopology or node-label writes (each retried with backoff)",
            registry=reg,
        )
        self.publish_last_success = Gauge(
            f"{PREFIX}_publish_last_success_timestamp_seconds",
            "Unix time of the publisher's last successful pass (the NodeResourceTopology and "
            "labels were current then); the publisher's start until its first pass",
            registry=reg,
        )
        self.label_patches = Counter(
            f"{PREFIX}_label_patches_total", "Node label patches that landed", registry=reg
        )
        register_build_info(reg, PREFIX, version)
        reg.register(_SnapshotCollector(lambda: self._snapshot))

    def update(self, snapshot: MetricsSnapshot) -> None:
        """Replace the snapshot the per-GPU gauges read."""
        self._snapshot = snapshot

    def observe_rpc(self, method: str, resource: str, seconds: float, code: str = "OK") -> None:
        """One device-plugin RPC; `code` is the gRPC status name (`OK`, `INVALID_ARGUMENT`, ...)."""
        self.rpc_seconds.labels(method=method, resource=resource, code=code).observe(seconds)
        if code != "OK":
            self.rpc_errors.labels(method=method, resource=resource).inc()

    @contextmanager
    def time_rpc(
        self, method: str, resource: str, clock: Callable[[], float] = time.monotonic
    ) -> Iterator[None]:
        """Time the block as one RPC; an exception counts as code `UNKNOWN` and propagates."""
        start = clock()
        code = "UNKNOWN"
        try:
            yield
            code = "OK"
        finally:
            self.observe_rpc(method, resource, clock() - start, code)

    def watch_device_plugin(
        self,
        xids: Callable[[], XidCounts],
        registrations: Callable[[], RegistrationCounts],
        mps_serving: Callable[[], bool | None] = lambda: None,
    ) -> None:
        """Report the device plugin's Xid and registration counts and, under `sharing.mps`
        (`mps_serving` not None), whether MPS serves, on every scrape."""
        self.registry.register(_DevicePluginCollector(xids, registrations, mps_serving))

    def publish_passed(self) -> None:
        """The publisher started, or finished a pass with everything written (or unchanged)."""
        self.publish_last_success.set_to_current_time()

    def observe_publish(self, seconds: float, ok: bool) -> None:
        if ok:
            self.publish_seconds.observe(seconds)
            self.publish_writes.inc()
        else:
            self.publish_failures.inc()
