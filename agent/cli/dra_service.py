"""The DRA driver as one agent service (DESIGN §14): the kubelet plugin and the slice publisher.

Built after the device plugin, whose NVML model and health it shares: the device plugin's
`device_state` is what the health stream and the slices' taints read, its `inventory` (kept
current by the MIG re-scan) is what the devices are made from. The GPUs given to DRA
(`--dra-gpus`) are left out of the device plugin's resources (`PluginSettings.dra_gpus`, set by
`dra_gpus_for`), so no GPU is handed out twice. A DRA GPU that `sharing` shares is published
for shares (`shared_dra_gpus`); under `sharing.mps` a share's CDI spec carries the MPS limits,
pipe and `/dev/shm` of DESIGN §12 (`dra_mps_edits`), and while MPS does not serve (the device
plugin's MPS watch, `DeviceStateView.mps_down`) every share is Unhealthy and tainted. With
`--dry-run` the claim record stays in memory and no slice is written (printed instead, once).
"""

from __future__ import annotations

import logging
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import yaml

from agent.cli.dra_config import dra_gpu_indices
from agent.cli.services import AgentContext, Service
from agent.dra.devices import DraDevice, dra_devices, unhealthy_devices
from agent.dra.slices import wanted_slices
from agent.model import NodeInventory
from agent.mps.layout import MpsLayout
from agent.mps.status import served_uids
from agent.nvml.sysfs import pcie_root
from agent.shares import Sharing
from deviceplugin.device_state import DeviceState
from deviceplugin.dra.mps_edits import MpsEdits
from deviceplugin.dra.plugin import DraPaths, DraPlugin
from deviceplugin.dra.wire import CDI_DIR
from deviceplugin.resources import build_resources
from deviceplugin.settings import PluginSettings

logger = logging.getLogger(__name__)


def shared_dra_gpus(
    inventory: NodeInventory, settings: PluginSettings, dra: frozenset[int]
) -> dict[int, int]:
    """DRA GPU index -> replicas, for the whole GPUs DESIGN §12's `sharing` shares (chosen as the
    device plugin chooses them, as if only the DRA GPUs were on the node)."""
    others = frozenset(g.index for g in inventory.gpus) - dra
    resources = build_resources(inventory, replace(settings, dra_gpus=others))
    counts = Counter(
        d.gpu_index
        for r in resources
        if r.shared
        for d in r.devices
        if d.mig is None and d.replica is not None
    )
    return dict(counts)


def dra_mps_edits(settings: PluginSettings, shared: Mapping[int, int]) -> MpsEdits | None:
    """The CDI edits of DRA shares under `sharing.mps` (None: time-slicing, or no shared GPU)."""
    if not shared or settings.time_slicing.sharing is not Sharing.MPS:
        return None
    status_file = MpsLayout(Path(settings.mps_root)).status_file
    return MpsEdits(settings.mps_root, lambda: served_uids(status_file))


def dra_gpus_for(ctx: AgentContext) -> PluginSettings:
    """The device plugin's settings with the DRA GPUs left out (ConfigError for unknown GPUs)."""
    indices = dra_gpu_indices(ctx.config.dra, ctx.inventory)
    return replace(ctx.config.plugin, dra_gpus=indices)


def dra_shares(ctx: AgentContext) -> dict[int, int]:
    """`shared_dra_gpus` of the GPUs `--dra-gpus` gives the DRA driver (empty without it)."""
    if not ctx.config.dra.enabled:
        return {}
    gpus = dra_gpu_indices(ctx.config.dra, ctx.inventory)
    return shared_dra_gpus(ctx.inventory, ctx.config.plugin, gpus)


class DraService:
    """Serves the kubelet plugin and keeps the node's ResourceSlices."""

    name = "dra"

    def __init__(self, ctx: AgentContext, gpus: frozenset[int]) -> None:
        cfg = ctx.config
        self._ctx = ctx
        self._gpus = gpus
        self._shared = dra_shares(ctx)
        self._roots = {
            g.index: root
            for g in ctx.inventory.gpus
            if (root := pcie_root(cfg.host_root, g.pci_bus_id)) is not None
        }
        self._state = ctx.device_plugin.device_state if ctx.device_plugin else DeviceState()
        self._dry_run = cfg.dry_run
        from agent.kube.connect import load_api_client
        from agent.kube.dra import KubeDra, SlicePublisher

        self._kube = KubeDra(lambda: load_api_client(cfg.kubeconfig), cfg.node_name)
        paths = DraPaths(
            registry_dir=cfg.dra.registry_dir,
            plugins_dir=cfg.dra.plugins_dir,
            cdi_dir=cfg.host_root / CDI_DIR.relative_to("/"),
        )
        self.plugin = DraPlugin(
            node=cfg.node_name,
            paths=paths,
            reader=self._kube,
            devices=self.devices,
            state=self._state,
            dry_run=cfg.dry_run,
            share_edits=dra_mps_edits(cfg.plugin, self._shared),
        )
        self.slices = SlicePublisher(self._kube, self.devices, self.unhealthy)

    def unhealthy(self) -> dict[str, str]:
        """The devices to taint: `unhealthy_devices` of the device plugin's state."""
        view = self._state.view()
        return unhealthy_devices(self.devices(), view.unhealthy, view.mps_down)

    def devices(self) -> tuple[DraDevice, ...]:
        inventory = self._ctx.device_plugin.inventory if self._ctx.device_plugin else None
        return dra_devices(
            inventory or self._ctx.inventory, self._gpus, self._roots, shared=self._shared
        )

    def start(self) -> None:
        logger.info("DRA driver serving %d devices", len(self.devices()))
        if self._dry_run:
            slices = wanted_slices(self._ctx.config.node_name, self.devices(), (), generation=1)
            yaml.safe_dump_all(slices, sys.stdout, sort_keys=False)
        else:
            self.slices.start()
        self.plugin.start()

    def stop(self) -> None:
        self.plugin.stop()
        self.slices.stop()

    def problem(self) -> str | None:
        return None if self._dry_run else self.slices.problem


def dra_service(ctx: AgentContext) -> Service | None:
    """The DRA driver, when `--dra-gpus` gives it GPUs (and not `--oneshot`)."""
    if not ctx.config.dra.enabled or ctx.config.oneshot:
        return None
    gpus = dra_gpu_indices(ctx.config.dra, ctx.inventory)
    service = DraService(ctx, gpus)
    ctx.ready_checks.append(service.problem)
    return service
