"""`gputopo-scheduler run`: the secondary scheduler against a cluster.

Settings come from flags, then `GPUTOPO_<FLAG>` environment variables, then the `version: v1`
config file (`--config`), then defaults. Bad input exits 2 with one line naming the problem.

`Runtime` wires the parts (API client, informers, cache, queue, loop, reporter, leader election,
metrics server); `main` runs one until SIGTERM/SIGINT. Tests build a `Runtime` directly.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import TypeVar

import psutil

from agent import logsetup
from agent.dispatch import CommandParser, version_line
from agent.errors import ConfigError
from agent.httpserver import MetricsServer, parse_address
from agent.objkey import name_problem
from agent.precedence import (
    Setting,
    env_var,
    first_set,
    first_value,
    from_env,
    from_flag,
    from_value,
)
from agent.stopsignals import StopSignals
from scheduler.cli.startgc import StartupGc
from scheduler.config import SchedulerConfig, load_config
from scheduler.errors import ApiError
from scheduler.kubeapi import resourceclaims, workloads
from scheduler.kubeapi.client import (
    ELASTIC_QUOTAS,
    NODES,
    NRTS,
    PDBS,
    PODGROUPS,
    PODS,
    QUEUES,
    KubeClient,
)
from scheduler.kubeapi.informer import Informer
from scheduler.kubeapi.leader import AlwaysLeader, Fence, LeaderElector
from scheduler.runtime.cluster.cache import ClusterCache
from scheduler.runtime.cluster.loadview import LoadClock
from scheduler.runtime.gpucount import GpuCounts, count_gpus
from scheduler.runtime.loop import LoopSettings, Scheduler
from scheduler.runtime.metrics import SchedulerMetrics
from scheduler.runtime.pending import SchedulingQueue
from scheduler.runtime.reporter import Reporter

log = logging.getLogger(__name__)

PROG = "gputopo-scheduler run"
DEFAULT_NAME = "gputopo-scheduler"
DEFAULT_NAMESPACE = "gputopo-system"
DEFAULT_METRICS = ":9446"
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}
Default = TypeVar("Default", str, None)


class _Parser(CommandParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(message)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSettings:
    kubeconfig: str | None
    config: SchedulerConfig
    scheduler_name: str
    leader_elect: bool
    leader_elect_namespace: str
    metrics_address: str
    log_format: str


def _parser() -> _Parser:
    p = _Parser(prog=PROG, description="Run the gputopo secondary scheduler against a cluster.")
    p.add_argument("--version", action="version", version=version_line(PROG))
    p.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="kubeconfig path (default: $KUBECONFIG, else in-cluster, else ~/.kube/config)",
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        help="scheduler config file, `version: v1` (default: none, the built-in defaults)",
    )
    p.add_argument(
        "--scheduler-name",
        metavar="NAME",
        help=f"spec.schedulerName to serve, an RFC 1123 name (default {DEFAULT_NAME})",
    )
    p.add_argument(
        "--leader-elect",
        nargs="?",
        const="true",
        metavar="true|false",
        help="elect a leader with a coordination.k8s.io Lease (default off)",
    )
    p.add_argument(
        "--leader-elect-namespace",
        metavar="NAMESPACE",
        help=f"namespace of the Lease (default {DEFAULT_NAMESPACE})",
    )
    p.add_argument(
        "--metrics-address",
        metavar="HOST:PORT",
        help=f"HOST:PORT of /metrics, /healthz, /readyz (default {DEFAULT_METRICS})",
    )
    p.add_argument("--log-format", metavar="{text,json}", help="log line format (default text)")
    return p


def _bool(name: str, value: str) -> bool:
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise ConfigError(f"{name}: expected true or false, got {value!r}")


def load(argv: Sequence[str], environ: Mapping[str, str]) -> RunSettings:
    """Flags > GPUTOPO_<FLAG> > config file > defaults; ConfigError names what is wrong."""
    args = _parser().parse_args(list(argv))

    def given(flag: str) -> Setting | None:
        """`--<flag>`, else GPUTOPO_<FLAG> unless that is empty."""
        return first_set(
            from_flag(f"--{flag}", getattr(args, flag.replace("-", "_"))),
            from_env(environ, env_var(flag), blank_is_unset=True),
        )

    def pick(flag: str, in_file: str | None, default: Default) -> str | Default:
        """The first non-empty of the flag, its variable, the file's value; else `default`."""
        found = first_set(given(flag), from_value("config file", in_file), skip_blank=True)
        return default if found is None else str(found.value)

    config = load_config(first_value(given("config")))
    elect = given("leader-elect")
    settings = RunSettings(
        kubeconfig=pick("kubeconfig", config.kubeconfig, None),
        config=config,
        scheduler_name=pick("scheduler-name", config.scheduler_name, DEFAULT_NAME),
        leader_elect=_bool("--leader-elect", elect.value)
        if elect is not None
        else bool(config.leader_elect),
        leader_elect_namespace=pick(
            "leader-elect-namespace", config.leader_elect_namespace, DEFAULT_NAMESPACE
        ),
        metrics_address=pick("metrics-address", config.metrics_address, DEFAULT_METRICS),
        log_format=pick("log-format", None, "text"),
    )
    if settings.log_format not in ("text", "json"):
        raise ConfigError(f"--log-format: expected text or json, got {settings.log_format!r}")
    try:
        parse_address(settings.metrics_address)
    except ValueError as exc:
        raise ConfigError(f"--metrics-address: {exc}") from None
    if settings.kubeconfig is not None and not os.path.isfile(settings.kubeconfig):
        raise ConfigError(f"--kubeconfig: no such file: {settings.kubeconfig}")
    for flag, name, label in (
        ("--scheduler-name", settings.scheduler_name, False),
        ("--leader-elect-namespace", settings.leader_elect_namespace, True),
    ):
        if (problem := name_problem(name, label=label)) is not None:
            raise ConfigError(f"{flag}: {name!r}: {problem}")
    return settings


