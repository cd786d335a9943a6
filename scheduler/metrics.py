"""Scheduler metrics on their own registry, and the `/metrics`, `/healthz`, `/readyz` server.

Names follow `gputopo_scheduler_<name>_<unit>`; counters end in `_total`. Pending pods by reason
are read at scrape time from a callback (the loop's view), so nothing is computed per decision.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

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


class SchedulerMetrics:
    """Every metric of `gputopo-scheduler run`, registered on `self.registry`."""

    def __init__(self, version: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        reg = self.registry
        self.attempts = Counter(
            f"{PREFIX}_schedule_attempts_total",
            "Scheduling attempts of a pod or gang, by result (scheduled, unschedulable, error)",
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
            "Pod bindings, by result (bound, conflict, error)",
            ["result"],
            registry=reg,
        )
        self.api_errors = Counter(
            f"{PREFIX}_api_errors_total",
            "Failed Kubernetes API calls, by operation",
            ["operation"],
            registry=reg,
        )
        self.leader = Gauge(
            f"{PREFIX}_leader", "1 while this replica holds the lease", registry=reg
        )
        build = Gauge(f"{PREFIX}_build_info", "Build information", ["version"], registry=reg)
        build.labels(version=version).set(1)

    def watch_pending(self, source: Callable[[], Mapping[str, int]]) -> None:
        """Report `source()` as pending pods by reason on every scrape."""
        self.registry.register(_PendingCollector(source))


def parse_address(address: str) -> tuple[str, int]:
    """`HOST:PORT`, `:PORT` or `[v6]:PORT` to (host, port); ValueError names the address."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"metrics address {address!r}: expected HOST:PORT, e.g. :9446")
    return host.strip("[]"), int(port)


class MetricsServer:
    """Serves `/metrics`, `/healthz` and `/readyz` (ready when `ready()` is true) on a thread."""

    def __init__(self, address: str, metrics: SchedulerMetrics, ready: Callable[[], bool]) -> None:
        host, port = parse_address(address)
        handler = _handler_class(metrics.registry, ready)
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="metrics"
        )
        self._thread.daemon = True

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()
        log.info("metrics server listening on port %s", self.port)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler_class(
    registry: CollectorRegistry, ready: Callable[[], bool]
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._reply(200, generate_latest(registry), "text/plain; version=0.0.4")
            elif path == "/healthz":
                self._reply(200, b"ok\n")
            elif path == "/readyz":
                ok = ready()
                self._reply(200 if ok else 503, b"ok\n" if ok else b"not ready\n")
            else:
                self._reply(404, b"not found\n")

        def _reply(self, code: int, body: bytes, ctype: str = "text/plain") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return  # nothing is logged per scrape

    return Handler
