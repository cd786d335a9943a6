# ruff: noqa: N815, N816
"""The parts of the `pynvml` module the fake copies: constants, the error classes and the structs.

Values and names are pynvml's (nvidia-ml-py), so code written against the real module reads the
fake's answers the same way: `NVMLError(code)` builds the `NVMLError_<Name>` subclass, `.value` is
the code, structs expose the attributes the real ctypes structures do.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

# --- return codes (pynvml NVML_ERROR_*), with pynvml's class-name suffix and message ---
ERROR_CODES: tuple[tuple[str, int, str], ...] = (
    ("Uninitialized", 1, "Uninitialized"),
    ("InvalidArgument", 2, "Invalid Argument"),
    ("NotSupported", 3, "Not Supported"),
    ("NoPermission", 4, "Insufficient Permissions"),
    ("AlreadyInitialized", 5, "Already Initialized"),
    ("NotFound", 6, "Not Found"),
    ("InsufficientSize", 7, "Insufficient Size"),
    ("InsufficientPower", 8, "Insufficient External Power"),
    ("DriverNotLoaded", 9, "Driver Not Loaded"),
    ("Timeout", 10, "Timeout"),
    ("IrqIssue", 11, "Interrupt Request Issue"),
    ("LibraryNotFound", 12, "NVML Shared Library Not Found"),
    ("FunctionNotFound", 13, "Function Not Found"),
    ("CorruptedInforom", 14, "Corrupted infoROM"),
    ("GpuIsLost", 15, "GPU is lost"),
    ("ResetRequired", 16, "GPU requires restart"),
    ("OperatingSystem", 17, "The operating system has blocked the request."),
    ("LibRmVersionMismatch", 18, "RM has detected an NVML/RM version mismatch."),
    ("InUse", 19, "In Use"),
    ("Memory", 20, "Insufficient Memory"),
    ("NoData", 21, "No Data"),
    ("VgpuEccNotSupported", 22, "vGPU ECC Not Supported"),
    ("InsufficientResources", 23, "Insufficient Resources"),
    ("FreqNotSupported", 24, "Frequency Not Supported"),
    ("ArgumentVersionMismatch", 25, "Argument Version Mismatch"),
    ("Deprecated", 26, "Deprecated"),
    ("NotReady", 27, "Not Ready"),
    ("GpuNotFound", 28, "GPU Not Found"),
    ("InvalidState", 29, "Invalid State"),
    ("ResetTypeNotSupported", 30, "Reset Type Not Supported"),
    ("Unknown", 999, "Unknown Error"),
)
_MESSAGES = MappingProxyType({code: text for _, code, text in ERROR_CODES})

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_UNKNOWN = 999

NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_TEMPERATURE_GPU = 0
NVML_NVLINK_MAX_LINKS = 36
NVML_NVLINK_DEVICE_TYPE_GPU = 0x00
NVML_NVLINK_DEVICE_TYPE_IBMNPU = 0x01
NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02
NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 0xFF
NVML_TOPOLOGY_INTERNAL = 0
NVML_TOPOLOGY_SINGLE = 10
NVML_TOPOLOGY_MULTIPLE = 20
NVML_TOPOLOGY_HOSTBRIDGE = 30
NVML_TOPOLOGY_NODE = 40
NVML_TOPOLOGY_SYSTEM = 50
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
NVML_GPU_INSTANCE_PROFILE_COUNT = 0x12
NVML_AFFINITY_SCOPE_NODE = 0
NVML_AFFINITY_SCOPE_SOCKET = 1
NVML_COMPUTEMODE_DEFAULT = 0
NVML_COMPUTEMODE_EXCLUSIVE_THREAD = 1
NVML_COMPUTEMODE_PROHIBITED = 2
NVML_COMPUTEMODE_EXCLUSIVE_PROCESS = 3
NVML_COMPUTEMODE_COUNT = 4
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_GPU_FABRIC_UUID_LEN = 16
NVML_GPU_FABRIC_STATE_NOT_SUPPORTED = 0
NVML_GPU_FABRIC_STATE_NOT_STARTED = 1
NVML_GPU_FABRIC_STATE_IN_PROGRESS = 2
NVML_GPU_FABRIC_STATE_COMPLETED = 3
nvmlGpuFabricInfo_v2 = 0x02000024
NOT_ATTRIBUTABLE = 0xFFFFFFFF  # an event not tied to a MIG GPU or compute instance

nvmlEventTypeSingleBitEccError = 0x1
nvmlEventTypeDoubleBitEccError = 0x2
nvmlEventTypePState = 0x4
nvmlEventTypeXidCriticalError = 0x8
nvmlEventTypeClock = 0x10
nvmlEventMigConfigChange = 0x100
nvmlEventTypeNone = 0x0


class NVMLError(Exception):
    """pynvml's error root: `NVMLError(code)` is an instance of the matching `NVMLError_<Name>`."""

    value: int

    def __new__(cls, value: int = NVML_ERROR_UNKNOWN, *_: Any) -> NVMLError:
        target = _CLASSES.get(value, cls) if cls is NVMLError else cls
        obj = Exception.__new__(target)
        obj.value = value
        return obj

    def __init__(self, value: int = NVML_ERROR_UNKNOWN, *_: Any) -> None:
        super().__init__(value)

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"NVML Error with code {self.value}")


