"""`NvmlBackend` over pynvml: the only module that imports `pynvml`.

`PynvmlBackend(nvml=<module>, host_root=Path("/"))` takes the pynvml module object, so tests pass
the fixture-driven stand-in (`FakePynvml`) and the same code runs on real GPUs and in every test.
Every NVML error is translated where it is raised (`_translated`): LibraryNotFound/DriverNotLoaded →
`NvmlUnavailable`, NotSupported → `NvmlNotSupported`, GpuIsLost/ResetRequired → `GpuLost`,
anything else → `NvmlError(code)`. Expected absences (no NVLink, no MIG, no row remapper, no
utilization on a MIG GPU, no NVLink fabric) come back as None or empty instead.
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pynvml

from agent import logkeys
from agent.errors import GpuLost, NvmlError, NvmlNotSupported, NvmlUnavailable
from agent.model import Gpu, GpuUuid, LinkMatrix, MigMode, NumaNode, NvlinkFabric
from agent.nvml import sysfs
from agent.nvml.backend import ComputeMode, GpuStatus, GpuTelemetry, NvmlBackend, XidEvent
from agent.nvml.fake_pynvml import FakePynvml, write_fake_host_root
from agent.nvml.fixture import Fixture, load_fixture
from agent.nvml.nvml_fabric import read_fabric
from agent.nvml.nvml_links import link_matrix
from agent.nvml.nvml_mig import read_mig_devices

log = logging.getLogger(__name__)

_UNAVAILABLE = {"LibraryNotFound", "DriverNotLoaded", "LibRmVersionMismatch"}
_LOST = {"GpuIsLost", "ResetRequired"}
_NOT_ATTRIBUTABLE = 0xFFFFFFFF
_NODE_SET_WORDS = 16
"""64-bit words asked of nvmlDeviceGetMemoryAffinity: 1024 NUMA nodes, Linux's MAX_NUMNODES cap."""


