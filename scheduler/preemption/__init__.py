"""Preemption and reclaim (DESIGN §11), pure: who may evict whom, the victim search, and the
bookkeeping of nominations and starvation holds, shared by the scheduler runtime and the simulator.

Standard library, `scheduler.quota` and `scheduler.placement` only; no I/O, no clock (the caller
passes times in).
"""

from .model import (
    Budget,
    Eviction,
    NoChoice,
    PreemptionSettings,
    Preemptor,
    Running,
    VictimChoice,
    VictimReason,
)

__all__ = [
    "Budget",
    "Eviction",
    "NoChoice",
    "PreemptionSettings",
    "Preemptor",
    "Running",
    "VictimChoice",
    "VictimReason",
]
