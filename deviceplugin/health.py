"""Device health from NVML Xid events, with recovery (DESIGN §4).

Xid classes:

- ignored: application errors (13, 31, 43, 45, 68, 109 by default; `DP_*` variables adjust);
- transient (74 NVLink, 92 high single-bit ECC rate, 94 contained ECC): Unhealthy, Healthy again
  after `quiet_period_s` with no new Xid on that unit;
- reset-required (48, 79, 95, 119, and every Xid we do not know): Unhealthy until the GPU answers
  NVML again, is not lost and has no row remap pending (probed every `recheck_interval_s`).

An Xid attributed to a MIG device (GPU instance / compute instance IDs) marks only that MIG device;
otherwise the whole GPU (all its MIG devices and replicas). Losing NVML (the event wait fails) marks
every GPU reset-required; the process keeps serving.

MPS (DESIGN §12): under `sharing.mps`, `MpsWatch` reads `gputopo-agent mps`'s status file every
health round; while it says MPS does not serve (`agent.mps.status.down_reason`), every device of
every shared resource is Unhealthy, with that reason (`mps_down`); the GPUs themselves stay Healthy.
The reason is published too, for the DRA driver's shares on the same MPS.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from agent import logkeys
from agent.errors import NvmlError
from agent.model import GpuUuid, NodeInventory
from agent.mps.status import down_reason
from agent.nvml.backend import GpuStatus, NvmlBackend, XidEvent
from agent.shares import Sharing
from deviceplugin.resources import Resource
from deviceplugin.settings import XidPolicy

logger = logging.getLogger(__name__)

TRANSIENT_XIDS = frozenset({74, 92, 94})
RESET_REQUIRED_XIDS = frozenset({48, 79, 95, 119})
NVML_LOST = -1
"""Pseudo-Xid recorded when the NVML event wait itself fails."""


def named_xids(policy: XidPolicy) -> frozenset[int]:
    """The Xids the health policy names: transient, reset-required, ignored, force-enabled
    (any other Xid is reset-required too, but is not known before it happens)."""
    return TRANSIENT_XIDS | RESET_REQUIRED_XIDS | policy.ignored | policy.enabled


class XidClass(StrEnum):
    IGNORED = "ignored"
    TRANSIENT = "transient"
    RESET_REQUIRED = "reset-required"


def classify(xid: int, policy: XidPolicy) -> XidClass:
    if policy.ignores(xid):
        return XidClass.IGNORED
    if xid in TRANSIENT_XIDS:
        return XidClass.TRANSIENT
    return XidClass.RESET_REQUIRED


@dataclass(slots=True)
class _Fault:
    gpu_uuid: GpuUuid
    kind: XidClass
    xid: int
    last_at: float


class HealthTracker:
    """Which GPU / MIG UUIDs are Unhealthy now. Not thread-safe: one monitor thread drives it."""

    def __init__(
        self,
        inventory: NodeInventory,
        policy: XidPolicy,
        *,
        quiet_period_s: float = 60.0,
        recheck_interval_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._inventory = inventory
        self._policy = policy
        self._quiet = quiet_period_s
        self._recheck = recheck_interval_s
        self._clock = clock
        self._faults: dict[str, _Fault] = {}
        self._last_probe = float("-inf")
        self._xids: dict[tuple[str, int], int] = {}
        self._count_from_zero(inventory)

    def set_inventory(self, inventory: NodeInventory) -> None:
        """Use a re-scanned inventory (new MIG layout) to attribute later events."""
        self._inventory = inventory
        self._count_from_zero(inventory)

    def unhealthy(self) -> frozenset[str]:
        return frozenset(self._faults)

    def xid_counts(self) -> dict[tuple[str, int], int]:
        """Every Xid event recorded (ignored ones too), by (GPU UUID, Xid), with a 0 for each
        GPU and each Xid the policy names (`named_xids`) not seen yet; a copy."""
        return dict(self._xids)

    def _count_from_zero(self, inventory: NodeInventory) -> None:
        """A counter series that first appears at 1 has no increase (Prometheus' `increase()`
        needs the 0 before it): every GPU's count of each named Xid exists from the start."""
        for gpu in inventory.gpus:
            for xid in named_xids(self._policy):
                self._xids.setdefault((str(gpu.uuid), xid), 0)

    def record(self, event: XidEvent) -> bool:
        """Apply one Xid; True when the set of Unhealthy units changed."""
        seen = (str(event.gpu_uuid), event.xid)
        self._xids[seen] = self._xids.get(seen, 0) + 1
        kind = classify(event.xid, self._policy)
        if kind is XidClass.IGNORED:
            logger.debug("Xid %d on %s ignored", event.xid, event.gpu_uuid)
            return False
        unit = self._unit_of(event)
        if unit is None:
            return False
        return self._fault(unit, event.gpu_uuid, kind, event.xid)

    def nvml_lost(self) -> bool:
        """NVML stopped answering: every GPU is reset-required until it answers again."""
        changed = False
        for gpu in self._inventory.gpus:
            changed |= self._fault(gpu.uuid, gpu.uuid, XidClass.RESET_REQUIRED, NVML_LOST)
        return changed

    def _fault(self, unit: str, gpu_uuid: GpuUuid, kind: XidClass, xid: int) -> bool:
        now = self._clock()
        old = self._faults.get(unit)
        if old is not None:
            old.last_at = now
            if kind is XidClass.RESET_REQUIRED and old.kind is XidClass.TRANSIENT:
                old.kind, old.xid = kind, xid
            return False
        self._faults[unit] = _Fault(gpu_uuid, kind, xid, now)
        logger.warning(
            "%s is Unhealthy: Xid %d (%s)",
            unit,
            xid,
            kind.value,
            extra={logkeys.GPU_UUID: gpu_uuid},
        )
        return True

    def _unit_of(self, event: XidEvent) -> str | None:
        """The MIG UUID when the event names a GPU/compute instance we know, else the GPU UUID."""
        try:
            gpu = self._inventory.gpu(event.gpu_uuid)
        except KeyError:
            logger.warning("Xid %d for unknown GPU %s ignored", event.xid, event.gpu_uuid)
            return None
        if event.gi_id is None:
            return gpu.uuid
        for mig in gpu.mig_devices:
            if mig.gi_id == event.gi_id and event.ci_id in (None, mig.ci_id):
                return mig.uuid
        return gpu.uuid

    def reevaluate(self, status: Callable[[GpuUuid], GpuStatus]) -> bool:
        """Clear transient faults after the quiet period; probe reset-required ones when due."""
        now = self._clock()
        probe = now - self._last_probe >= self._recheck
        if probe:
            self._last_probe = now
        cache: dict[GpuUuid, bool] = {}
        cleared = [
            unit
            for unit, fault in self._faults.items()
            if (fault.kind is XidClass.TRANSIENT and now - fault.last_at >= self._quiet)
            or (
                fault.kind is XidClass.RESET_REQUIRED
                and probe
                and now - fault.last_at >= self._recheck
                and self._back(fault, status, cache)
            )
        ]
        for unit in cleared:
            logger.info(
                "%s is Healthy again", unit, extra={logkeys.GPU_UUID: self._faults[unit].gpu_uuid}
            )
            del self._faults[unit]
        return bool(cleared)

    @staticmethod
    def _back(
        fault: _Fault, status: Callable[[GpuUuid], GpuStatus], cache: dict[GpuUuid, bool]
    ) -> bool:
        """True when the fault's GPU answers NVML, is not lost and has no remap pending."""
        if fault.gpu_uuid not in cache:
            try:
                st = status(fault.gpu_uuid)
                cache[fault.gpu_uuid] = st.responds and not st.lost and not st.remap_pending
            except NvmlError:
                cache[fault.gpu_uuid] = False
        return cache[fault.gpu_uuid]


