"""MIG devices of a GPU from NVML, with empty slots skipped (reference §4.2).

For each slot up to `nvmlDeviceGetMaxMigDeviceCount`, `nvmlDeviceGetMigDeviceHandleByIndex` gives
a MIG handle or raises NotFound for an empty slot. The GPU instance (`nvmlDeviceGetGpuInstanceId` →
`nvmlDeviceGetGpuInstanceById` → `nvmlGpuInstanceGetInfo`) gives the profile ID and placement; the
profile ID is named, and its streaming multiprocessors counted (`multiprocessorCount`), through
`nvmlDeviceGetGpuInstanceProfileInfo` over the profile enum. NVMLError goes through for the caller
to translate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.model import MigDevice, MigUuid

_PROFILE_COUNT = 0x12  # NVML_GPU_INSTANCE_PROFILE_COUNT in current pynvml


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuInstanceProfile:
    """What NVML says of one GPU-instance profile this GPU supports."""

    name: str  # "1g.10gb"
    multiprocessors: int


def read_mig_devices(nvml: Any, parent: Any) -> tuple[MigDevice, ...]:
    """The MIG devices of a MIG-enabled GPU, in placement order."""
    profiles = gpu_instance_profiles(nvml, parent)
    found: list[MigDevice] = []
    for slot in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(parent))):
        try:
            handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, slot)
        except nvml.NVMLError as exc:
            if exc.value == nvml.NVML_ERROR_NOT_FOUND:
                continue
            raise
        found.append(_mig_device(nvml, parent, handle, profiles))
    return tuple(sorted(found, key=lambda m: (m.start, m.gi_id, m.ci_id)))


def _mig_device(
    nvml: Any, parent: Any, handle: Any, profiles: dict[int, GpuInstanceProfile]
) -> MigDevice:
    gi_id = int(nvml.nvmlDeviceGetGpuInstanceId(handle))
    info = nvml.nvmlGpuInstanceGetInfo(nvml.nvmlDeviceGetGpuInstanceById(parent, gi_id))
    profile = profiles.get(int(info.profileId))
    return MigDevice(
        uuid=MigUuid(_text(nvml.nvmlDeviceGetUUID(handle))),
        profile=profile.name if profile else _name_suffix(nvml.nvmlDeviceGetName(handle)),
        multiprocessors=profile.multiprocessors if profile else 0,
        gi_id=gi_id,
        ci_id=int(nvml.nvmlDeviceGetComputeInstanceId(handle)),
        memory_mib=int(nvml.nvmlDeviceGetMemoryInfo(handle).total) >> 20,
        start=int(info.placement.start),
        size=int(info.placement.size),
    )


def gpu_instance_profiles(nvml: Any, parent: Any) -> dict[int, GpuInstanceProfile]:
    """GPU-instance profile ID → its name (`1g.10gb`) and SM count, for the profiles this GPU
    supports."""
    absent = (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_INVALID_ARGUMENT)
    profiles: dict[int, GpuInstanceProfile] = {}
    for profile in range(int(getattr(nvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", _PROFILE_COUNT))):
        try:
            info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(parent, profile)
        except nvml.NVMLError as exc:
            if exc.value in absent:
                continue
            raise
        profiles[int(info.id)] = GpuInstanceProfile(
            name=_name_suffix(info.name), multiprocessors=int(info.multiprocessorCount)
        )
    return profiles


def _name_suffix(name: Any) -> str:
    """`MIG 1g.10gb` or `NVIDIA A100-SXM4-80GB MIG 1g.10gb` → `1g.10gb`."""
    text = _text(name)
    return text.rsplit("MIG ", 1)[-1].strip()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