def _subclass(name: str, code: int) -> type[NVMLError]:
    def new(cls: type[NVMLError], *_: Any) -> NVMLError:
        obj = Exception.__new__(cls)
        obj.value = code
        return obj

    def init(self: NVMLError, *_: Any) -> None:
        Exception.__init__(self, code)

    return type(f"NVMLError_{name}", (NVMLError,), {"__new__": new, "__init__": init})


_CLASSES: MappingProxyType[int, type[NVMLError]] = MappingProxyType(
    {code: _subclass(name, code) for name, code, _ in ERROR_CODES}
)
ERROR_CLASSES: MappingProxyType[str, type[NVMLError]] = MappingProxyType(
    {f"NVMLError_{name}": _CLASSES[code] for name, code, _ in ERROR_CODES}
)


# --- handles (opaque to callers) ---
@dataclass(frozen=True, slots=True)
class DeviceHandle:
    gpu: int  # parent GPU index
    mig_slot: int | None = None  # MIG device slot, None for the GPU itself


@dataclass(frozen=True, slots=True)
class GpuInstanceHandle:
    gpu: int
    gi_id: int


@dataclass(frozen=True, slots=True)
class EventSetHandle:
    id: int


# --- structs (the attributes the real ctypes structures have) ---
@dataclass(frozen=True, slots=True)
class PciInfo:
    busId: str  # "00000000:07:00.0"
    busIdLegacy: str  # "0000:07:00.0"
    domain: int
    bus: int
    device: int

    @classmethod
    def from_bus_id(cls, bus_id: str) -> PciInfo:
        domain, bus, rest = bus_id.split(":")
        device = rest.split(".")[0]
        legacy = f"{int(domain, 16):04X}:{bus.upper()}:{device.upper()}.0"
        return cls(bus_id.upper(), legacy, int(domain, 16), int(bus, 16), int(device, 16))


@dataclass(frozen=True, slots=True)
class Memory:
    total: int  # bytes
    free: int
    used: int


nvmlMemory_v2 = 0x02000028
"""pynvml's version argument of `nvmlDeviceGetMemoryInfo` for the v2 struct (with `reserved`)."""


@dataclass(frozen=True, slots=True)
class MemoryV2:
    version: int
    total: int  # bytes
    reserved: int
    free: int
    used: int


@dataclass(frozen=True, slots=True)
class Utilization:
    gpu: int
    memory: int


@dataclass(frozen=True, slots=True)
class GpuInstanceProfileInfo:
    id: int
    isP2pSupported: int
    sliceCount: int
    instanceCount: int
    multiprocessorCount: int
    memorySizeMB: int
    name: str  # "MIG 1g.10gb"


@dataclass(frozen=True, slots=True)
class GpuInstancePlacement:
    start: int
    size: int


@dataclass(frozen=True, slots=True)
class GpuInstanceInfo:
    device: DeviceHandle
    id: int
    profileId: int
    placement: GpuInstancePlacement


@dataclass(frozen=True, slots=True)
class EventData:
    device: DeviceHandle
    eventType: int
    eventData: int  # the Xid
    gpuInstanceId: int
    computeInstanceId: int


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    pid: int
    usedGpuMemory: int  # bytes


class c_nvmlGpuFabricInfo_v2_t(ctypes.Structure):  # noqa: N801 (pynvml's name)
    """pynvml's ctypes structure of the same name: NVML fills it through a pointer."""

    _fields_ = (
        ("version", ctypes.c_uint),
        ("clusterUuid", ctypes.c_uint8 * NVML_GPU_FABRIC_UUID_LEN),
        ("status", ctypes.c_int),
        ("cliqueId", ctypes.c_uint32),
        ("state", ctypes.c_uint8),
        ("healthMask", ctypes.c_uint32),
    )

    def __init__(self) -> None:
        super().__init__(version=nvmlGpuFabricInfo_v2)
