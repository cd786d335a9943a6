"""Preemption and reclaim (DESIGN §11), pure: who may evict whom, the victim search, and the
bookkeeping of nominations and starvation holds, shared by the scheduler runtime and the simulator.

Standard library, `scheduler.quota` and `scheduler.placement` only; no I/O, no clock (the caller
passes times in).

Modules, bottom up: `model` (the plain data in and out), `index` (running units, kept by the
caller), `budgets` (PodDisruptionBudgets counted), `eligibility` (who may evict whom), `ledger`
(quota with victims taken out), `candidates` (the cheap bound), `treefit` (a tree of pod groups
placed on an area), `reprieve` (greedy then reprieve on one node or node set), `search`
(`find_victims`), `nominations` (capacity held for a unit after a preemption or while it
starves), `starvation` (where a starving unit's hold goes).
"""

from .index import RunningIndex
from .model import (
    Budget,
    Claimed,
    DeviceFit,
    Eviction,
    GangDeviceFit,
    NoChoice,
    PreemptionSettings,
    Preemptor,
    Running,
    TreeDemand,
    TreeDeviceFit,
    TreeDeviceTrial,
    VictimChoice,
    VictimReason,
)
from .nominations import LastHold, Nominations
from .search import find_victims, find_victims_where_it_may_start
from .starvation import starvation_nodes, take_hold

__all__ = [
    "Budget",
    "Claimed",
    "DeviceFit",
    "Eviction",
    "GangDeviceFit",
    "LastHold",
    "NoChoice",
    "Nominations",
    "PreemptionSettings",
    "Preemptor",
    "Running",
    "RunningIndex",
    "TreeDemand",
    "TreeDeviceFit",
    "TreeDeviceTrial",
    "VictimChoice",
    "VictimReason",
    "find_victims",
    "find_victims_where_it_may_start",
    "starvation_nodes",
    "take_hold",
]
