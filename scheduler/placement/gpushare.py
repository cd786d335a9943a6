"""One share placed on one GPU, and a shared GPU's free milli-GPU (DESIGN §12): the part of the
share model `NodeState` charges (`shares` places them)."""

from __future__ import annotations

from dataclasses import dataclass

from agent.model import MILLI_PER_GPU

__all__ = ["MAX_COMPUTE_PERCENT", "GpuShare", "shared_free_milli"]

MAX_COMPUTE_PERCENT = 100


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuShare:
    """One share placed on GPU `gpu`: `milli` for the fragmentation score; on a shared GPU also
    `memory` (bytes), `compute` (percent) and replica `slots` charged (all 0 on an unshared
    GPU, which counts milli only). `container`: the share container ("" for a simulator pod)."""

    gpu: int
    milli: int
    memory: int = 0
    compute: int = 0
    slots: int = 0
    container: str = ""


def shared_free_milli(
    slots: int, memory: int, slots_free: int, memory_free: int, compute: int
) -> int:
    """A shared GPU's free milli-GPU: what is left of its most used dimension (0 without a free
    replica). `memory` 0 (unknown) counts the slots instead."""
    if slots_free <= 0:
        return 0
    by_memory = (
        MILLI_PER_GPU * memory_free // memory if memory > 0 else MILLI_PER_GPU * slots_free // slots
    )
    return max(0, min(MILLI_PER_GPU, by_memory, compute * MILLI_PER_GPU // MAX_COMPUTE_PERCENT))


@dataclass(frozen=True, slots=True, kw_only=True)
class MeasuredUse:
    """A fresh reading of one GPU (issue 47, `load`): bytes in use, SM percent, watts, seconds
    since measured."""

    memory_used: int
    sm_percent: int
    power_w: int
    age_s: float
