"""`DevicePlugin`: the device plugin as one service of the agent.

It puts together the device state, the allocator, the health monitor, the MIG re-scan and the
registration loop (one resource plugin per advertised resource), and under `sharing.mps` the watch
of the MPS status file. `DevicePlugin(settings, backend, inventory)` builds the advertised
resources (raising `ResourceError` when the strategy cannot apply), `start()` serves and registers
every resource and starts the health thread, `stop()` ends the streams and removes the sockets.
`make_shares` (the agent's wiring) serves shared resources per pod through the share lock
(`share_allocation`). Other parts of the agent read
`device_state` (its `wait()` wakes on every health or layout change) and `inventory`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from agent.model import Gpu, NodeInventory
from agent.mps.layout import MpsLayout
from agent.nvml.backend import NvmlBackend
from agent.shares import Sharing
from deviceplugin.allocation import Allocator
from deviceplugin.device_state import DeviceState
from deviceplugin.errors import ResourceError
from deviceplugin.grpc_translation import GrpcTranslation, RpcObserver
from deviceplugin.health import HealthMonitor, HealthTracker, MpsWatch
from deviceplugin.imex import ImexAllocator
from deviceplugin.registration_loop import RegistrationLoop
from deviceplugin.resources import build_resources
from deviceplugin.settings import PluginSettings
from deviceplugin.share_allocation import ShareAllocator

MakeShares = Callable[[Allocator, frozenset[str]], ShareAllocator]
"""Builds the share allocator from the plugin's allocator and its shared resources' names."""

logger = logging.getLogger(__name__)


class DevicePlugin:
    """The device plugin of one node, started and stopped as one agent service."""

    name = "device-plugin"

    def __init__(
        self,
        settings: PluginSettings,
        backend: NvmlBackend,
        inventory: NodeInventory,
        *,
        clock: Callable[[], float] = time.monotonic,
        observer: RpcObserver | None = None,
        poll_s: float = 0.1,
        wait_timeout_s: float = 0.5,
        make_shares: MakeShares | None = None,
        wall_clock: Callable[[], float] = time.time,
        dra_shares: bool = False,
    ) -> None:
        """`dra_shares`: the DRA driver shares some of the node's GPUs (`settings.dra_gpus`), so
        under `sharing.mps` MPS is watched for them even where no resource here is shared."""
        self.settings = settings
        self.inventory = inventory
        self._backend = backend
        self._stop = threading.Event()
        self.device_state = DeviceState(build_resources(inventory, settings))
        self.allocator = ImexAllocator(settings, inventory)  # Allocate, plus IMEX channels
        shared = frozenset(n for n, r in self.device_state.view().resources.items() if r.shared)
        self.shares = make_shares(self.allocator, shared) if make_shares and shared else None
        self.tracker = HealthTracker(
            inventory,
            settings.xid_policy,
            quiet_period_s=settings.health_quiet_period_s,
            recheck_interval_s=settings.health_recheck_interval_s,
            clock=clock,
        )
        self.mps_watch = self._mps_watch(bool(shared) or dra_shares, wall_clock)
        self.monitor = HealthMonitor(
            backend,
            self.tracker,
            self.device_state.set_unhealthy,
            rescan=self.rescan,
            rescan_interval_s=settings.rescan_interval_s,
            wait_timeout_s=wait_timeout_s,
            clock=clock,
            checks_enabled=settings.xid_policy.checks_enabled,
            mps=self.mps_watch,
        )
        self.registration_loop = RegistrationLoop(
            plugin_dir=settings.device_plugin_dir,
            device_state=self.device_state,
            make_translation=lambda name: GrpcTranslation(
                name,
                self.device_state,
                self.allocator,
                stop=self._stop,
                observer=observer,
                shares=self.shares,
            ),
            poll_s=poll_s,
            clock=clock,
        )

    def _mps_watch(self, shared: bool, wall_clock: Callable[[], float]) -> MpsWatch | None:
        """Under `sharing.mps` with something shared, the watch that marks the shared resources
        (and the DRA driver's shares) down while MPS is."""
        if not shared or self.settings.time_slicing.sharing is not Sharing.MPS:
            return None
        return MpsWatch(
            MpsLayout(Path(self.settings.mps_root)).status_file,
            lambda: self.device_state.view().resources,
            self.device_state.set_down,
            wall_clock=wall_clock,
        )

    def start(self) -> None:
        names = ", ".join(self.device_state.view().resources) or "nothing"
        logger.info("device plugin advertising %s", names)
        if self.mps_watch is not None:  # before the first ListAndWatch, not a round later
            self.mps_watch.poll()
        self.registration_loop.start(self._stop)
        self.monitor.start(self._stop)

    def stop(self, timeout_s: float = 5.0) -> None:
        """End the streams, stop the servers and remove their sockets."""
        self._stop.set()
        self.device_state.wake()
        self.monitor.join(timeout_s)
        self.registration_loop.join(timeout_s)
        self.registration_loop.shutdown()

    def rescan(self) -> bool:
        """Re-read the GPUs; advertise a changed MIG layout. True when the resources changed."""
        gpus = self._backend.gpus()
        if _layout(gpus) == _layout(self.inventory.gpus):
            return False
        if [g.uuid for g in gpus] != [g.uuid for g in self.inventory.gpus]:
            logger.error("the set of GPUs changed; restart the agent to advertise it")
            return False
        inventory = NodeInventory(
            gpus=gpus,
            links=self.inventory.links,
            numa_nodes=self.inventory.numa_nodes,
            driver_version=self.inventory.driver_version,
            cuda_driver_version=self.inventory.cuda_driver_version,
            nvlink_fabric=self.inventory.nvlink_fabric,
        )
        try:
            resources = build_resources(inventory, self.settings)
        except ResourceError as exc:
            logger.error("new MIG layout not advertised: %s", exc)
            return False
        logger.info("MIG layout changed: %s", {g.index: g.mig_layout for g in gpus if g.mig_layout})
        self.inventory = inventory
        self.tracker.set_inventory(inventory)
        return self.device_state.set_resources(resources)


def _layout(gpus: tuple[Gpu, ...]) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    return tuple(
        (g.uuid, g.mig_mode.value, tuple(f"{m.uuid}:{m.profile}" for m in g.mig_devices))
        for g in gpus
    )
