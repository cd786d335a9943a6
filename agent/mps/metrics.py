"""Metrics of `gputopo-agent mps`, on its own registry: `gputopo_mps_<name>_<unit>`.

- `gputopo_mps_daemon_up{uid}`: 1 while that user's control daemon runs, 0 while it is down;
- `gputopo_mps_daemon_restarts_total{uid}`: starts after the daemon went down;
- `gputopo_mps_gpu_clients{gpu,uuid,model}`: MPS client processes NVML lists on a shared GPU
  (read every heartbeat, never per scrape; absent where the driver cannot list them);
- `gputopo_mps_compute_mode_errors_total`: compute-mode reads or changes NVML refused;
- `gputopo_mps_build_info{version,python_version}`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge

from agent.errors import NvmlError
from agent.httpserver import register_build_info
from agent.model import Gpu, GpuUuid

log = logging.getLogger(__name__)

PREFIX = "gputopo_mps"


class MpsMetrics:
    def __init__(self, version: str = "", registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        reg = self.registry
        self.daemon_up = Gauge(
            f"{PREFIX}_daemon_up",
            "1 while the user's MPS control daemon runs, 0 while it is down",
            ["uid"],
            registry=reg,
        )
        self.restarts = Counter(
            f"{PREFIX}_daemon_restarts_total",
            "MPS control daemon starts after it went down, by user",
            ["uid"],
            registry=reg,
        )
        self.clients = Gauge(
            f"{PREFIX}_gpu_clients",
            "MPS client processes NVML lists on the shared GPU",
            ["gpu", "uuid", "model"],
            registry=reg,
        )
        self.compute_mode_errors = Counter(
            f"{PREFIX}_compute_mode_errors_total",
            "Compute-mode reads or changes that NVML refused",
            registry=reg,
        )
        register_build_info(reg, PREFIX, version)

    def observe_daemon(self, uid: int, *, up: bool, restarted: bool = False) -> None:
        self.daemon_up.labels(uid=str(uid)).set(1 if up else 0)
        if restarted:
            self.restarts.labels(uid=str(uid)).inc()

    def observe_clients(self, gpus: Sequence[Gpu], count: Callable[[GpuUuid], int | None]) -> None:
        """Set each GPU's client gauge from `count` (None: the driver cannot tell; left out; an
        NVML error leaves the last value)."""
        for gpu in gpus:
            try:
                found = count(gpu.uuid)
            except NvmlError as exc:
                log.debug("GPU %s: MPS clients unreadable: %s", gpu.uuid, exc)
                continue
            if found is not None:
                self.clients.labels(str(gpu.index), str(gpu.uuid), gpu.product).set(found)