def mps_down(
    resources: Mapping[str, Resource], sharing: Sharing, reason: str | None
) -> dict[str, str]:
    """The resources to advertise all Unhealthy (name -> reason): every shared one while MPS
    does not serve (`reason`) under `sharing.mps`; none under time-slicing or while MPS serves."""
    if reason is None or sharing is not Sharing.MPS:
        return {}
    return {name: reason for name, resource in resources.items() if resource.shared}


class MpsWatch:
    """Reads the MPS status file and publishes `mps_down` with the reason (None while MPS
    serves); logs each change once."""

    def __init__(
        self,
        status_file: Path,
        resources: Callable[[], Mapping[str, Resource]],
        publish: Callable[[Mapping[str, str], str | None], object],
        *,
        wall_clock: Callable[[], float] = time.time,  # the file's time is another process's
    ) -> None:
        self._path = status_file
        self._resources = resources
        self._publish = publish
        self._wall_clock = wall_clock
        self._reason: str | None = None

    @property
    def serving(self) -> bool:
        """What the last `poll` read: MPS serves."""
        return self._reason is None

    def poll(self) -> None:
        reason = down_reason(self._path, self._wall_clock())
        down = mps_down(self._resources(), Sharing.MPS, reason)
        if reason is not None and reason != self._reason:
            shared = ", ".join(sorted(down)) or "every share"
            logger.warning("MPS does not serve, %s Unhealthy: %s", shared, reason)
        elif reason is None and self._reason is not None:
            logger.info("MPS serves again: its shared devices are Healthy")
        self._reason = reason
        self._publish(down, reason)


