"""`gputopo-agent run`: the DaemonSet process.

Loads the configuration, opens NVML (or the fake for `--nvml-fixture`), discovers the node, then
starts the services in order and waits for SIGTERM/SIGINT; services stop in reverse order.

`SERVICE_FACTORIES` builds the services (`agent.cli.services.Service`) from the `AgentContext`, in
order; a factory returns None when its service is switched off. The device plugin is first (its
`device_state` and live `inventory` are on the context for the services after it); the topology
publisher with the node labels (`agent.cli.publish_service`) and the metrics server follow.

Every service is built before any starts, so a configuration error refuses the start before the
kubelet sees a device plugin. Once serving, the agent keeps serving: a missing kubelet or API
server (no credentials, API errors) is logged, retried, and reported by `/readyz`; it never stops
the device plugin.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from agent import logsetup
from agent.cli import config as agent_config
from agent.cli.config import AgentConfig
from agent.cli.dra_service import dra_gpus_for, dra_service, dra_shares
from agent.cli.publish_service import metrics_service, topology_service
from agent.cli.services import AgentContext, ReadyCheck, Service, ServiceFactory
from agent.cli.share_wiring import share_factory
from agent.dispatch import package_version
from agent.errors import AgentError, ConfigError
from agent.metrics import AgentMetrics
from agent.model import NodeInventory
from agent.nvml.backend import NvmlBackend
from agent.plural import counted
from agent.share_record import ShareRecord
from agent.stopsignals import StopSignals
from deviceplugin.errors import PluginError
from deviceplugin.kubelet_api import KUBELET_SOCKET
from deviceplugin.plugin import DevicePlugin

logger = logging.getLogger(__name__)

PROG = "gputopo-agent run"


def device_plugin_service(ctx: AgentContext) -> Service | None:
    """The kubelet device plugin, unless `--no-device-plugin` or `--oneshot`."""
    if not ctx.config.device_plugin or ctx.config.oneshot:
        return None
    observer = ctx.metrics.observe_rpc if ctx.metrics is not None else None
    ctx.share_record = ShareRecord(None if ctx.config.dry_run else ctx.config.share_record)
    ctx.device_plugin = plugin = DevicePlugin(
        dra_gpus_for(ctx),
        ctx.backend,
        ctx.inventory,
        observer=observer,
        make_shares=share_factory(ctx.config, ctx.inventory, ctx.share_record),
        dra_shares=bool(dra_shares(ctx)),
    )
    if ctx.metrics is not None:
        watch = plugin.mps_watch
        ctx.metrics.watch_device_plugin(
            plugin.tracker.xid_counts,
            plugin.registration_loop.register_results,
            (lambda: watch.serving) if watch is not None else lambda: None,
        )
    ctx.ready_checks.append(kubelet_check(ctx.config.device_plugin_dir / KUBELET_SOCKET))
    return ctx.device_plugin


def kubelet_check(socket: Path) -> ReadyCheck:
    """Not ready while the kubelet's registration socket is absent."""

    def check() -> str | None:
        return None if socket.exists() else f"waiting for the kubelet: no {socket}"

    return check


SERVICE_FACTORIES: tuple[ServiceFactory, ...] = (
    device_plugin_service,
    dra_service,
    topology_service,
    metrics_service,
)


def open_node(cfg: AgentConfig) -> tuple[NvmlBackend, NodeInventory]:
    """The NVML backend (real, or fake for a fixture) and the node it sees."""
    from agent.inventory import discover
    from agent.nvml.pynvml_backend import open_backend

    backend = open_backend(cfg.nvml_fixture, cfg.host_root)
    try:
        return backend, discover(backend)
    except BaseException:
        backend.close()
        raise


def start_services(ctx: AgentContext, factories: Sequence[ServiceFactory]) -> list[Service]:
    """Build every service, then start each in order; on a failure stop the started ones and
    re-raise. A service that cannot be built fails the start before anything serves."""
    built = [service for service in (factory(ctx) for factory in factories) if service is not None]
    try:
        for service in built:
            service.start()
            ctx.services.append(service)
            logger.info("started %s", service.name)
    except BaseException:
        stop_services(ctx.services)
        raise
    return ctx.services


def stop_services(services: Sequence[Service]) -> None:
    for service in reversed(services):
        try:
            service.stop()
        except Exception:
            logger.exception("stopping %s failed", service.name)
        else:
            logger.info("stopped %s", service.name)


def run(
    cfg: AgentConfig,
    stop: threading.Event,
    factories: Sequence[ServiceFactory] = SERVICE_FACTORIES,
    signals: StopSignals | None = None,
) -> int:
    """Start everything, wait for `stop` (or return at once with `--oneshot`), stop everything."""
    backend, inventory = open_node(cfg)
    ctx = AgentContext(
        config=cfg,
        backend=backend,
        inventory=inventory,
        stop=stop,
        metrics=AgentMetrics(package_version()),
    )
    try:
        logger.info(
            "node %s: %s, driver %s",
            cfg.node_name,
            counted(len(inventory.gpus), "GPU"),
            inventory.driver_version,
        )
        start_services(ctx, factories)
        if ctx.device_plugin is not None:
            _log_waiting_for_kubelet(cfg.device_plugin_dir / KUBELET_SOCKET)
        if not cfg.oneshot:
            _wait_for_stop(stop, signals)
        stop_services(ctx.services)
    finally:
        backend.close()
    return 0


def _wait_for_stop(stop: threading.Event, signals: StopSignals | None) -> None:
    if signals is None:
        while not stop.wait(1.0):
            pass
        return
    name = signals.wait(stop)
    if name is not None:
        logger.info("received %s: stopping", name)


def _log_waiting_for_kubelet(socket: Path) -> None:
    if not socket.exists():
        logger.warning(
            "waiting for the kubelet: no %s yet; the device plugin registers when it appears",
            socket,
        )


def main(argv: list[str]) -> int:
    try:
        cfg = agent_config.load(argv, os.environ)
    except ConfigError as exc:
        sys.stderr.write(f"{PROG}: {exc}\n")
        return 2
    logsetup.configure(cfg.log_format)
    stop = threading.Event()
    signals = StopSignals().install()
    try:
        return run(cfg, stop, signals=signals)
    except (AgentError, PluginError) as exc:
        if cfg.fail_on_init_error:
            sys.stderr.write(f"{PROG}: {exc}\n")
            return 1
        logger.error("%s; waiting (--fail-on-init-error=false)", exc)
        _wait_for_stop(stop, signals)
        return 0