class PynvmlBackend:
    """The agent's NVML view; `nvml` is the pynvml module (or a stand-in with the same calls)."""

    def __init__(
        self,
        nvml: Any = None,
        host_root: Path = Path("/"),
        *,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self.nvml: Any = pynvml if nvml is None else nvml
        self.host_root = host_root
        self._on_close = on_close
        self._event_set: Any = None
        self._uuid_by_handle: dict[object, GpuUuid] = {}
        self._fabric: NvlinkFabric | None = None
        with self.translated("nvmlInit"):
            self.nvml.nvmlInit()

    @contextmanager
    def translated(self, what: str) -> Iterator[None]:
        """Turn the NVML errors raised inside into `agent.errors` types naming `what`."""
        try:
            yield
        except self.nvml.NVMLError as exc:
            raise translate(exc, what) from exc

    # ---- NvmlBackend --------------------------------------------------------------------
    def driver_version(self) -> str:
        with self.translated("nvmlSystemGetDriverVersion"):
            return _text(self.nvml.nvmlSystemGetDriverVersion())

    def cuda_driver_version(self) -> int:
        with self.translated("nvmlSystemGetCudaDriverVersion"):
            return int(self.nvml.nvmlSystemGetCudaDriverVersion())

    def gpus(self) -> tuple[Gpu, ...]:
        with self.translated("nvmlDeviceGetCount"):
            count = int(self.nvml.nvmlDeviceGetCount())
        return tuple(self._gpu(index) for index in range(count))

    def links(self, gpus: tuple[Gpu, ...]) -> LinkMatrix:
        with self.translated("NVLink and PCIe topology"):
            handles = [self.nvml.nvmlDeviceGetHandleByUUID(g.uuid) for g in gpus]
            matrix, self._fabric = link_matrix(self.nvml, handles, [g.pci_bus_id for g in gpus])
        return matrix

    def nvlink_fabric(self) -> NvlinkFabric:
        """How the NVLinks seen by the last `links()` call are wired (not in the Protocol)."""
        if self._fabric is None:
            self.links(self.gpus())
        return self._fabric or NvlinkFabric.NONE

    def numa_nodes(self) -> tuple[NumaNode, ...]:
        return sysfs.numa_nodes(self.host_root)

    def wait_xid(self, timeout_s: float) -> XidEvent | None:
        es = self._events()
        try:
            with self.translated("nvmlEventSetWait"):
                data = self.nvml.nvmlEventSetWait(es, max(0, round(timeout_s * 1000)))
        except NvmlError as exc:
            if exc.code == self.nvml.NVML_ERROR_TIMEOUT:
                return None
            raise
        if not int(data.eventType) & self.nvml.nvmlEventTypeXidCriticalError:
            return None
        uuid = self._uuid_by_handle.get(_handle_key(data.device))
        if uuid is None:
            with self.translated("nvmlDeviceGetUUID"):
                uuid = GpuUuid(_text(self.nvml.nvmlDeviceGetUUID(data.device)))
        return XidEvent(
            gpu_uuid=uuid,
            xid=int(data.eventData),
            gi_id=_attributable(data.gpuInstanceId),
            ci_id=_attributable(data.computeInstanceId),
        )

    def status(self, uuid: GpuUuid) -> GpuStatus:
        try:
            with self.translated("nvmlDeviceGetHandleByUUID"):
                handle = self.nvml.nvmlDeviceGetHandleByUUID(uuid)
                self.nvml.nvmlDeviceGetMemoryInfo(handle)
            return GpuStatus(responds=True, lost=False, remap_pending=self._remap_pending(handle))
        except GpuLost:
            return GpuStatus(responds=False, lost=True, remap_pending=False)
        except NvmlError as exc:
            log.debug("GPU %s does not respond: %s", uuid, exc, extra={logkeys.GPU_UUID: uuid})
            return GpuStatus(responds=False, lost=False, remap_pending=False)

    def telemetry(self, uuid: GpuUuid) -> GpuTelemetry:
        with self.translated("nvmlDeviceGetHandleByUUID"):
            handle = self.nvml.nvmlDeviceGetHandleByUUID(uuid)
        util = self._optional("nvmlDeviceGetUtilizationRates", handle)
        memory = self._memory_info(handle)
        temp = self._optional("nvmlDeviceGetTemperature", handle, self.nvml.NVML_TEMPERATURE_GPU)
        power_mw = self._optional("nvmlDeviceGetPowerUsage", handle)
        return GpuTelemetry(
            utilization_percent=None if util is None else int(util.gpu),
            memory_used_mib=None if memory is None else int(memory.used) >> 20,
            temperature_c=None if temp is None else int(temp),
            power_w=None if power_mw is None else int(power_mw) / 1000,
        )

    # ---- compute mode and MPS (used by `gputopo-agent mps`; not in the Protocol) ---------------
    def compute_mode(self, uuid: GpuUuid) -> ComputeMode:
        with self.translated(f"nvmlDeviceGetComputeMode({uuid})"):
            value = int(
                self.nvml.nvmlDeviceGetComputeMode(self.nvml.nvmlDeviceGetHandleByUUID(uuid))
            )
        for mode in ComputeMode:
            if value == getattr(self.nvml, f"NVML_COMPUTEMODE_{mode.value}"):
                return mode
        raise NvmlError(value, f"nvmlDeviceGetComputeMode({uuid}): unknown compute mode {value}")

    def set_compute_mode(self, uuid: GpuUuid, mode: ComputeMode) -> None:
        """Needs root on the host (NVML answers NoPermission otherwise); lasts until reboot."""
        value = getattr(self.nvml, f"NVML_COMPUTEMODE_{mode.value}")
        with self.translated(f"nvmlDeviceSetComputeMode({uuid}, {mode})"):
            handle = self.nvml.nvmlDeviceGetHandleByUUID(uuid)
            self.nvml.nvmlDeviceSetComputeMode(handle, value)

    def mps_clients(self, uuid: GpuUuid) -> int | None:
        """How many processes NVML lists as MPS clients of the GPU; None where unsupported."""
        with self.translated("nvmlDeviceGetHandleByUUID"):
            handle = self.nvml.nvmlDeviceGetHandleByUUID(uuid)
        found = self._optional("nvmlDeviceGetMPSComputeRunningProcesses", handle)
        return None if found is None else len(found)

    def close(self) -> None:
        try:
            with self.translated("nvmlShutdown"):
                if self._event_set is not None:
                    self.nvml.nvmlEventSetFree(self._event_set)
                    self._event_set = None
                self.nvml.nvmlShutdown()
        except NvmlError as exc:
            log.warning("closing NVML failed: %s", exc)
        finally:
            if self._on_close is not None:
                self._on_close()
                self._on_close = None

    # ---- helpers ------------------------------------------------------------------------
    def _gpu(self, index: int) -> Gpu:
        nvml = self.nvml
        with self.translated(f"GPU {index}"):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            bus_id = _text(nvml.nvmlDeviceGetPciInfo(handle).busId)
            major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
            mode = self._mig_mode(handle)
            return Gpu(
                index=index,
                uuid=GpuUuid(_text(nvml.nvmlDeviceGetUUID(handle))),
                product=_text(nvml.nvmlDeviceGetName(handle)),
                memory_mib=int(nvml.nvmlDeviceGetMemoryInfo(handle).total) >> 20,
                memory_reserved_mib=self._reserved_mib(handle),
                pci_bus_id=bus_id,
                minor=int(nvml.nvmlDeviceGetMinorNumber(handle)),
                numa_node=sysfs.gpu_numa_node(self.host_root, bus_id),
                compute_capability=f"{major}.{minor}",
                mig_mode=mode,
                mig_devices=read_mig_devices(nvml, handle) if mode is MigMode.ENABLED else (),
                memory_affinity=self._memory_affinity(handle),
                fabric=read_fabric(nvml, handle, self._optional),
            )

    def _reserved_mib(self, handle: Any) -> int:
        """NVML's reserved memory (`nvmlDeviceGetMemoryInfo_v2`) in MiB rounded up, as
        `nvidia-smi` shows it (an H200 reserves 615.x MiB: 616), so the usable memory that DRA
        publishes and shares split never counts a part MiB the driver keeps; 0 where this
        pynvml or driver has no v2."""
        info = self._memory_v2(handle)
        return 0 if info is None else -(-int(info.reserved) >> 20)

    def _memory_v2(self, handle: Any) -> Any:
        version = getattr(self.nvml, "nvmlMemory_v2", None)
        return (
            None if version is None else self._optional("nvmlDeviceGetMemoryInfo", handle, version)
        )

    def _memory_info(self, handle: Any) -> Any:
        """v2 where there is one: its `used` leaves the reserved memory out, as the shares'
        capacity does (DESIGN §12) and as `nvidia-smi` shows it; else v1."""
        info = self._memory_v2(handle)
        return info if info is not None else self._optional("nvmlDeviceGetMemoryInfo", handle)

    def _mig_mode(self, handle: Any) -> MigMode:
        try:
            current, _pending = self.nvml.nvmlDeviceGetMigMode(handle)
        except self.nvml.NVMLError as exc:
            if exc.value in (
                self.nvml.NVML_ERROR_NOT_SUPPORTED,
                self.nvml.NVML_ERROR_FUNCTION_NOT_FOUND,
            ):
                return MigMode.UNSUPPORTED
            raise
        return MigMode.ENABLED if current == self.nvml.NVML_DEVICE_MIG_ENABLE else MigMode.DISABLED

    def _memory_affinity(self, handle: Any) -> tuple[int, ...]:
        """NUMA nodes of the GPU's memory (NVML, node scope); () where NVML does not answer."""
        scope = getattr(self.nvml, "NVML_AFFINITY_SCOPE_NODE", 0)
        words = self._optional("nvmlDeviceGetMemoryAffinity", handle, _NODE_SET_WORDS, scope)
        if words is None:
            return ()
        return tuple(
            64 * pos + bit
            for pos, word in enumerate(words)
            for bit in range(64)
            if int(word) >> bit & 1
        )

    def _remap_pending(self, handle: Any) -> bool:
        rows = self._optional("nvmlDeviceGetRemappedRows", handle)
        return bool(rows is not None and rows[2])

    def _optional(self, function: str, *args: Any) -> Any:
        """Call an NVML function; None when this pynvml, driver or device does not have it."""
        call = getattr(self.nvml, function, None)
        if call is None:
            return None
        try:
            with self.translated(function):
                return call(*args)
        except NvmlNotSupported:
            return None
        except NvmlError as exc:
            if exc.code == self.nvml.NVML_ERROR_FUNCTION_NOT_FOUND:
                return None
            raise

    def _events(self) -> Any:
        """The event set with every GPU registered for Xid events (created on first use)."""
        if self._event_set is not None:
            return self._event_set
        nvml = self.nvml
        with self.translated("nvmlEventSetCreate"):
            es = nvml.nvmlEventSetCreate()
            for index in range(int(nvml.nvmlDeviceGetCount())):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                # Cached: a GPU that fell off the bus cannot tell its UUID when its Xid arrives.
                try:
                    uuid = GpuUuid(_text(nvml.nvmlDeviceGetUUID(handle)))
                    self._uuid_by_handle[_handle_key(handle)] = uuid
                except nvml.NVMLError as exc:
                    log.warning(
                        "GPU %d: UUID unreadable (%s); its Xids are resolved late", index, exc
                    )
                mask = self._optional("nvmlDeviceGetSupportedEventTypes", handle) or 0
                mask &= nvml.nvmlEventTypeXidCriticalError
                if mask:
                    nvml.nvmlDeviceRegisterEvents(handle, mask, es)
                else:
                    log.info("GPU %d cannot report Xid events (too old); not watched", index)
        self._event_set = es
        return es


def _handle_key(handle: Any) -> object:
    """A hashable identity for an NVML device handle: the pointer value for real ctypes handles."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (ctypes.ArgumentError, TypeError):
        return handle if getattr(type(handle), "__hash__", None) else id(handle)


def translate(exc: Any, what: str) -> NvmlError:
    """The `agent.errors` type for a pynvml `NVMLError` raised by `what`."""
    code = int(getattr(exc, "value", -1))
    name = type(exc).__name__.removeprefix("NVMLError_")
    message = f"{what}: NVML error {code} ({exc})"
    if name in _UNAVAILABLE:
        return NvmlUnavailable(code, message)
    if name == "NotSupported":
        return NvmlNotSupported(code, message)
    if name in _LOST:
        return GpuLost(code, message)
    return NvmlError(code, message)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _attributable(value: Any) -> int | None:
    number = int(value)
    return None if number == _NOT_ATTRIBUTABLE else number


def open_backend(fixture: str | Path | None, host_root: Path = Path("/")) -> NvmlBackend:
    """The real backend, or with `fixture` (a built-in name or a file) the fake-backed one.

    With a fixture the NUMA and PCI sysfs files come from the fixture, written to a temporary host
    root that `close()` removes; `host_root` is then not read.
    """
    if fixture is None:
        return PynvmlBackend(host_root=host_root)
    backend, _fake = fake_backend(fixture)
    return backend


def fake_backend(
    fixture: str | Path | Fixture, **fake_options: Any
) -> tuple[PynvmlBackend, FakePynvml]:
    """A backend over the fake pynvml for `fixture`, and the fake (to inject failures through).

    `fake_options` go to `FakePynvml` (`clock=`, `sleep=`).
    """
    fx = fixture if isinstance(fixture, Fixture) else load_fixture(fixture)
    fake = FakePynvml(fx, **fake_options)
    root = Path(tempfile.mkdtemp(prefix="gputopo-host-", dir=_scratch_dir()))
    try:
        write_fake_host_root(fx, root)
        backend = PynvmlBackend(nvml=fake, host_root=root, on_close=lambda: _remove(root))
    except BaseException:
        _remove(root)
        raise
    weakref.finalize(backend, _remove, root)  # also when a caller never closes it
    return backend, fake


def _scratch_dir() -> str | None:
    """/dev/shm when writable (the fake host root is many tiny files), else $TMPDIR."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


def _remove(root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)
