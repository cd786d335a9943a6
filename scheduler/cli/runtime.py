"""A running scheduler: `Runtime` wires the parts (API client, informers, cache, queue, loop,
reporter, leader election, metrics server); `gputopo-scheduler run` (`scheduler.cli.run`) starts
one and stops it on SIGTERM/SIGINT. Tests build a `Runtime` directly.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from dataclasses import dataclass
from importlib import metadata

import psutil

from agent.httpserver import MetricsServer
from scheduler.cli.settings import RunSettings
from scheduler.cli.startgc import StartupGc
from scheduler.errors import ApiError
from scheduler.kubeapi import resourceclaims, workloads
from scheduler.kubeapi.client import (
    ELASTIC_QUOTAS,
    NAMESPACES,
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


def unreachable(kube: KubeClient, settings: RunSettings) -> str | None:
    """One read before anything starts, so that an API server that cannot be reached is one
    line naming it (instead of every informer's retries); None when it answered at all (any
    HTTP status, even 403, will do)."""
    try:
        kube.get_lease(settings.leader_elect_namespace, settings.scheduler_name)
    except ApiError as exc:
        if exc.status == 0:
            reason = str(exc).partition(": ")[2]
            return f"API server {kube.host} unreachable: {reason}"
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
    """The loop's settings with the share locks in the scheduler's namespace (DESIGN §12) and
    the config's share-lock and binding-condition timeouts."""
    return dataclasses.replace(
        loop or LoopSettings(),
        share_lock_namespace=settings.leader_elect_namespace,
        share_lock_seconds=settings.config.share_lock_seconds,
        binding_timeout=float(settings.config.binding_timeout_seconds),
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
        if workloads.composites_served(kube, self.upstream):
            groups = (*groups, workloads.COMPOSITES)
        dra = resourceclaims.served(kube)
        self.scheduler.dra = bool(dra)
        if not self.scheduler.dra:
            log.info("DRA off: resource.k8s.io/v1 is not served; pods with claims wait")
        elif resourceclaims.DEVICE_TAINT_RULES not in dra:
            log.info("DeviceTaintRules not served in resource.k8s.io/v1: not read")
        self.informers = [
            Informer(
                kube,
                kind,
                self.scheduler,
                self.stop_event,
                watch_timeout=watch_timeout,
                optional=kind.group == workloads.GROUP,
                first_in_part=kind == PODS,
            )
            for kind in (
                NODES,
                NAMESPACES,
                NRTS,
                *groups,
                QUEUES,
                ELASTIC_QUOTAS,
                PDBS,
                *dra,
                PODS,
            )
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
            "gangs: %s",
            self.settings.scheduler_name,
            self.kube.identity,
            since_process_began(),
            "not served" if self.upstream is None else self.upstream.describe(),
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