def unreachable(kube: KubeClient, settings: RunSettings) -> str | None:
    """One read before anything starts, so that an API server that cannot be reached is one
    line naming it (instead of every informer's retries); None when it answered at all (any
    HTTP status, even 403, will do)."""
    try:
        kube.get_lease(settings.leader_elect_namespace, settings.scheduler_name)
    except ApiError as exc:
        if exc.status == 0:
            reason = str(exc).partition(": ")[2]
            return f"API server {kube.api_client.configuration.host} unreachable: {reason}"
    return None


def _version() -> str:
    try:
        return metadata.version("gputopo")
    except metadata.PackageNotFoundError:
        return "0.0.0"


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseTiming:
    duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


def _loop_settings(loop: LoopSettings | None, settings: RunSettings) -> LoopSettings:
    """The loop's settings with the share locks in the scheduler's namespace (DESIGN §12)."""
    return dataclasses.replace(
        loop or LoopSettings(),
        share_lock_namespace=settings.leader_elect_namespace,
        share_lock_seconds=settings.config.share_lock_seconds,
    )


class Runtime:
    """Every part of a running scheduler; `start()` then `stop()`."""

    def __init__(
        self,
        settings: RunSettings,
        kube: KubeClient,
        *,
        lease: LeaseTiming | None = None,
        loop: LoopSettings | None = None,
        queue: SchedulingQueue | None = None,
        watch_timeout: int = 300,
        pause_gc: bool = False,
    ) -> None:
        """`pause_gc`: the process's cyclic collector is off until the cache is warm (`startgc`;
        the `run` command's process asks, a test's leaves it alone)."""
        self.settings, self.kube = settings, kube
        self._gc = StartupGc(active=pause_gc)
        self.stop_event = threading.Event()
        self.elector = self._elector(lease or LeaseTiming()) if settings.leader_elect else None
        self.fence: Fence = self.elector or AlwaysLeader()
        self.metrics = SchedulerMetrics(_version(), leading=self.fence.may_bind)
        if self.elector is None:
            self.metrics.leader.set(1)
        cfg = settings.config
        self.cache = ClusterCache(
            settings.scheduler_name,
            gang_timeout=cfg.gang_timeout_seconds,
            topology_levels=cfg.topology_levels,
            load=LoadClock(cfg.load_aware),
        )
        self.queue = queue or SchedulingQueue(time.monotonic)
        self.reporter = Reporter(kube, self.fence, self.metrics)
        self.scheduler = Scheduler(
            kube,
            self.cache,
            self.queue,
            cfg.scoring(),
            self.metrics,
            self.reporter,
            self.fence,
            settings=_loop_settings(loop, settings),
            preemption=cfg.preemption,
        )
        self.upstream = workloads.discover(kube)
        groups = (PODGROUPS,) if self.upstream is None else (PODGROUPS, self.upstream.kind)
        self.scheduler.dra = resourceclaims.served(kube)
        if not self.scheduler.dra:
            log.info("DRA off: resource.k8s.io/v1 is not served; pods with claims wait")
        dra = resourceclaims.KINDS if self.scheduler.dra else ()
        self.informers = [
            Informer(
                kube,
                kind,
                self.scheduler,
                self.stop_event,
                watch_timeout=watch_timeout,
                optional=kind.group == workloads.GROUP,
            )
            for kind in (NODES, NRTS, *groups, QUEUES, ELASTIC_QUOTAS, PDBS, *dra, PODS)
        ]
        self.metrics.watch_pending(self.scheduler.pending_reasons)
        self.metrics.watch_queues(self.scheduler.quota.metric_samples)
        self.metrics.watch_pending_age(lambda: self.scheduler.pending_ages(time.time()))
        self.metrics.watch_gpus(self._gpu_counts)
        self.server = MetricsServer(
            settings.metrics_address, self.metrics.registry, ready=self.ready
        )
        self._threads: list[threading.Thread] = []

    def _elector(self, timing: LeaseTiming) -> LeaderElector:
        return LeaderElector(
            self.kube,
            self.settings.leader_elect_namespace,
            self.settings.scheduler_name,
            self.kube.identity,
            lease_duration=timing.duration,
            renew_deadline=timing.renew_deadline,
            retry_period=timing.retry_period,
            on_change=self._leadership_changed,
        )

    def _leadership_changed(self, leader: bool) -> None:
        self.metrics.leader.set(1 if leader else 0)
        self.scheduler.wake()

    def _gpu_counts(self) -> GpuCounts:
        with self.cache.lock:
            return count_gpus(self.cache.snapshot.nodes, self.cache.nrts)

    def ready(self) -> bool:
        """Every collection listed once (the cache is warm)."""
        return all(i.synced.is_set() for i in self.informers)

    def start(self) -> None:
        """Informers, cache and metrics start at once on every replica, leader or not: a
        standby keeps its cache warm, and only its scheduling loop waits for the lease."""
        self._gc.pause()
        self.server.start()
        for informer in self.informers:
            informer.start()
        targets = [("scheduler-loop", self._schedule_when_synced)]
        if self.elector is not None:
            targets.append(("leader-election", self.elector.run))
        for name, target in targets:
            thread = threading.Thread(
                target=target, args=(self.stop_event,), name=name, daemon=True
            )
            thread.start()
            self._threads.append(thread)
        log.info(
            "scheduler %s started (identity %s), %.1f s after its process began; upstream "
            "PodGroups: %s",
            self.settings.scheduler_name,
            self.kube.identity,
            since_process_began(),
            "not served" if self.upstream is None else self.upstream.api_version,
        )

    def _schedule_when_synced(self, stop: threading.Event) -> None:
        """Schedule only once every collection was listed: before the Queues are known, a pod
        would be admitted against no quota (a new leader could exceed a max)."""
        for informer in self.informers:  # woken by each sync, checking `stop` meanwhile
            while not stop.is_set() and not informer.synced.wait(0.05):
                self._gc.check()
        if not stop.is_set():
            self._gc.synced()
            log.info(
                "every collection listed, %.1f s after the process began", since_process_began()
            )
        self.scheduler.run(stop)

    def stop(self, timeout: float = 5.0) -> None:
        self.stop_event.set()
        self.scheduler.wake()
        self.queue.close()
        for informer in self.informers:
            informer.close()
        for thread in self._threads:
            thread.join(timeout)
        for informer in self.informers:
            informer.join(timeout)
        self.scheduler.close()
        self.reporter.close()
        self.server.stop()
        self._gc.release()


