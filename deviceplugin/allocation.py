"""Allocate and GetPreferredAllocation decisions, in model terms (no protobuf, no I/O but CDI).

`Allocator.allocate` validates a whole request before building anything, so a refused request
leaves nothing half-applied. It is O(request): dictionary look-ups and string building, plus the
cached CDI check for `cdi-cri`; an error names at most `LISTED` IDs, so it stays short.
`Allocator.preferred` calls the shared placement code (`agent.gpuset`): the exact GPU-set search
for whole GPUs, `pack_shared` for MIG devices and time-slicing replicas.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field

from agent.gpuset import GpuSelector, SharedSlot, pack_shared
from agent.model import NodeInventory
from agent.plural import counted
from deviceplugin.cdi import CdiRegistry, cdi_name
from deviceplugin.errors import DeviceUnavailableError, InvalidRequestError
from deviceplugin.kubelet_api import MAX_DEVICE_ID
from deviceplugin.resources import PluginDevice, Resource, is_healthy
from deviceplugin.settings import DeviceIdStrategy, DeviceListStrategy, PluginSettings

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
VOLUME_MOUNT_ROOT = "/var/run/nvidia-container-devices"
CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
LISTED = 10
"""Items an error message names before `and N more`: a refusal stays a few hundred bytes, far
under gRPC's 8 KiB metadata limit (a longer status message reaches the client as
RESOURCE_EXHAUSTED, not as our INVALID_ARGUMENT)."""


def listed(items: Sequence[str], *, quote: bool = True, sep: str = ", ") -> str:
    """The first `LISTED` items, each cut to a device ID's length, then `and N more`."""
    shown = sep.join(_cut(i, quote) for i in items[:LISTED])
    rest = len(items) - LISTED
    return f"{shown} and {rest:,} more" if rest > 0 else shown


def named_ids(items: Sequence[str]) -> str:
    """`ID 'a'` or `IDs 'a', 'b' and 3 more`."""
    return f"ID{'s' if len(items) > 1 else ''} {listed(items)}"


def _cut(item: str, quote: bool) -> str:
    limit = 2 * MAX_DEVICE_ID if not quote else MAX_DEVICE_ID
    text = repr(item[:limit]) if quote else item[:limit]
    return text if len(item) <= limit else f"{text}… ({len(item):,} characters)"


