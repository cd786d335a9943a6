"""A stand-in for the `pynvml` module, answering NVML calls from a fixture (DESIGN.md §3).

`FakePynvml(fixture)` has the functions, constants, error classes and struct attributes of
`pynvml` that gputopo uses, so `PynvmlBackend(nvml=FakePynvml(fx), host_root=...)` runs the real
backend code: NVLink link counting (NVSwitch or direct wiring), MIG enumeration with empty slots,
Xid events and error translation. What it models:

- NVLink: `nvswitch` gives GPU i `max(NV cells of row i)` links whose remote is a switch (type
  SWITCH), so the pair count comes out as the min of both sides; `direct` gives k links whose
  remote PCI is the peer for an NV<k> cell. A GPU with no link raises NotSupported; a link number
  past the GPU's links raises InvalidArgument.
- MIG: a MIG device sits in slot = its placement start; other slots raise NotFound.
- GPU fabric info (`nvmlDeviceGetGpuFabricInfoV`): the GPU's `fabric` written into the caller's
  `c_nvmlGpuFabricInfo_v2_t`; NotSupported where the fixture has none.
- Memory affinity (NUMA-node scope): the GPU's `memoryAffinity` as a bitmask of 64-bit words;
  NotSupported where the fixture has none.
- Events: the fixture's `events` fire `afterSeconds` after the fake was created, by the injected
  `clock`; `sleep` (default: a real wait) is how a wait passes time, so a fake clock needs no
  real sleeps.
- Use (issue 47): memory used, utilisation and power come from `set_telemetry` and from the
  fixture's scripted `load`, applied when due by the same `clock` (later entries win).
- Compute mode: per GPU, Default until set (`compute_modes`, GPU index → NVML value); a MIG
  device's handle or an unknown mode is InvalidArgument. MPS clients come from `set_mps_clients`.
- Failures for tests: `fail(function, code, gpu=, times=)`, `set_lost`, `set_remap_pending`,
  `emit_xid`, `set_telemetry`, `set_mig_devices`, `set_mps_clients`.

Any other `nvml*` function raises NotImplementedError.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from agent.model import TopoLevel
from agent.nvml import fake_structs as fs
from agent.nvml.fake_state import (
    MAX_MIG_DEVICES,
    SUPPORTED_EVENTS,
    FakeNvmlState,
    _EventSet,
    write_fake_host_root,
)
from agent.nvml.fake_structs import DeviceHandle, EventSetHandle, GpuInstanceHandle, NVMLError
from agent.nvml.fixture import Fixture
from agent.nvml.nvml_fabric import STATES, status_code

__all__ = ["FakePynvml", "NVMLError", "write_fake_host_root"]


class FakePynvml(FakeNvmlState):
    """One fake NVML library: pynvml's functions over a fixture (state per instance)."""

    NVMLError = NVMLError
    c_nvmlGpuFabricInfo_v2_t = fs.c_nvmlGpuFabricInfo_v2_t
    nvmlMemory_v2 = fs.nvmlMemory_v2

    # ---- init and system -----------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.nvmlInitWithFlags(0)

    def nvmlInitWithFlags(self, flags: int) -> None:
        self._guard("nvmlInit")
        with self._cond:
            self._inits += 1

    def nvmlShutdown(self) -> None:
        self._guard("nvmlShutdown")
        with self._cond:
            self._inits -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._guard("nvmlSystemGetDriverVersion")
        return self.fixture.inventory.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._guard("nvmlSystemGetCudaDriverVersion")
        return self.fixture.inventory.cuda_driver_version

    nvmlSystemGetCudaDriverVersion_v2 = nvmlSystemGetCudaDriverVersion

    def nvmlDeviceGetCount(self) -> int:
        self._guard("nvmlDeviceGetCount")
        return len(self._gpus)

    # ---- handles -------------------------------------------------------------------------
    def nvmlDeviceGetHandleByIndex(self, index: int) -> DeviceHandle:
        if not 0 <= index < len(self._gpus):
            self._guard("nvmlDeviceGetHandleByIndex")
            raise NVMLError(fs.NVML_ERROR_INVALID_ARGUMENT)
        handle = DeviceHandle(index)
        self._guard("nvmlDeviceGetHandleByIndex", handle)
        return handle

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> DeviceHandle:
        self._guard("nvmlDeviceGetHandleByUUID")
        for gpu in self._gpus:
            if gpu.uuid == uuid:
                self._guard("nvmlDeviceGetHandleByUUID", DeviceHandle(gpu.index))
                return DeviceHandle(gpu.index)
            for mig in gpu.mig_devices:
                if mig.uuid == uuid:
                    self._guard("nvmlDeviceGetHandleByUUID", DeviceHandle(gpu.index))
                    return DeviceHandle(gpu.index, mig.start)
        raise NVMLError(fs.NVML_ERROR_NOT_FOUND)

    # ---- identity --------------------------------------------------------------------------
    def nvmlDeviceGetUUID(self, handle: DeviceHandle) -> str:
        self._guard("nvmlDeviceGetUUID", handle)
        mig = self._mig(handle)
        return mig.uuid if mig else self._gpu(handle).uuid

    def nvmlDeviceGetName(self, handle: DeviceHandle) -> str:
        self._guard("nvmlDeviceGetName", handle)
        mig, gpu = self._mig(handle), self._gpu(handle)
        return f"{gpu.product} MIG {mig.profile}" if mig else gpu.product

    def nvmlDeviceGetIndex(self, handle: DeviceHandle) -> int:
        self._guard("nvmlDeviceGetIndex", handle)
        return self._gpu(handle).index

    def nvmlDeviceGetMinorNumber(self, handle: DeviceHandle) -> int:
        self._guard("nvmlDeviceGetMinorNumber", handle)
        return self._gpu(handle).minor

    def nvmlDeviceGetPciInfo(self, handle: DeviceHandle) -> fs.PciInfo:
        self._guard("nvmlDeviceGetPciInfo", handle)
        return fs.PciInfo.from_bus_id(self._gpu(handle).pci_bus_id)

    nvmlDeviceGetPciInfo_v3 = nvmlDeviceGetPciInfo

    def nvmlDeviceGetCudaComputeCapability(self, handle: DeviceHandle) -> tuple[int, int]:
        self._guard("nvmlDeviceGetCudaComputeCapability", handle)
        major, minor = self._gpu(handle).compute_capability.split(".")
        return int(major), int(minor)

    def nvmlDeviceGetMemoryAffinity(
        self, handle: DeviceHandle, node_set_size: int, scope: int
    ) -> list[int]:
        """The NUMA nodes of the GPU's memory as a bitmask: bit n of word n // 64 is node n."""
        self._guard("nvmlDeviceGetMemoryAffinity", handle)
        gpu = self._gpu(handle)
        if scope == fs.NVML_AFFINITY_SCOPE_SOCKET:
            raise NotImplementedError("the fake pynvml models memory affinity by NUMA node only")
        if scope != fs.NVML_AFFINITY_SCOPE_NODE or node_set_size < 1:
            raise NVMLError(fs.NVML_ERROR_INVALID_ARGUMENT)
        if not gpu.memory_affinity or handle.mig_slot is not None:
            raise NVMLError(fs.NVML_ERROR_NOT_SUPPORTED)
        words = [0] * node_set_size
        for node in gpu.memory_affinity:
            if node // 64 < node_set_size:
                words[node // 64] |= 1 << (node % 64)
        return words

    def nvmlDeviceGetGpuFabricInfoV(self, handle: DeviceHandle, info_ref: Any) -> int:
        """Fill the structure `info_ref` points to (`ctypes.byref`) from the GPU's `fabric`."""
        self._guard("nvmlDeviceGetGpuFabricInfoV", handle)
        fabric, info = self._gpu(handle).fabric, getattr(info_ref, "_obj", None)
        if not isinstance(info, fs.c_nvmlGpuFabricInfo_v2_t):
            raise NVMLError(fs.NVML_ERROR_INVALID_ARGUMENT)
        if info.version != fs.nvmlGpuFabricInfo_v2:
            raise NVMLError(fs.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        if fabric is None or handle.mig_slot is not None:
            raise NVMLError(fs.NVML_ERROR_NOT_SUPPORTED)
        info.clusterUuid[:] = list(UUID(fabric.cluster_uuid).bytes)
        info.cliqueId = fabric.clique_id
        info.state = STATES.index(fabric.state)
        info.status = status_code(fabric.status)
        return fs.NVML_SUCCESS

    def nvmlDeviceGetMemoryInfo(
        self, handle: DeviceHandle, version: Any = None
    ) -> fs.Memory | fs.MemoryV2:
        """v1 (no `version`): total, free, used; `nvmlMemory_v2`: also the fixture's reserved
        memory, which v2's free and used leave out."""
        if version not in (None, fs.nvmlMemory_v2):
            raise NotImplementedError(f"nvmlDeviceGetMemoryInfo version {version!r}")
        self._guard("nvmlDeviceGetMemoryInfo", handle)
        mig, gpu = self._mig(handle), self._gpu(handle)
        total = (mig.memory_mib if mig else gpu.memory_mib) << 20
        used = 0 if mig else self._reading(gpu.index).memory_used_mib << 20
        if version is None:
            return fs.Memory(total=total, free=total - used, used=used)
        reserved = 0 if mig else gpu.memory_reserved_mib << 20
        free = total - reserved - used
        return fs.MemoryV2(version=version, total=total, reserved=reserved, free=free, used=used)

    # ---- MIG -----------------------------------------------------------------------------
    def nvmlDeviceGetMigMode(self, handle: DeviceHandle) -> list[int]:
        self._guard("nvmlDeviceGetMigMode", handle)
        mode = self._gpu(handle).mig_mode.value
        if mode == "unsupported" or handle.mig_slot is not None:
            raise NVMLError(fs.NVML_ERROR_NOT_SUPPORTED)
        on = fs.NVML_DEVICE_MIG_ENABLE if mode == "enabled" else fs.NVML_DEVICE_MIG_DISABLE
        return [on, on]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: DeviceHandle) -> int:
        self._guard("nvmlDeviceGetMaxMigDeviceCount", handle)
        return MAX_MIG_DEVICES if self._gpu(handle).mig_mode.value == "enabled" else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: DeviceHandle, index: int) -> DeviceHandle:
        self._guard("nvmlDeviceGetMigDeviceHandleByIndex", handle)
        gpu = self._gpu(handle)
        if (
            gpu.mig_mode.value != "enabled"
            or handle.mig_slot is not None
            or not 0 <= index < MAX_MIG_DEVICES
        ):
            raise NVMLError(fs.NVML_ERROR_INVALID_ARGUMENT)
        if not any(m.start == index for m in gpu.mig_devices):
            raise NVMLError(fs.NVML_ERROR_NOT_FOUND)
        return DeviceHandle(gpu.index, index)

    def nvmlDeviceIsMigDeviceHandle(self, handle: DeviceHandle) -> int:
        self._guard("nvmlDeviceIsMigDeviceHandle", handle)
        return int(self._mig(handle) is not None)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: DeviceHandle) -> DeviceHandle:
        self._mig_only("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", handle)
        return DeviceHandle(handle.gpu)

    def nvmlDeviceGetGpuInstanceId(self, handle: DeviceHandle) -> int:
        return self._mig_only("nvmlDeviceGetGpuInstanceId", handle).gi_id

    def nvmlDeviceGetComputeInstanceId(self, handle: DeviceHandle) -> int:
        return self._mig_only("nvmlDeviceGetComputeInstanceId", handle).ci_id

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, handle: DeviceHandle, profile: int, version: int = 2
    ) -> fs.GpuInstanceProfileInfo:
        self._guard("nvmlDeviceGetGpuInstanceProfileInfo", handle)
        gpu = self._gpu(handle)
        if not 0 <= profile < fs.NVML_GPU_INSTANCE_PROFILE_COUNT or handle.mig_slot is not None:
            raise NVMLError(fs.NVML_ERROR_INVALID_ARGUMENT)
        found = next((p for p in self._profiles(gpu) if p.nvml_profile == profile), None)
        if gpu.mig_mode.value != "enabled" or found is None:
            raise NVMLError(fs.NVML_ERROR_NOT_SUPPORTED)
        return fs.GpuInstanceProfileInfo(
            id=found.profile_id,
            isP2pSupported=0,
            sliceCount=found.slices,
            instanceCount=found.max_instances,
            multiprocessorCount=found.sms,
            memorySizeMB=found.memory_mib,
            name=f"MIG {found.name}",
        )

    def nvmlDeviceGetGpuInstanceById(self, handle: DeviceHandle, gi_id: int) -> GpuInstanceHandle:
        self._guard("nvmlDeviceGetGpuInstanceById", handle)
        gpu = self._gpu(handle)
        if gpu.mig_mode.value != "enabled" or handle.mig_slot is not None:
            raise NVMLError(fs.NVML_ERROR_NOT_SUPPORTED)
        if not any(m.gi_id == gi_id for m in gpu.mig_devices):
            raise NVMLError(fs.NVML_ERROR_NOT_FOUND)
        return GpuInstanceHandle(gpu.index, gi_id)

    def nvmlGpuInstanceGetInfo(self, instance: GpuInstanceHandle) -> fs.GpuInstanceInfo:
        self._guard("nvmlGpuInstanceGetInfo", instance)
        gpu = self._gpus[instance.gpu]
        mig = next((m for m in gpu.mig_devices if m.gi_id == instance.gi_id), None)
        if mig is None:
            raise NVMLError(fs.NVML_ERROR_INVALID_ARGUMENT)
        profile = next(p for p in self._profiles(gpu) if p.name == mig.profile)
        return fs.GpuInstanceInfo(
            device=DeviceHandle(gpu.index),
            id=mig.gi_id,
            profileId=profile.profile_id,
            placement=fs.GpuInstancePlacement(start=mig.start, size=mig.size),
        )

    # ---- NVLink and PCIe topology ---------------------------------------------------------
    def _link(self, function: str, handle: DeviceHandle, link: int) -> tuple[str, int]:
        self._guard(function, handle)
        links = self._links[self._gpu(handle).index]
        if not links or handle.mig_slot is not None:
            raise NVMLError(fs.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < len(links):
            raise NVMLError(fs.NVML_ERROR_INVALID_ARGUMENT)
        return links[link]

    def nvmlDeviceGetNvLinkState(self, handle: DeviceHandle, link: int) -> int:
        self._link("nvmlDeviceGetNvLinkState", handle, link)
        return fs.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: DeviceHandle, link: int) -> fs.PciInfo:
        return fs.PciInfo.from_bus_id(
            self._link("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)[0]
        )

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: DeviceHandle, link: int) -> int:
        return self._link("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)[1]

    def nvmlDeviceGetTopologyCommonAncestor(self, a: DeviceHandle, b: DeviceHandle) -> int:
        self._guard("nvmlDeviceGetTopologyCommonAncestor", a)
        self._guard("nvmlDeviceGetTopologyCommonAncestor", b)
        return _level_for(self.fixture, self._gpu(a).index, self._gpu(b).index)

    # ---- health and telemetry -------------------------------------------------------------
    def nvmlDeviceGetRemappedRows(self, handle: DeviceHandle) -> tuple[int, int, int, int]:
        self._guard("nvmlDeviceGetRemappedRows", handle)
        gpu = self._gpu(handle)
        if int(gpu.compute_capability.split(".")[0]) < 8:
            raise NVMLError(fs.NVML_ERROR_NOT_SUPPORTED)  # row remapping came with Ampere
        with self._cond:
            pending = int(gpu.index in self._remap)
        return (0, 0, pending, 0)

    def nvmlDeviceGetUtilizationRates(self, handle: DeviceHandle) -> fs.Utilization:
        self._guard("nvmlDeviceGetUtilizationRates", handle)
        gpu = self._gpu(handle)
        if gpu.mig_mode.value == "enabled" or handle.mig_slot is not None:
            raise NVMLError(fs.NVML_ERROR_NOT_SUPPORTED)
        reading = self._reading(gpu.index)
        return fs.Utilization(gpu=reading.utilization, memory=reading.utilization)

    def nvmlDeviceGetTemperature(self, handle: DeviceHandle, sensor: int) -> int:
        self._guard("nvmlDeviceGetTemperature", handle)
        if sensor != fs.NVML_TEMPERATURE_GPU:
            raise NVMLError(fs.NVML_ERROR_NOT_SUPPORTED)
        return self._reading(self._gpu(handle).index).temperature_c

    def nvmlDeviceGetPowerUsage(self, handle: DeviceHandle) -> int:
        self._guard("nvmlDeviceGetPowerUsage", handle)
        return round(self._reading(self._gpu(handle).index).power_w * 1000)

    # ---- compute mode and MPS -------------------------------------------------------------
    def nvmlDeviceGetComputeMode(self, handle: DeviceHandle) -> int:
        self._guard("nvmlDeviceGetComputeMode", handle)
        return self.compute_modes[self._whole_gpu(handle)]

    def nvmlDeviceSetComputeMode(self, handle: DeviceHandle, mode: int) -> None:
        self._guard("nvmlDeviceSetComputeMode", handle)
        gpu = self._whole_gpu(handle)
        if not 0 <= mode < fs.NVML_COMPUTEMODE_COUNT:
            raise NVMLError(fs.NVML_ERROR_INVALID_ARGUMENT)
        with self._cond:
            self.compute_modes[gpu] = mode

    def nvmlDeviceGetMPSComputeRunningProcesses(self, handle: DeviceHandle) -> list[fs.ProcessInfo]:
        self._guard("nvmlDeviceGetMPSComputeRunningProcesses", handle)
        with self._cond:
            pids = self._mps_pids.get(self._whole_gpu(handle), ())
        return [fs.ProcessInfo(pid=pid, usedGpuMemory=0) for pid in pids]

    nvmlDeviceGetMPSComputeRunningProcesses_v3 = nvmlDeviceGetMPSComputeRunningProcesses

    def _whole_gpu(self, handle: DeviceHandle) -> int:
        """The index of a whole GPU's handle; a MIG device's handle is InvalidArgument."""
        if self._mig(handle) is not None:
            raise NVMLError(fs.NVML_ERROR_INVALID_ARGUMENT)
        return self._gpu(handle).index

    # ---- events ---------------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> EventSetHandle:
        self._guard("nvmlEventSetCreate")
        with self._cond:
            handle = EventSetHandle(len(self._sets) + 1)
            self._sets[handle.id] = _EventSet()
        return handle

    def nvmlEventSetFree(self, event_set: EventSetHandle) -> None:
        self._guard("nvmlEventSetFree")
        with self._cond:
            self._sets.pop(event_set.id, None)

    def nvmlDeviceGetSupportedEventTypes(self, handle: DeviceHandle) -> int:
        self._guard("nvmlDeviceGetSupportedEventTypes", handle)
        self._gpu(handle)
        return SUPPORTED_EVENTS

    def nvmlDeviceRegisterEvents(
        self, handle: DeviceHandle, mask: int, event_set: EventSetHandle
    ) -> None:
        self._guard("nvmlDeviceRegisterEvents", handle)
        gpu = self._gpu(handle)
        if mask & ~SUPPORTED_EVENTS:
            raise NVMLError(fs.NVML_ERROR_NOT_SUPPORTED)
        with self._cond:
            es = self._event_set(event_set)
            es.masks[gpu.index] = es.masks.get(gpu.index, 0) | mask

    def nvmlEventSetWait(self, event_set: EventSetHandle, timeoutms: int) -> fs.EventData:
        """The set's next event; NVMLError_Timeout after `timeoutms` (by the injected clock)."""
        self._guard("nvmlEventSetWait")
        deadline = self._clock() + timeoutms / 1000
        with self._cond:
            while True:
                es = self._event_set(event_set)
                found, next_due = self._take_event(es)
                if found is not None:
                    return found
                now = self._clock()
                if now >= deadline:
                    raise NVMLError(fs.NVML_ERROR_TIMEOUT)
                self._pause(min(deadline, next_due) - now)

    nvmlEventSetWait_v2 = nvmlEventSetWait


def _level_for(fixture: Fixture, a: int, b: int) -> int:
    """NVML's common-ancestor level for a pair: the fixture's cell, or a guess for NVLink pairs."""
    inv = fixture.inventory
    if a == b:
        return fs.NVML_TOPOLOGY_INTERNAL
    link = inv.links.link(a, b)
    if not link.nvlinks:
        return int(link.level)
    same_numa = inv.gpus[a].numa_node == inv.gpus[b].numa_node
    return int(TopoLevel.NODE if same_numa else TopoLevel.SYS)
