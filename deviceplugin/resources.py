"""What the plugin advertises: resources and their devices, from the node inventory (pure).

Names and IDs follow NVIDIA's device plugin so manifests, selectors and dcgm-exporter keep working:

- `nvidia.com/gpu`, ID = GPU UUID;
- MIG strategy `none`: whole GPUs only (a GPU in MIG mode is still one `nvidia.com/gpu`);
  `single`: every GPU in MIG mode with one identical profile, its MIG devices advertised as
  `nvidia.com/gpu`; `mixed`: `nvidia.com/mig-<profile>` (`+` becomes `.`), ID = MIG UUID;
- time-slicing: `<id>::<n>` replicas, under `<name>.shared` when renamed by default.
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field, replace

from agent.model import (
    Gpu,
    GpuUuid,
    MigDevice,
    MigMode,
    NodeInventory,
)
from agent.resource_names import GPU_RESOURCE, mig_resource
from deviceplugin.errors import ResourceError
from deviceplugin.kubelet_api import MAX_DEVICE_ID, socket_name
from deviceplugin.settings import MigStrategy, PluginSettings, SharedResource, TimeSlicing

logger = logging.getLogger(__name__)

_FULL_GI_PROFILE = re.compile(r"\d+g\.\d+gb([+-][a-z.]+)?")
"""GPU-instance profiles whose compute instance spans the whole instance (C == G)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PluginDevice:
    """One advertised device: a whole GPU, a MIG device, or a time-slicing replica of either."""

    id: str
    gpu_index: int
    gpu_uuid: GpuUuid
    gpu_minor: int
    numa_node: int | None
    mig: MigDevice | None = None
    mig_index: int | None = None  # position of the MIG device on its GPU, in placement order
    replica: int | None = None

    @property
    def unit_uuid(self) -> str:
        """The physical unit this ID stands for: the MIG UUID, else the GPU UUID."""
        return self.mig.uuid if self.mig is not None else self.gpu_uuid

    @property
    def unit_index(self) -> str:
        """NVIDIA's index form: `<gpu>` or `<gpu>:<mig>`."""
        return (
            str(self.gpu_index) if self.mig_index is None else f"{self.gpu_index}:{self.mig_index}"
        )


def is_healthy(device: PluginDevice, unhealthy: Set[str]) -> bool:
    """Unhealthy when its GPU or its MIG device is in `unhealthy` (a set of GPU / MIG UUIDs)."""
    return device.gpu_uuid not in unhealthy and device.unit_uuid not in unhealthy


@dataclass(frozen=True, slots=True, kw_only=True)
class Resource:
    """One extended resource, served by its own gRPC server and socket."""

    name: str
    devices: tuple[PluginDevice, ...]
    shared: bool = False  # time-slicing replicas
    fail_requests_greater_than_one: bool = False
    _by_id: dict[str, PluginDevice] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._by_id.update({d.id: d for d in self.devices})

    def device(self, device_id: str) -> PluginDevice | None:
        return self._by_id.get(device_id)

    @property
    def socket_name(self) -> str:
        return socket_name(self.name)

    @property
    def whole_gpus(self) -> bool:
        """Every device is one whole GPU (the link-matrix search applies)."""
        return all(d.mig is None and d.replica is None for d in self.devices)


def build_resources(inventory: NodeInventory, settings: PluginSettings) -> tuple[Resource, ...]:
    """The resources to advertise, sorted by name; empty resources are left out.

    Raises ResourceError naming every GPU and profile that makes the strategy impossible.
    """
    units = {
        name: [d for d in devices if d.gpu_index not in settings.dra_gpus]
        for name, devices in _units(inventory, settings.mig_strategy).items()
    }
    resources = _apply_time_slicing(units, settings.time_slicing)
    too_long = [d.id for r in resources for d in r.devices if len(d.id) > MAX_DEVICE_ID]
    if too_long:
        raise ResourceError(f"device IDs longer than {MAX_DEVICE_ID} characters: {too_long[:3]}")
    return tuple(sorted((r for r in resources if r.devices), key=lambda r: r.name))


def _units(inventory: NodeInventory, strategy: MigStrategy) -> dict[str, list[PluginDevice]]:
    """Resource name -> unreplicated devices, in GPU index order."""
    out: dict[str, list[PluginDevice]] = defaultdict(list)
    mig_gpus = [g for g in inventory.gpus if g.mig_mode is MigMode.ENABLED]
    if strategy is MigStrategy.SINGLE and mig_gpus:
        _check_single(inventory.gpus)
        out[GPU_RESOURCE] = [d for g in mig_gpus for d in _mig_devices(g)]
        return out
    for gpu in inventory.gpus:
        if strategy is MigStrategy.MIXED and gpu.mig_mode is MigMode.ENABLED:
            if not gpu.mig_devices:
                logger.warning(
                    "GPU %d is in MIG mode with no MIG devices: nothing to advertise", gpu.index
                )
            for dev in _mig_devices(gpu):
                assert dev.mig is not None
                out[mig_resource(dev.mig.profile)].append(dev)
        else:
            out[GPU_RESOURCE].append(_whole_gpu(gpu))
    return out