@dataclass(frozen=True, slots=True, kw_only=True)
class MountSpec:
    container_path: str
    host_path: str
    read_only: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceNode:
    container_path: str
    host_path: str
    permissions: str = "rw"


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerAllocation:
    """What the runtime must apply to one container (mirrors `ContainerAllocateResponse`)."""

    envs: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[MountSpec, ...] = ()
    device_nodes: tuple[DeviceNode, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    cdi_devices: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class PreferredRequest:
    available: tuple[str, ...]
    must_include: tuple[str, ...]
    size: int


class Allocator:
    """Answers Allocate and GetPreferredAllocation for every resource of one node."""

    def __init__(
        self, settings: PluginSettings, inventory: NodeInventory, cdi: CdiRegistry | None = None
    ) -> None:
        self._settings = settings
        self._strategies = frozenset(settings.device_list_strategies)
        if DeviceListStrategy.CDI_CRI in self._strategies and cdi is None:
            cdi = CdiRegistry(settings.cdi_spec_dirs)
        self._cdi = cdi
        self._selector = GpuSelector(inventory.links, [g.numa_node for g in inventory.gpus])

    def allocate(
        self, resource: Resource, unhealthy: Set[str], requests: Sequence[Sequence[str]]
    ) -> list[ContainerAllocation]:
        """One allocation per container request; a RequestError names the bad IDs (`listed`)."""
        chosen = [self._validate(resource, unhealthy, pos, ids) for pos, ids in enumerate(requests)]
        return [self.build(devices) for devices in chosen]

    def _validate(
        self, resource: Resource, unhealthy: Set[str], pos: int, ids: Sequence[str]
    ) -> list[PluginDevice]:
        """The request's devices; linear in len(ids), whatever the IDs are."""
        where = f"{resource.name} container request {pos}"
        counts = Counter(ids)
        invalid: list[str] = []
        if not ids:
            invalid.append("names no devices")
        repeated = [i for i, n in counts.items() if n > 1]
        if repeated:
            invalid.append(f"repeats device {named_ids(repeated)}")
        if resource.shared and resource.fail_requests_greater_than_one and len(ids) > 1:
            invalid.append(
                f"asks for {counted(len(ids), 'replica')}; the maximum request size for a shared "
                "resource is 1 (failRequestsGreaterThanOne)"
            )
        unknown = [i for i in counts if resource.device(i) is None]
        if unknown:
            invalid.append(f"unknown device {named_ids(unknown)}")
        if invalid:
            raise InvalidRequestError(f"{where}: " + "; ".join(invalid))
        known = [d for i in ids if (d := resource.device(i)) is not None]
        unavailable = [
            f"device {d.id} (GPU {d.gpu_index}) is Unhealthy"
            for d in known
            if not is_healthy(d, unhealthy)
        ]
        unavailable += self._cdi_problems(known)
        if unavailable:
            raise DeviceUnavailableError(f"{where}: {listed(unavailable, quote=False, sep='; ')}")
        return known

    def _cdi_problems(self, devices: Sequence[PluginDevice]) -> list[str]:
        if self._cdi is None or DeviceListStrategy.CDI_CRI not in self._strategies:
            return []
        missing = self._cdi.missing(dict.fromkeys(cdi_name(d.unit_uuid) for d in devices))
        dirs = ", ".join(str(p) for p in self._cdi.spec_dirs)
        return [f"no CDI spec in {dirs} names {name}" for name in missing]

    def build(self, devices: Sequence[PluginDevice]) -> ContainerAllocation:
        """What the runtime applies for `devices` (already validated)."""
        units = list(dict.fromkeys(d.unit_uuid for d in devices))
        by_index = self._settings.device_id_strategy is DeviceIdStrategy.INDEX
        visible = list(dict.fromkeys(d.unit_index if by_index else d.unit_uuid for d in devices))
        envs: dict[str, str] = {}
        mounts: tuple[MountSpec, ...] = ()
        if DeviceListStrategy.ENVVAR in self._strategies:
            envs[VISIBLE_DEVICES] = ",".join(visible)
        if DeviceListStrategy.VOLUME_MOUNTS in self._strategies:
            envs[VISIBLE_DEVICES] = VOLUME_MOUNT_ROOT
            mounts = tuple(
                MountSpec(container_path=f"{VOLUME_MOUNT_ROOT}/{v}", host_path="/dev/null")
                for v in visible
            )
        cdi: tuple[str, ...] = ()
        if DeviceListStrategy.CDI_CRI in self._strategies:
            cdi = tuple(cdi_name(u) for u in units)
        nodes: tuple[DeviceNode, ...] = ()
        if self._settings.pass_device_specs:
            minors = sorted({d.gpu_minor for d in devices})
            paths = [*CONTROL_DEVICES, *(f"/dev/nvidia{m}" for m in minors)]
            nodes = tuple(DeviceNode(container_path=p, host_path=p) for p in paths)
        return ContainerAllocation(envs=envs, mounts=mounts, device_nodes=nodes, cdi_devices=cdi)

    def preferred(self, resource: Resource, request: PreferredRequest) -> tuple[str, ...]:
        """The IDs the kubelet should pick; raises InvalidRequestError when none can be given.

        The kubelet offers `available = aligned ∪ allocated` and `must_include = allocated`, so a
        must-include ID outside `available` is a malformed request, refused like an unknown ID.
        """
        where = f"{resource.name} preferred allocation"
        available = tuple(dict.fromkeys(request.available))
        must = tuple(dict.fromkeys(request.must_include))
        unknown = [i for i in available if resource.device(i) is None]
        if unknown:
            raise InvalidRequestError(f"{where}: unknown device {named_ids(unknown)}")
        offered = set(available)
        outside = [i for i in must if i not in offered]
        if outside:
            raise InvalidRequestError(
                f"{where}: must-include device {named_ids(outside)} not in available_deviceIDs"
            )
        if not len(must) <= request.size <= len(available):
            raise InvalidRequestError(
                f"{where}: allocation_size {request.size} is outside "
                f"[{len(must)}, {len(available)}] (must-include, available)"
            )
        request = PreferredRequest(available=available, must_include=must, size=request.size)
        if resource.whole_gpus:
            return self._preferred_gpus(resource, request, where)
        return self._preferred_shared(resource, available, request, where)

    def _preferred_gpus(
        self, resource: Resource, request: PreferredRequest, where: str
    ) -> tuple[str, ...]:
        index_of = {i: self._device(resource, i).gpu_index for i in request.available}
        must = [self._device(resource, i).gpu_index for i in request.must_include]
        picked = self._selector.select(list(index_of.values()), must, request.size)
        if picked is None:
            raise InvalidRequestError(f"{where}: no set of {counted(request.size, 'GPU')} exists")
        id_of = {d.gpu_index: d.id for d in resource.devices}
        return tuple(id_of[g] for g in picked)

    def _preferred_shared(
        self, resource: Resource, candidates: Sequence[str], request: PreferredRequest, where: str
    ) -> tuple[str, ...]:
        offered = set(candidates)
        used = {d.gpu_index for d in resource.devices if d.id not in offered}
        slots = [
            SharedSlot(id=i, gpu=(d := self._device(resource, i)).gpu_index, numa=d.numa_node)
            for i in candidates
        ]
        picked = pack_shared(slots, list(request.must_include), request.size, used)
        if len(picked) != request.size:
            raise InvalidRequestError(
                f"{where}: no set of {counted(request.size, 'device')} exists"
            )
        return picked

    @staticmethod
    def device_of(resource: Resource, device_id: str) -> PluginDevice:
        """The advertised device `device_id`; InvalidRequestError names an unknown one."""
        return Allocator._device(resource, device_id)

    @staticmethod
    def _device(resource: Resource, device_id: str) -> PluginDevice:
        device = resource.device(device_id)
        if device is None:
            raise InvalidRequestError(f"{resource.name}: unknown device ID {listed([device_id])}")
        return device
