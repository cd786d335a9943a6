"""The NVML backend interface: the agent's only view of the GPUs.

`PynvmlBackend` (pynvml_backend.py) implements it over the real `pynvml` module, or over the
fixture-driven stand-in (fake_pynvml.py) in tests and demos, so the same code runs in both.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from agent.model import Gpu, GpuUuid, LinkMatrix, NumaNode


@dataclass(frozen=True, slots=True, kw_only=True)
class XidEvent:
    """A critical Xid reported by NVML for a GPU (or a MIG device on it)."""

    gpu_uuid: GpuUuid
    xid: int
    gi_id: int | None = None  # None when not attributable to a MIG device
    ci_id: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuStatus:
    """What the health checker needs to decide whether a reset-required GPU came back."""

    responds: bool  # NVML answers for the device
    lost: bool  # NVML says GPU_IS_LOST / RESET_REQUIRED
    remap_pending: bool  # a row remap is pending (needs a reset)


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuTelemetry:
    """Live per-GPU readings; None where NVML does not support one (e.g. MIG utilization)."""

    utilization_percent: int | None
    memory_used_mib: int | None
    temperature_c: int | None
    power_w: float | None


class ComputeMode(StrEnum):
    """A GPU's compute mode, named as `nvidia-smi -c` names it."""

    DEFAULT = "DEFAULT"
    EXCLUSIVE_THREAD = "EXCLUSIVE_THREAD"  # deprecated by NVIDIA; read, never set by gputopo
    PROHIBITED = "PROHIBITED"
    EXCLUSIVE_PROCESS = "EXCLUSIVE_PROCESS"


class NvmlBackend(Protocol):
    def driver_version(self) -> str: ...

    def cuda_driver_version(self) -> int: ...

    def gpus(self) -> tuple[Gpu, ...]:
        """Every GPU in index order, with MIG devices (empty slots skipped) and sysfs NUMA node."""
        ...

    def links(self, gpus: tuple[Gpu, ...]) -> LinkMatrix:
        """NVLink counts (direct and NVSwitch) or PCIe level for each pair."""
        ...

    def numa_nodes(self) -> tuple[NumaNode, ...]:
        """NUMA nodes from sysfs under the host root (cpus, memory, hugepages, distances)."""
        ...

    def wait_xid(self, timeout_s: float) -> XidEvent | None:
        """Block up to `timeout_s` for the next critical Xid; None on timeout."""
        ...

    def status(self, uuid: GpuUuid) -> GpuStatus: ...

    def telemetry(self, uuid: GpuUuid) -> GpuTelemetry: ...

    def close(self) -> None: ...
