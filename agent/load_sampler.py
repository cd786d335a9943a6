"""Sampling what the GPUs really use (issue 47) for the NRT publisher.

`LoadSampler()` is called on every publisher poll; it reads NVML (`NvmlBackend.telemetry`: used
memory, SM utilisation, power) for every GPU at most every `sample_s` seconds, keeps the last
`window_s` seconds in a `LoadWindow` and returns the averages by GPU index. A GPU NVML cannot
read (lost, NotSupported, an NVML error) gets no sample; once its window empties it has no
reading, so the scheduler falls back to requests for it (nothing is guessed).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from agent import logkeys
from agent.errors import AgentError
from agent.gpu_load import GpuLoad, LoadSample, LoadWindow
from agent.model import GpuUuid, NodeInventory
from agent.nvml.backend import NvmlBackend

log = logging.getLogger(__name__)

DEFAULT_WINDOW_S = 60.0
SAMPLES_PER_WINDOW = 12


class LoadSampler:
    """`() -> {GPU index: GpuLoad}`: the moving-window averages, sampled when due."""

    def __init__(
        self,
        backend: NvmlBackend,
        inventory: Callable[[], NodeInventory],
        *,
        window_s: float = DEFAULT_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._backend = backend
        self._inventory = inventory
        self._window = LoadWindow(window_s)
        self.sample_s = window_s / SAMPLES_PER_WINDOW
        self._clock, self._wall = clock, wall
        self._next = float("-inf")
        self._last: dict[int, GpuLoad] = {}

    def __call__(self) -> dict[int, GpuLoad]:
        now = self._clock()
        if now < self._next:
            return self._last
        self._next = now + self.sample_s
        inventory = self._inventory()
        wall = self._wall()
        for gpu in inventory.gpus:
            sample = self._read(gpu.index, gpu.uuid)
            if sample is not None:
                self._window.add(gpu.index, sample, now=now, wall=wall)
        self._window.forget(frozenset(g.index for g in inventory.gpus))
        self._window.expire(now)  # also for the GPUs that gave no sample this time
        self._last = self._window.averages()
        return self._last

    def _read(self, index: int, uuid: GpuUuid) -> LoadSample | None:
        try:
            reading = self._backend.telemetry(uuid)
        except AgentError as exc:
            log.debug("no load sample of GPU %s: %s", index, exc, extra={logkeys.GPU_UUID: uuid})
            return None
        return LoadSample(
            memory_used_mib=reading.memory_used_mib,
            sm_percent=reading.utilization_percent,
            power_w=reading.power_w,
        )