def since_process_began() -> float:
    """Seconds since this process was created (its imports included), as the OS records it."""
    return time.time() - psutil.Process().create_time()


def identity() -> str:
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def run(
    argv: Sequence[str], environ: Mapping[str, str], stop: threading.Event | None = None
) -> int:
    """Run until `stop` is set (default: until SIGTERM or SIGINT, from the main thread)."""
    try:
        settings = load(argv, environ)
        logsetup.configure(settings.log_format)
        kube = KubeClient.from_kubeconfig(settings.kubeconfig, settings.scheduler_name, identity())
        why = unreachable(kube, settings)
        runtime = Runtime(settings, kube, pause_gc=True) if why is None else None
    except ConfigError as exc:
        sys.stderr.write(f"{PROG}: {exc}\n")
        return 2
    except Exception as exc:  # noqa: BLE001 (one line, never a traceback, for any start-up failure)
        sys.stderr.write(f"{PROG}: cannot start: {exc}\n")
        return 1
    if runtime is None:
        sys.stderr.write(f"{PROG}: {why}\n")
        kube.close()
        return 1
    signals = StopSignals().install() if stop is None else None
    stop = runtime.stop_event if stop is None else stop
    runtime.start()
    if signals is not None:
        signals.wait(stop)
    else:
        stop.wait()
    log.info("stopping")
    runtime.stop()
    kube.close()
    return 0


def main(argv: Sequence[str]) -> int:
    return run(argv, os.environ)
