"""State and test controls of the fake pynvml (`fake_pynvml.FakePynvml` adds the NVML calls).

Everything here is per instance: the GPUs (MIG layout can change), injected failures, lost GPUs,
pending row remaps, telemetry readings and event sets with their queues.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agent.model import Gpu, MigDevice, MigMode
from agent.nvml import fake_structs as fs
from agent.nvml.fake_structs import DeviceHandle, EventSetHandle, GpuInstanceHandle, NVMLError
from agent.nvml.fixture import Fixture
from agent.nvml.mig_profiles import MigProfile, profiles_for
from agent.nvml.sysfs import write_host_root

MAX_MIG_DEVICES = 7
_XID_MASK = fs.nvmlEventTypeXidCriticalError
SUPPORTED_EVENTS = (
    fs.nvmlEventTypeSingleBitEccError
    | fs.nvmlEventTypeDoubleBitEccError
    | fs.nvmlEventTypePState
    | fs.nvmlEventTypeXidCriticalError
    | fs.nvmlEventTypeClock
)


def write_fake_host_root(fixture: Fixture, root: Path) -> Path:
    """Create the sysfs files of the fixture's NUMA nodes and GPUs under `root`."""
    inv = fixture.inventory
    return write_host_root(root, inv.numa_nodes, {g.pci_bus_id: g.numa_node for g in inv.gpus})


@dataclass(slots=True)
class _Failure:
    function: str
    code: int
    gpu: int | None
    times: int | None


@dataclass(slots=True)
class _Telemetry:
    utilization: int = 0
    memory_used_mib: int = 0
    temperature_c: int = 34
    power_w: float = 62.0


@dataclass(slots=True)
class _EventSet:
    masks: dict[int, int] = field(default_factory=dict)  # GPU index → registered event mask
    queue: deque[fs.EventData] = field(default_factory=deque)
    cursor: int = 0  # next scripted event


