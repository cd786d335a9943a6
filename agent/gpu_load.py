"""What each GPU really uses (issue 47): NVML's used memory, SM utilisation and power draw,
averaged over a moving window and published in the NRT GPU zone with the time measured.

    GpuLoad          one GPU's averaged reading (MiB, percent, watts, wall-clock time measured)
    LoadWindow       samples per GPU over the last `window_s` seconds -> GpuLoad per GPU index
    load_attributes  GpuLoad -> the GPU zone attributes (`agent.nrt.wire` names)
    parse_load       those attributes -> GpuLoad, None when absent or malformed (never guessed)

Pure: the caller passes the samples and the times (monotonic for the window, wall clock for
`measured_at`, which the scheduler compares with its own clock to drop stale readings).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

__all__ = [
    "LOAD_ATTRS",
    "GpuLoad",
    "LoadSample",
    "LoadWindow",
    "format_time",
    "load_attributes",
    "parse_load",
]

# GPU zone attributes (DESIGN §5 names the others in agent.nrt.wire):
GPU_ATTR_MEMORY_USED = "memoryUsedMiB"
GPU_ATTR_SM = "smPercent"
GPU_ATTR_POWER = "powerW"
GPU_ATTR_MEASURED_AT = "measuredAt"  # RFC 3339 UTC: when the window's latest sample was taken
LOAD_ATTRS = frozenset({GPU_ATTR_MEMORY_USED, GPU_ATTR_SM, GPU_ATTR_POWER, GPU_ATTR_MEASURED_AT})


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuLoad:
    """One GPU's use, averaged over the agent's window; `measured_at` is Unix seconds (UTC)."""

    memory_used_mib: int
    sm_percent: int
    power_w: int
    measured_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadSample:
    """One NVML reading of a GPU; None where NVML does not support the value."""

    memory_used_mib: int | None
    sm_percent: int | None
    power_w: float | None


class LoadWindow:
    """Samples per GPU index over the last `window_s` (monotonic) seconds."""

    def __init__(self, window_s: float) -> None:
        if window_s <= 0:
            raise ValueError(f"load window must be above 0 s, got {window_s}")
        self.window_s = window_s
        self._samples: dict[int, deque[tuple[float, float, LoadSample]]] = {}

    def add(self, gpu: int, sample: LoadSample, *, now: float, wall: float) -> None:
        """Record `sample` of GPU `gpu` taken at monotonic `now` (wall clock `wall`)."""
        self._samples.setdefault(gpu, deque()).append((now, wall, sample))
        self.expire(now)

    def expire(self, now: float) -> None:
        """Drop the samples older than the window (a GPU NVML stopped answering for empties)."""
        for gpu, queue in list(self._samples.items()):
            while queue and queue[0][0] < now - self.window_s:
                queue.popleft()
            if not queue:
                del self._samples[gpu]

    def forget(self, keep: frozenset[int]) -> None:
        """Drop the GPUs not in `keep` (gone from the inventory)."""
        for gpu in [g for g in self._samples if g not in keep]:
            del self._samples[gpu]

    def averages(self) -> dict[int, GpuLoad]:
        """Per GPU, the window's mean of each value NVML gave (a GPU with no memory reading has
        no load: its free memory cannot be known); stamped with the latest sample's wall time."""
        out: dict[int, GpuLoad] = {}
        for gpu, queue in self._samples.items():
            memory = [s.memory_used_mib for _, _, s in queue if s.memory_used_mib is not None]
            if not memory:
                continue
            sm = [s.sm_percent for _, _, s in queue if s.sm_percent is not None]
            power = [s.power_w for _, _, s in queue if s.power_w is not None]
            out[gpu] = GpuLoad(
                memory_used_mib=round(sum(memory) / len(memory)),
                sm_percent=round(sum(sm) / len(sm)) if sm else 0,
                power_w=round(sum(power) / len(power)) if power else 0,
                measured_at=queue[-1][1],
            )
        return out


def format_time(unix_s: float) -> str:
    """RFC 3339, UTC, whole seconds (`2026-12-01T19:45:03Z`)."""
    return datetime.fromtimestamp(int(unix_s), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def load_attributes(load: GpuLoad) -> list[tuple[str, str]]:
    return [
        (GPU_ATTR_MEMORY_USED, str(load.memory_used_mib)),
        (GPU_ATTR_SM, str(load.sm_percent)),
        (GPU_ATTR_POWER, str(load.power_w)),
        (GPU_ATTR_MEASURED_AT, format_time(load.measured_at)),
    ]


def parse_load(attrs: Mapping[str, str]) -> GpuLoad | None:
    """The GPU zone's reading; None when any of its attributes is missing or malformed."""
    raw = [attrs.get(k) for k in (GPU_ATTR_MEMORY_USED, GPU_ATTR_SM, GPU_ATTR_POWER)]
    stamp = attrs.get(GPU_ATTR_MEASURED_AT)
    if stamp is None or any(v is None or not v.isdigit() for v in raw):
        return None
    try:
        when = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None
    memory, sm, power = (int(v) for v in raw if v is not None)
    return GpuLoad(
        memory_used_mib=memory, sm_percent=sm, power_w=power, measured_at=when.timestamp()
    )
