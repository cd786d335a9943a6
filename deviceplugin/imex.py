"""IMEX channels in Allocate responses, as NVIDIA's device plugin injects them.

A gang spread over the nodes of one multi-node NVLink domain (an NVL72 rack) shares GPU memory
through IMEX, which a container reaches through a channel's device node
`/dev/nvidia-caps-imex-channels/channel<N>`. With `imex.channelIDs: [0]` in the config file every
container that gets GPUs also gets channel 0:

- `envvar`: `NVIDIA_IMEX_CHANNELS=<ids>` for the NVIDIA container runtime;
- `volume-mounts`: `/dev/null` mounted at `/var/run/nvidia-container-devices/imex/<id>`;
- `--pass-device-specs`: the channel's device node itself.

Channels are resolved once, when the plugin starts: a channel whose device node is neither under
the host root nor under /dev (a character device) is skipped with a warning, or fails the plugin
when `imex.required` is set. `ImexAllocator` is the device plugin's `Allocator` with the channels
added to every container allocation. ComputeDomains (NVIDIA's DRA driver) are not modelled.
"""

from __future__ import annotations

import logging
import stat
from collections.abc import Sequence, Set
from dataclasses import dataclass, replace
from pathlib import Path

from agent.model import NodeInventory
from deviceplugin.allocation import (
    VOLUME_MOUNT_ROOT,
    Allocator,
    ContainerAllocation,
    DeviceNode,
    MountSpec,
)
from deviceplugin.cdi import CdiRegistry
from deviceplugin.errors import PluginError
from deviceplugin.resources import Resource
from deviceplugin.settings import DeviceListStrategy, Imex, PluginSettings

logger = logging.getLogger(__name__)

CHANNEL_DIR = "/dev/nvidia-caps-imex-channels"
CHANNELS_ENV = "NVIDIA_IMEX_CHANNELS"


@dataclass(frozen=True, slots=True, kw_only=True)
class ImexChannel:
    id: int

    @property
    def path(self) -> str:
        """The device node, the same in the container as on the host."""
        return f"{CHANNEL_DIR}/channel{self.id}"


def resolve_channels(imex: Imex) -> tuple[ImexChannel, ...]:
    """The configured channels whose device node exists; PluginError for a required one that
    does not."""
    found: list[ImexChannel] = []
    for channel in (ImexChannel(id=i) for i in imex.channel_ids):
        places = dict.fromkeys((imex.dev_root / channel.path.lstrip("/"), Path(channel.path)))
        if any(_is_char_device(p) for p in places):
            logger.info("injecting IMEX channel %s into GPU containers", channel.path)
            found.append(channel)
            continue
        where = " or ".join(str(p) for p in places)
        if imex.required:
            raise PluginError(
                f"imex.required: IMEX channel {channel.path} does not exist ({where})"
            )
        logger.warning("IMEX channel %s not found at %s; not injected", channel.path, where)
    return tuple(found)


def with_channels(
    alloc: ContainerAllocation,
    channels: tuple[ImexChannel, ...],
    strategies: Set[DeviceListStrategy],
    *,
    pass_device_specs: bool,
) -> ContainerAllocation:
    """`alloc` with the channels added the way each device-list strategy names devices."""
    if not channels:
        return alloc
    envs = dict(alloc.envs)
    mounts = list(alloc.mounts)
    nodes = list(alloc.device_nodes)
    if DeviceListStrategy.ENVVAR in strategies:
        envs[CHANNELS_ENV] = ",".join(str(c.id) for c in channels)
    if DeviceListStrategy.VOLUME_MOUNTS in strategies:
        mounts += [
            MountSpec(container_path=f"{VOLUME_MOUNT_ROOT}/imex/{c.id}", host_path="/dev/null")
            for c in channels
        ]
    if pass_device_specs:
        nodes += [DeviceNode(container_path=c.path, host_path=c.path) for c in channels]
    return replace(alloc, envs=envs, mounts=tuple(mounts), device_nodes=tuple(nodes))


class ImexAllocator(Allocator):
    """The `Allocator` whose container allocations also carry the node's IMEX channels."""

    def __init__(
        self, settings: PluginSettings, inventory: NodeInventory, cdi: CdiRegistry | None = None
    ) -> None:
        super().__init__(settings, inventory, cdi)
        self._channels = resolve_channels(settings.imex)
        self._channel_strategies = frozenset(settings.device_list_strategies)
        self._pass_device_specs = settings.pass_device_specs

    def allocate(
        self, resource: Resource, unhealthy: Set[str], requests: Sequence[Sequence[str]]
    ) -> list[ContainerAllocation]:
        return [
            with_channels(
                alloc,
                self._channels,
                self._channel_strategies,
                pass_device_specs=self._pass_device_specs,
            )
            for alloc in super().allocate(resource, unhealthy, requests)
        ]


def _is_char_device(path: Path) -> bool:
    try:
        return stat.S_ISCHR(path.stat().st_mode)
    except OSError:
        return False