def _whole_gpu(gpu: Gpu) -> PluginDevice:
    return PluginDevice(
        id=gpu.uuid,
        gpu_index=gpu.index,
        gpu_uuid=gpu.uuid,
        gpu_minor=gpu.minor,
        numa_node=gpu.numa_node,
    )


def _mig_devices(gpu: Gpu) -> Iterator[PluginDevice]:
    """The full-GPU-instance MIG devices of `gpu` (compute-instance sub-profiles are skipped)."""
    ordered = sorted(gpu.mig_devices, key=lambda m: (m.start, m.gi_id, m.ci_id))
    for pos, mig in enumerate(ordered):
        if not _FULL_GI_PROFILE.fullmatch(mig.profile):
            logger.info("GPU %d: MIG profile %s is not advertised", gpu.index, mig.profile)
            continue
        yield replace(_whole_gpu(gpu), id=mig.uuid, mig=mig, mig_index=pos)


def _check_single(gpus: Sequence[Gpu]) -> None:
    """NVIDIA's `single` rules: MIG on every GPU or none, each with devices, one profile in all."""
    problems: list[str] = []
    enabled = [g.index for g in gpus if g.mig_mode is MigMode.ENABLED]
    disabled = [g.index for g in gpus if g.mig_mode is not MigMode.ENABLED]
    if disabled:
        problems.append(
            f"every GPU must be in MIG mode or none (MIG enabled on GPUs {_ids(enabled)}, "
            f"not on GPUs {_ids(disabled)})"
        )
    empty = [g.index for g in gpus if g.mig_mode is MigMode.ENABLED and not g.mig_devices]
    if empty:
        problems.append(f"MIG-enabled GPUs {_ids(empty)} have no MIG devices")
    by_profile: dict[str, set[int]] = defaultdict(set)
    for gpu in gpus:
        for mig in gpu.mig_devices:
            by_profile[mig.profile].add(gpu.index)
    if len(by_profile) > 1:
        found = ", ".join(f"{p} on GPUs {_ids(sorted(by_profile[p]))}" for p in sorted(by_profile))
        problems.append(f"all MIG devices must have one profile, found {found}")
    if problems:
        raise ResourceError(
            "mig-strategy single: " + "; ".join(problems) + " (use mig-strategy mixed)"
        )


def _ids(indices: Sequence[int]) -> str:
    return ",".join(str(i) for i in indices)


def _apply_time_slicing(
    units: Mapping[str, list[PluginDevice]], sharing: TimeSlicing
) -> list[Resource]:
    """Replace the replicated resources' devices by `<id>::<n>` replicas (renamed if asked)."""
    plain: dict[str, list[PluginDevice]] = {name: list(devs) for name, devs in units.items()}
    shared: dict[str, list[PluginDevice]] = {}
    for entry in sharing.resources:
        if entry.name not in units:
            logger.warning("time-slicing: %s is not advertised on this node; ignored", entry.name)
            continue
        target = entry.advertised_name(sharing.rename_by_default)
        if target in shared or (target != entry.name and target in units):
            raise ResourceError(f"time-slicing: resource name {target} is used twice")
        chosen = _select(units[entry.name], entry)
        plain[entry.name] = [d for d in units[entry.name] if d not in chosen]
        shared[target] = [_replica(d, n) for d in chosen for n in range(entry.replicas)]
    out = [Resource(name=n, devices=tuple(d)) for n, d in plain.items() if n not in shared]
    out += [
        Resource(
            name=name,
            devices=tuple(devs) + tuple(plain.get(name, ())),
            shared=True,
            fail_requests_greater_than_one=sharing.fail_requests_greater_than_one,
        )
        for name, devs in shared.items()
    ]
    return out


def _select(devices: Sequence[PluginDevice], entry: SharedResource) -> list[PluginDevice]:
    """The devices `entry.devices` names: all, the first N, or by index (`0`, `0:1`) / UUID."""
    if entry.devices is None:
        return list(devices)
    if isinstance(entry.devices, int):
        return list(devices[: entry.devices])
    wanted = set(entry.devices)
    return [d for d in devices if {d.unit_uuid, d.gpu_uuid, d.unit_index} & wanted]


def _replica(device: PluginDevice, n: int) -> PluginDevice:
    return PluginDevice(
        id=f"{device.id}::{n}",
        gpu_index=device.gpu_index,
        gpu_uuid=device.gpu_uuid,
        gpu_minor=device.gpu_minor,
        numa_node=device.numa_node,
        mig=device.mig,
        mig_index=device.mig_index,
        replica=n,
    )