class HealthMonitor:
    """The thread that reads `backend.wait_xid()`, applies it, and re-scans the MIG layout."""

    def __init__(
        self,
        backend: NvmlBackend,
        tracker: HealthTracker,
        publish: Callable[[frozenset[str]], object],
        *,
        rescan: Callable[[], object] | None = None,
        rescan_interval_s: float = 10.0,
        wait_timeout_s: float = 0.5,
        nvml_retry_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        checks_enabled: bool = True,
        mps: MpsWatch | None = None,
    ) -> None:
        self._backend = backend
        self._mps = mps
        self._tracker = tracker
        self._publish = publish
        self._rescan = rescan
        self._rescan_interval = rescan_interval_s
        self._wait_timeout = wait_timeout_s
        self._nvml_retry = nvml_retry_s
        self._clock = clock
        self._checks = checks_enabled
        self._next_rescan = clock() + rescan_interval_s
        self._nvml_down = False
        self._thread: threading.Thread | None = None

    def step(self, stop: threading.Event | None = None) -> bool:
        """One round: wait for an Xid (up to the wait timeout), re-evaluate, read the MPS status,
        re-scan when due. Returns True when an Xid event was read.
        """
        seen = False
        if self._checks:
            seen = self._read_event(stop)
            self._tracker.reevaluate(self._backend.status)
            self._publish(self._tracker.unhealthy())
        if self._mps is not None:
            self._mps.poll()
        if self._rescan is not None and self._clock() >= self._next_rescan:
            self._next_rescan = self._clock() + self._rescan_interval
            self._rescan()
        return seen

    def _read_event(self, stop: threading.Event | None) -> bool:
        try:
            event = self._backend.wait_xid(self._wait_timeout)
        except NvmlError as exc:
            if not self._nvml_down:
                logger.error("NVML event wait failed, marking every GPU Unhealthy: %s", exc)
                self._nvml_down = True
            self._tracker.nvml_lost()
            if stop is not None:
                stop.wait(self._nvml_retry)
            return False
        if self._nvml_down:
            logger.info("NVML events are answered again")
            self._nvml_down = False
        if event is None:
            return False
        self._tracker.record(event)
        return True

    def start(self, stop: threading.Event) -> None:
        self._thread = threading.Thread(
            target=self._run, args=(stop,), name="deviceplugin-health", daemon=True
        )
        self._thread.start()

    def _run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                if not self.step(stop):
                    # a backend that returns at once must not make this loop spin
                    stop.wait(max(0.0, self._wait_timeout - (time.monotonic() - started)))
            except Exception:
                logger.exception("health check round failed")
                stop.wait(self._nvml_retry)

    def join(self, timeout_s: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)