class FakeNvmlState:
    """A fake NVML library's state, and the controls tests use to change it."""

    def __init__(
        self,
        fixture: Fixture,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.fixture = fixture
        self._clock, self._sleep = clock, sleep
        self._born = clock()
        self._cond = threading.Condition()
        self._inits = 0
        self._gpus: list[Gpu] = list(fixture.inventory.gpus)
        self._failures: list[_Failure] = []
        self._lost: set[int] = set()
        self._remap: set[int] = set()
        self._telemetry = {g.index: _Telemetry() for g in self._gpus}
        self._load_cursor = 0  # next scripted load entry (fixture.load)
        self._sets: dict[int, _EventSet] = {}
        self._links = [self._wire(g.index) for g in self._gpus]
        self.compute_modes = {g.index: fs.NVML_COMPUTEMODE_DEFAULT for g in self._gpus}
        self._mps_pids: dict[int, tuple[int, ...]] = {}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("NVMLError_") and name in fs.ERROR_CLASSES:
            return fs.ERROR_CLASSES[name]
        if name.startswith(("NVML_", "nvmlEvent")) and hasattr(fs, name):
            return getattr(fs, name)
        if name.startswith("nvml"):
            return _not_modelled(name)
        raise AttributeError(name)

    # ---- test controls -------------------------------------------------------------------
    def fail(
        self, function: str, code: int, *, gpu: int | None = None, times: int | None = None
    ) -> None:
        """Make `function` raise NVMLError(code) (for one GPU, or all), `times` times or forever."""
        with self._cond:
            self._failures.append(_Failure(function, code, gpu, times))

    def clear_failures(self) -> None:
        with self._cond:
            self._failures.clear()

    def set_lost(self, gpu: int, lost: bool = True) -> None:
        """Every call on this GPU (and its MIG devices) raises GpuIsLost while lost."""
        with self._cond:
            (self._lost.add if lost else self._lost.discard)(gpu)

    def set_remap_pending(self, gpu: int, pending: bool = True) -> None:
        with self._cond:
            (self._remap.add if pending else self._remap.discard)(gpu)

    def set_telemetry(self, gpu: int, **values: float) -> None:
        """Set `utilization`, `memory_used_mib`, `temperature_c` or `power_w` of a GPU."""
        with self._cond:
            reading = self._telemetry[gpu]
            for key, value in values.items():
                if not hasattr(reading, key):
                    raise TypeError(f"set_telemetry: unknown reading {key!r}")
                setattr(reading, key, type(getattr(reading, key))(value))

    def _reading(self, gpu: int) -> _Telemetry:
        """The GPU's readings, once the fixture's scripted `load` entries now due are applied."""
        with self._cond:
            script = self.fixture.load
            elapsed = self._clock() - self._born
            while self._load_cursor < len(script) and script[self._load_cursor].after_s <= elapsed:
                entry = script[self._load_cursor]
                reading = self._telemetry[entry.gpu]
                if entry.memory_used_mib is not None:
                    reading.memory_used_mib = entry.memory_used_mib
                if entry.sm_percent is not None:
                    reading.utilization = entry.sm_percent
                if entry.power_w is not None:
                    reading.power_w = entry.power_w
                self._load_cursor += 1
            return self._telemetry[gpu]

    def set_mps_clients(self, gpu: int, pids: Sequence[int]) -> None:
        """The processes NVML lists as MPS clients of a GPU (what CUDA under MPS would start)."""
        with self._cond:
            self._mps_pids[gpu] = tuple(pids)

    def set_mig_devices(self, gpu: int, devices: Sequence[MigDevice]) -> None:
        """Re-partition a MIG-enabled GPU (what `nvidia-smi mig -cgi` would do)."""
        with self._cond:
            old = self._gpus[gpu]
            if old.mig_mode is not MigMode.ENABLED:
                raise ValueError(f"GPU {gpu} is not in MIG mode")
            ordered = tuple(sorted(devices, key=lambda m: m.start))
            self._gpus[gpu] = replace(old, mig_devices=ordered)

    def emit_xid(
        self, gpu: int, xid: int, *, gi_id: int | None = None, ci_id: int | None = None
    ) -> None:
        """Deliver an Xid now to every event set that registered this GPU for Xid events."""
        with self._cond:
            data = self._event(gpu, xid, gi_id, ci_id)
            for es in self._sets.values():
                if es.masks.get(gpu, 0) & _XID_MASK:
                    es.queue.append(data)
            self._cond.notify_all()

    # ---- plumbing ------------------------------------------------------------------------
    def _guard(self, function: str, device: DeviceHandle | GpuInstanceHandle | None = None) -> None:
        with self._cond:
            if self._inits == 0 and not function.startswith("nvmlInit"):
                raise NVMLError(fs.NVML_ERROR_UNINITIALIZED)
            gpu = None if device is None else device.gpu
            for failure in self._failures:
                if failure.function == function and failure.gpu in (None, gpu):
                    if failure.times is not None:
                        failure.times -= 1
                        if failure.times <= 0:
                            self._failures.remove(failure)
                    raise NVMLError(failure.code)
            if gpu is not None and gpu in self._lost:
                raise NVMLError(fs.NVML_ERROR_GPU_IS_LOST)

    def _gpu(self, handle: DeviceHandle) -> Gpu:
        if not isinstance(handle, DeviceHandle) or not 0 <= handle.gpu < len(self._gpus):
            raise NVMLError(fs.NVML_ERROR_INVALID_ARGUMENT)
        return self._gpus[handle.gpu]

    def _mig(self, handle: DeviceHandle) -> MigDevice | None:
        gpu = self._gpu(handle)
        if handle.mig_slot is None:
            return None
        found = next((m for m in gpu.mig_devices if m.start == handle.mig_slot), None)
        if found is None:
            raise NVMLError(fs.NVML_ERROR_INVALID_ARGUMENT)  # a stale handle after re-partitioning
        return found

    def _mig_only(self, function: str, handle: DeviceHandle) -> MigDevice:
        """`_guard(function, handle)`, then the MIG device of a MIG handle (a GPU handle is
        INVALID_ARGUMENT)."""
        self._guard(function, handle)
        mig = self._mig(handle)
        if mig is None:
            raise NVMLError(fs.NVML_ERROR_INVALID_ARGUMENT)
        return mig

    def _profiles(self, gpu: Gpu) -> tuple[MigProfile, ...]:
        return profiles_for(gpu.product, gpu.memory_mib)

    def _wire(self, index: int) -> tuple[tuple[str, int], ...]:
        """(remote PCI bus id, remote device type) of each NVLink of a GPU, by link number."""
        inv = self.fixture.inventory
        row = [0 if j == index else inv.links.link(index, j).nvlinks for j in range(len(inv.gpus))]
        if inv.nvlink_fabric.value == "nvswitch":
            switch = fs.NVML_NVLINK_DEVICE_TYPE_SWITCH
            return tuple(
                (f"00000000:{0xC4 + link // 2:02X}:00.0", switch) for link in range(max(row))
            )
        peer = fs.NVML_NVLINK_DEVICE_TYPE_GPU
        return tuple((inv.gpus[j].pci_bus_id, peer) for j, k in enumerate(row) for _ in range(k))

    def _event_set(self, handle: EventSetHandle) -> _EventSet:
        found = self._sets.get(handle.id) if isinstance(handle, EventSetHandle) else None
        if found is None:
            raise NVMLError(fs.NVML_ERROR_INVALID_ARGUMENT)
        return found

    def _take_event(self, es: _EventSet) -> tuple[fs.EventData | None, float]:
        """The next event for the set (call with the lock held), else None and when one is due."""
        if es.queue:
            return es.queue.popleft(), math.inf
        now, scripted = self._clock(), self.fixture.events
        while es.cursor < len(scripted):
            event = scripted[es.cursor]
            due = self._born + event.after_s
            if due > now:
                return None, due
            es.cursor += 1
            if es.masks.get(event.gpu, 0) & _XID_MASK:
                return self._event(event.gpu, event.xid, event.gi_id, event.ci_id), due
        return None, math.inf

    def _pause(self, seconds: float) -> None:
        """Let `seconds` pass while waiting for events (call with the lock held)."""
        if self._sleep is None:
            self._cond.wait(seconds)
            return
        self._cond.release()
        try:
            self._sleep(seconds)
        finally:
            self._cond.acquire()

    def _event(self, gpu: int, xid: int, gi_id: int | None, ci_id: int | None) -> fs.EventData:
        na = fs.NOT_ATTRIBUTABLE
        return fs.EventData(
            device=DeviceHandle(gpu),
            eventType=_XID_MASK,
            eventData=xid,
            gpuInstanceId=na if gi_id is None else gi_id,
            computeInstanceId=na if ci_id is None else ci_id,
        )


def _not_modelled(name: str) -> Callable[..., Any]:
    def call(*_: Any, **__: Any) -> Any:
        raise NotImplementedError(f"the fake pynvml does not model {name}")

    call.__name__ = name
    return call
