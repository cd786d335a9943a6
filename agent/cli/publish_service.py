"""The topology publisher and the metrics as services of `gputopo-agent run` (built from the
`AgentContext` by `topology_service` and `metrics_service`). Command wiring: it composes `agent`
with `deviceplugin` (the kubelet's PodResources, the device plugin's live state).

- `TopologyService`: reads the node state (the device plugin's live inventory and health, the
  kubelet's PodResources) and runs the `Publisher` on its own thread; a watcher pokes it the
  moment the device plugin reports a health or MIG-layout change. With `--oneshot` it publishes
  once in `start()` (or prints with `--dry-run`) and fails the command if that cannot be done.
  Without usable Kubernetes credentials it keeps running (`KubeConnection`): the publisher retries
  with its backoff and `/readyz` says why nothing is published; the device plugin keeps serving.
- `MetricsService`: the `/metrics` server plus a thread that refreshes the per-GPU snapshot, and
  `/readyz` over the context's ready checks.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from agent.availability import DynamicDevice, PodGrant, PodResourcesSnapshot, allocated_devices
from agent.cli.dra_config import dra_gpu_indices
from agent.cli.services import AgentContext
from agent.cli.share_wiring import (
    configured_shared_gpus,
    share_state,
    shared_gpus,
    sharing_labels,
)
from agent.dra.devices import dra_devices, nrt_devices
from agent.errors import AgentError, ConfigError, NodeNotFound, PublishError
from agent.gpu_load import GpuLoad
from agent.httpserver import MetricsServer
from agent.kube.node_pods import NodePods, TerminalPodFilter
from agent.kube.publisher import (
    DryRunSink,
    NodeInfo,
    NodeState,
    Publisher,
    PublisherSettings,
    TopologySink,
)
from agent.load_sampler import LoadSampler
from agent.metrics import AgentMetrics, MetricsSnapshot
from agent.model import GpuUuid, NodeInventory
from agent.numa_capacity import KubeletConfig
from agent.nvml.backend import GpuTelemetry, NvmlBackend
from agent.restart_hold import RestartHold
from agent.share_usage import SharedGpu, ShareUse, share_figures
from deviceplugin.kubelet_api import KUBELET_SOCKET
from deviceplugin.kubelet_registration import file_id
from deviceplugin.podresources import (
    PodResourcesClient,
    PodResourcesError,
    PodResourcesUnavailableError,
)

if TYPE_CHECKING:
    from agent.kube.client import KubeSink

log = logging.getLogger(__name__)
Result = TypeVar("Result")

ONESHOT_ATTEMPTS = 4
TELEMETRY_INTERVAL_S = 10.0


ShareState = Callable[
    [tuple[PodGrant, ...]], tuple[Mapping[GpuUuid, SharedGpu], Mapping[GpuUuid, ShareUse]]
]
"""The shared GPUs and what the listed pods use of them (DESIGN §12)."""


class StateReader:
    """`() -> NodeState | None` over PodResources; None while the kubelet does not answer.

    A kubelet restart (its PodResources socket or the device plugins' `kubelet_socket` is a new
    file, or PodResources answer again after failing) starts a `RestartHold`: the kubelet answers
    with no pods for about a second after it starts, and "all free" must not be published.
    """

    def __init__(
        self,
        client: PodResourcesClient,
        inventory: Callable[[], NodeInventory],
        unhealthy: Callable[[], frozenset[str]],
        is_terminal: Callable[[str, str], bool] | None = None,
        *,
        kubelet_socket: Path | None = None,
        hold: RestartHold | None = None,
        shares: ShareState | None = None,
        load: Callable[[], Mapping[int, GpuLoad]] | None = None,
        dynamic: Callable[[], tuple[DynamicDevice, ...]] | None = None,
    ) -> None:
        self._client = client
        self._dynamic = dynamic
        self._load = load
        self._shares = shares
        self._inventory = inventory
        self._unhealthy = unhealthy
        self._is_terminal = is_terminal
        self._failing = False
        self._problem = ""
        self._seen_kubelet = False
        self.hold = hold or RestartHold()
        watched = [client.socket] + ([kubelet_socket] if kubelet_socket is not None else [])
        self._socket_ids = {path: file_id(path) for path in watched}

    @property
    def problem(self) -> str | None:
        """Why nothing is published now (PodResources failing), else None."""
        return self._problem if self._failing else None

    def __call__(self) -> NodeState | None:
        try:
            snapshot = self._snapshot()
        except (PodResourcesUnavailableError, PodResourcesError) as exc:
            # the kubelet is (or was) there but does not answer: "all free" would be a lie
            level = logging.DEBUG if self._failing else logging.WARNING
            log.log(level, "%s; not publishing until it answers", exc)
            self._failing, self._problem = True, str(exc)
            return None
        self._check_restart()  # after the read: a restart during the read counts for it
        if snapshot is not None:
            snapshot = self.hold.apply(snapshot)
        shared, use = self._shares(snapshot.pods if snapshot else ()) if self._shares else ({}, {})
        return NodeState(
            inventory=self._inventory(),
            snapshot=snapshot,
            unhealthy=self._unhealthy(),
            shared=shared,
            share_use=use,
            load=self._load() if self._load is not None else {},
            dynamic=self._dynamic() if self._dynamic is not None else (),
        )

    def _snapshot(self) -> PodResourcesSnapshot | None:
        """None only while no kubelet socket was ever seen (allocationSource `none`)."""
        if not self._seen_kubelet and not self._client.available():
            return None
        self._seen_kubelet = True  # from now on a missing socket is a kubelet restart
        return self._client.snapshot(self._is_terminal)

    def _check_restart(self) -> None:
        """One `restarted` call per restart seen, however many signs of it this read found."""
        signs = ["PodResources answers again after failing"] if self._failing else []
        self._failing = False
        for path, before in self._socket_ids.items():
            now = file_id(path)
            if now != before:
                self._socket_ids[path] = now
                signs.append(f"kubelet restarted ({path} is a new socket)")
        if signs:
            self.hold.restarted("; ".join(signs))


class KubeConnection:
    """The publisher's `TopologySink` on the API server, connected on first use.

    While the credentials cannot be loaded (no service account, a missing kubeconfig) every call
    fails with a PublishError that says why, and the next call tries to load them again: the
    publisher retries with its backoff while the device plugin keeps serving the kubelet.
    `problem` is the last call's failure (None after a success), for `/readyz`.
    """

    def __init__(self, connect: Callable[[], KubeSink]) -> None:
        self._connect = connect
        self._sink: KubeSink | None = None
        self.problem: str | None = None

    def node(self, name: str) -> NodeInfo | None:
        return self._call(lambda sink: sink.node(name))

    def get_topology(self, name: str) -> dict[str, Any] | None:
        return self._call(lambda sink: sink.get_topology(name))

    def apply_topology(self, obj: Mapping[str, Any]) -> str | None:
        return self._call(lambda sink: sink.apply_topology(obj))

    def patch_labels(self, name: str, patch: Mapping[str, str | None]) -> None:
        self._call(lambda sink: sink.patch_labels(name, patch))

    def pod_phases(self, node: str) -> dict[tuple[str, str], str]:
        return self._call(lambda sink: sink.pod_phases(node))

    def node_pods(self, node: str) -> list[dict[str, Any]]:
        return self._call(lambda sink: sink.node_pods(node))

    def _call(self, call: Callable[[KubeSink], Result]) -> Result:
        try:
            if self._sink is None:
                self._sink = self._connect()
            result = call(self._sink)
        except ConfigError as exc:
            self.problem = str(exc)
            raise PublishError(str(exc)) from None
        except PublishError as exc:
            self.problem = str(exc)
            raise
        self.problem = None
        return result


def _sink(ctx: AgentContext) -> TopologySink:
    if ctx.config.dry_run:
        return DryRunSink(sys.stdout)
    from agent.kube.client import KubeSink
    from agent.kube.connect import load_api_client

    def connect() -> KubeSink:
        return KubeSink(load_api_client(ctx.config.kubeconfig))

    # --oneshot has nothing to keep serving: no credentials fail the command at once
    return connect() if ctx.config.oneshot else KubeConnection(connect)


class TopologyService:
    name = "topology-publisher"

    def __init__(
        self,
        ctx: AgentContext,
        *,
        clock: Callable[[], float] = time.monotonic,
        sink: TopologySink | None = None,
    ) -> None:
        """`sink` replaces the API server (or the dry-run printer), e.g. in the demo."""
        cfg = ctx.config
        self._ctx = ctx
        self._oneshot = cfg.oneshot
        self._stop = threading.Event()
        kubelet = KubeletConfig.from_file(
            cfg.kubelet_config, policy=cfg.topology_manager_policy, scope=cfg.topology_manager_scope
        )
        settings = PublisherSettings(
            node_name=cfg.node_name,
            kubelet=kubelet,
            mig_strategy=str(cfg.mig_strategy),
            sharing=sharing_labels(cfg.plugin.time_slicing),
            node_labels=cfg.node_labels,
            publish_topology=cfg.publish,
            dry_run=cfg.dry_run,
            load_interval_s=cfg.load_publish_interval_s,
        )
        self.sink = sink if sink is not None else _sink(ctx)
        listing = getattr(self.sink, "node_pods", None)
        self.node_pods = NodePods(lambda: listing(cfg.node_name), clock=clock) if listing else None
        is_terminal = (
            TerminalPodFilter(self.node_pods.phases, clock=clock) if self.node_pods else None
        )
        self.client = PodResourcesClient(cfg.pod_resources_socket)
        plugin = ctx.device_plugin
        self._inventory: Callable[[], NodeInventory] = (
            (lambda: plugin.inventory) if plugin else (lambda: ctx.inventory)
        )
        self._shared = _shared_source(ctx)
        self.reader = StateReader(
            self.client,
            inventory=self._inventory,
            unhealthy=(lambda: plugin.device_state.unhealthy) if plugin else frozenset,
            is_terminal=is_terminal,
            kubelet_socket=cfg.device_plugin_dir / KUBELET_SOCKET,
            hold=RestartHold(clock=clock),
            shares=self._share_state if self._shared is not None else None,
            load=_load_sampler(ctx, self._inventory, clock),
            dynamic=_dra_source(ctx, self._inventory),
        )
        self.publisher = Publisher(
            settings, self.sink, self.reader, clock=clock, stop=self._stop, metrics=ctx.metrics
        )
        self._threads: list[threading.Thread] = []

    def _share_state(
        self, listed: tuple[PodGrant, ...]
    ) -> tuple[Mapping[GpuUuid, SharedGpu], Mapping[GpuUuid, ShareUse]]:
        assert self._shared is not None
        pods: tuple[Mapping[str, Any], ...] = ()
        if self.node_pods is not None:
            self.node_pods.missing((p.namespace, p.name) for p in listed if _holds_devices(p))
            pods = self.node_pods.last
        return share_state(self._shared(), self._inventory(), self._ctx.share_record, listed, pods)

    def start(self) -> None:
        if self._oneshot:
            self._publish_once()
            return
        self._threads = [
            threading.Thread(target=self.publisher.run, name="nrt-publisher", daemon=True)
        ]
        if self._ctx.device_plugin is not None:
            self._threads.append(
                threading.Thread(target=self._watch_device_plugin, name="nrt-poke", daemon=True)
            )
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self.publisher.stop()
        if self._ctx.device_plugin is not None:
            self._ctx.device_plugin.device_state.wake()
        for thread in self._threads:
            thread.join(timeout=5)
        self.client.close()

    def problem(self) -> str | None:
        """Why the NodeResourceTopology is not published yet (a ready check), else None."""
        if self.publisher.ready:
            return None
        why = self.reader.problem or self.publisher.problem
        if why is None and isinstance(self.sink, KubeConnection):
            why = self.sink.problem
        return f"NodeResourceTopology not published yet{f': {why}' if why else ''}"

    def _publish_once(self) -> None:
        delay = 0.5
        for attempt in range(1, ONESHOT_ATTEMPTS + 1):
            try:
                self.publisher.publish_once()
                return
            except NodeNotFound:
                raise  # waiting for it is what the running agent does; --oneshot says so at once
            except PublishError as exc:
                if attempt == ONESHOT_ATTEMPTS:
                    raise
                log.warning("oneshot publish failed (attempt %d): %s", attempt, exc)
                self._stop.wait(delay)
                delay *= 2

    def _watch_device_plugin(self) -> None:
        plugin = self._ctx.device_plugin
        assert plugin is not None
        version = plugin.device_state.view().version
        while not self._stop.is_set():
            snapshot = plugin.device_state.wait(version, 5.0, cancelled=self._stop.is_set)
            if snapshot.version != version:
                version = snapshot.version
                self.publisher.poke()


def _shared_source(ctx: AgentContext) -> Callable[[], Mapping[GpuUuid, SharedGpu]] | None:
    """Where the shared GPUs come from: the device plugin's live resources; with `--oneshot`,
    which starts none, the ones it would advertise (so the object published or previewed is
    the running agent's); None when no device plugin serves (`--no-device-plugin`)."""
    plugin, cfg = ctx.device_plugin, ctx.config
    if plugin is not None:
        return lambda: shared_gpus(plugin)
    if cfg.oneshot and cfg.device_plugin:
        configured = configured_shared_gpus(cfg, ctx.inventory)
        return lambda: configured
    return None


def _dra_source(
    ctx: AgentContext, inventory: Callable[[], NodeInventory]
) -> Callable[[], tuple[DynamicDevice, ...]] | None:
    """The DRA driver's devices as the NRT counts them (DESIGN §14), made from the live
    inventory (MIG layout changes); None when `--dra-gpus` gives it none."""
    cfg = ctx.config
    if not cfg.dra.enabled:
        return None
    gpus = dra_gpu_indices(cfg.dra, ctx.inventory)
    return lambda: nrt_devices(cfg.node_name, dra_devices(inventory(), gpus))


def _load_sampler(
    ctx: AgentContext, inventory: Callable[[], NodeInventory], clock: Callable[[], float]
) -> LoadSampler | None:
    """What the GPUs really use, sampled for the NRT (issue 47); None with `--no-load`."""
    window = ctx.config.load_window_s
    if window <= 0:
        return None
    return LoadSampler(ctx.backend, inventory, window_s=window, clock=clock)


def _holds_devices(pod: PodGrant) -> bool:
    return any(c.devices for c in pod.containers)


def topology_service(ctx: AgentContext) -> TopologyService | None:
    """The NRT publisher and node labeller, unless both `--no-publish` and `--node-labels off`."""
    if not ctx.config.publish and not ctx.config.node_labels:
        return None
    service = TopologyService(ctx)
    ctx.publisher = service.publisher
    ctx.ready_checks.append(service.problem)
    return service


class MetricsService:
    name = "metrics"

    def __init__(
        self, ctx: AgentContext, metrics: AgentMetrics, *, interval_s: float = TELEMETRY_INTERVAL_S
    ) -> None:
        self._ctx = ctx
        self._metrics = metrics
        self._interval_s = interval_s
        self._stop = threading.Event()
        self.server = MetricsServer(
            ctx.config.metrics_address,
            metrics.registry,
            ready=lambda: not self.problems(),
            unready_reason=lambda: "; ".join(self.problems()),
        )
        self._thread = threading.Thread(
            target=self._refresh_loop, name="metrics-refresh", daemon=True
        )

    def problems(self) -> list[str]:
        """What the context's ready checks say is wrong (empty: ready)."""
        return [why for check in self._ctx.ready_checks if (why := check()) is not None]

    def start(self) -> None:
        self.refresh()
        self.server.start()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.server.stop()

    def refresh(self) -> None:
        """Replace the metrics snapshot: inventory, health, telemetry, allocations."""
        plugin, publisher = self._ctx.device_plugin, self._ctx.publisher
        inventory = plugin.inventory if plugin else self._ctx.inventory
        availability = publisher.availability if publisher else None
        self._metrics.update(
            MetricsSnapshot(
                inventory=inventory,
                unhealthy=plugin.device_state.unhealthy if plugin else frozenset(),
                telemetry=_telemetry(self._ctx.backend, inventory),
                allocated=allocated_devices(availability) if availability else {},
                shares=share_figures(availability) if availability else {},
            )
        )

    def _refresh_loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.refresh()


def _telemetry(backend: NvmlBackend, inventory: NodeInventory) -> dict[str, GpuTelemetry]:
    out: dict[str, GpuTelemetry] = {}
    for gpu in inventory.gpus:
        try:
            out[str(gpu.uuid)] = backend.telemetry(gpu.uuid)
        except AgentError as exc:
            log.debug("no telemetry for GPU %s: %s", gpu.index, exc)
    return out


def metrics_service(ctx: AgentContext) -> MetricsService | None:
    """The metrics server, except with `--oneshot`; ConfigError when its port cannot be bound."""
    if ctx.config.oneshot or ctx.metrics is None:
        return None
    try:
        return MetricsService(ctx, ctx.metrics)
    except OSError as exc:
        raise ConfigError(f"--metrics-address {ctx.config.metrics_address}: {exc}") from None
