"""What the victim search reads and returns (DESIGN §11), plain data shared by the runtime and the
simulator. The runtime and the simulator build these from their own state; `scheduler.preemption`
decides on them without I/O or a clock (times are passed in).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from agent.objkey import ObjectKey
from scheduler.placement import PodRequest, TopologyConstraint, Tree

__all__ = [
    "Budget",
    "Claimed",
    "DeviceFit",
    "Eviction",
    "GangDeviceFit",
    "NoChoice",
    "PreemptionSettings",
    "Preemptor",
    "Running",
    "TreeDemand",
    "TreeDeviceFit",
    "TreeDeviceTrial",
    "VictimChoice",
    "VictimReason",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class PreemptionSettings:
    """The scheduler config's `preemption:` block (DESIGN §11), durations in seconds."""

    enabled: bool = True  # priority preemption inside a leaf queue
    reclaim: bool = True  # reclaim of borrowed capacity across queues
    reclaim_to_fair_share: bool = False
    pdb_required: bool = False  # `pdb: required` (default `preferred`)
    non_preemptible_priority: int = 1_000_000_000
    nomination_timeout: float = 60.0
    starvation_seconds: float = 300.0
    starvation_hold_seconds: float = 600.0
    max_starvation_holds: int = 2
    # Candidate nodes (or node sets) fully evaluated among those tied on the cheap bound, as
    # kube-scheduler's minCandidateNodesAbsolute; keeps the search fast at thousands of nodes.
    candidate_limit: int = 100


@dataclass(frozen=True, slots=True, kw_only=True)
class Running:
    """A unit that may be a victim: one pod, or a gang's bound members on every node.

    `pods`: the pod keys as the snapshot holds them. `started`: when it started (the younger, the
    less work is lost). `spare`: members above the gang's `minMember`, up to this many of which
    may be taken alone (0 for a pod). Only pods of this scheduler that are not terminating are
    ever `Running` (the caller leaves the others out).
    """

    key: str
    pods: tuple[str, ...]
    leaf: str
    priority: int
    started: float
    spare: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Budget:
    """A PodDisruptionBudget as the search sees it: `namespace/name`, its
    `status.disruptionsAllowed`, and the keys of the pods its selector covers."""

    name: str
    allowed: int
    pods: frozenset[str]


class DeviceFit(Protocol):
    """What a pod U needs besides its request, decided apart from placement (its DRA claims, by
    the claim allocator): whether that fits on `node` once the pods `gone` (their keys) are gone.
    Deterministic for one search."""

    def fits(self, node: str, gone: frozenset[str]) -> bool: ...


class GangDeviceFit(Protocol):
    """What a gang U's pods need besides their requests, decided together apart from placement
    (their DRA claims, by the claim allocator): where each pod goes (pod key -> node) with that
    allocated on `nodes` once the pods `gone` (their keys) are gone; None: it does not fit there.
    Deterministic for one search."""

    def place(self, nodes: Sequence[str], gone: frozenset[str]) -> Mapping[str, str] | None: ...


class TreeDeviceTrial(Protocol):
    """One walk's devices of a tree's pods, decided apart from placement (their DRA claims):
    each PodGroup's pods placed in turn, the devices the earlier ones took counted."""

    def place(self, pods: Sequence[str], nodes: Sequence[str]) -> Mapping[str, str] | None:
        """Where each of `pods` (their keys) goes (pod key -> node), with their devices
        allocated together on `nodes` and held for the rest of the walk; None: they do not
        fit there (nothing held)."""
        ...

    def forget(self, pods: Sequence[str]) -> None:
        """The devices held for `pods` (their keys) given back."""
        ...


class TreeDeviceFit(Protocol):
    """What a tree's pods need besides their requests (their DRA claims): `begin(gone)` starts
    a walk's trial once the pods `gone` (their keys) are gone. Deterministic for one search."""

    def begin(self, gone: frozenset[str]) -> TreeDeviceTrial: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class TreeDemand:
    """The tree of pod groups U's pods belong to (CompositePodGroups), placed group by group as
    the scheduler places it (`place_subtree`), for a tree with a topology below its root: `tree`;
    `groups` each of U's pods' PodGroup (pod key -> the leaf's key); `held` the nodes the
    PodGroups' pods already placed hold (leaf key -> nodes); `devices`: what U's pods need
    besides their requests (their claims), placed group by group with them."""

    tree: Tree
    groups: Mapping[str, ObjectKey]
    held: Mapping[ObjectKey, tuple[str, ...]] = field(default_factory=dict)
    devices: TreeDeviceFit | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class Claimed:
    """What a unit's devices decided apart (its DRA claims) will take beyond its pods' requests:
    `amounts` charged to its queue (quota units: their whole GPUs and shares), `gpus` the whole
    GPUs each pod's hold on its node (by pod key)."""

    amounts: Mapping[str, int] = field(default_factory=dict)
    gpus: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Preemptor:
    """The unit U that cannot start: its pending pods (one for a pod), its leaf and priority.
    `never`: `preemptionPolicy: Never`. `topology`/`min_resources`: a gang's, as `place_gang`.
    `excluded`: nodes U may not use (a model max on its path is reached there, DESIGN §10):
    the search neither places U nor takes victims there. `prefer_clique`: a gang without a
    topology prefers one NVLink clique, as the scheduler places it (DESIGN §13). `devices`: what
    a single pod needs besides its request (its claims' devices): a node takes U only where
    that fits too, with the area's victims gone. `gang_devices`: the same for a gang's pods
    together: an area takes U only where they fit, each pod on the node they choose. `claimed`:
    what those devices will take beyond U's pods' requests (counted in U's demand, and in the
    room a candidate must have). `tree`: U's tree of pod groups, when a group below its root
    has a topology of its own (`topology` is then the root's): an area takes U only where the
    tree's walk places it whole."""

    key: str
    pods: tuple[PodRequest, ...]
    leaf: str
    priority: int
    never: bool = False
    topology: TopologyConstraint | None = None
    min_resources: Mapping[str, int] | None = None
    excluded: frozenset[str] = frozenset()
    prefer_clique: bool = False
    devices: DeviceFit | None = field(default=None, compare=False)
    gang_devices: GangDeviceFit | None = field(default=None, compare=False)
    claimed: Claimed = field(default_factory=lambda: Claimed())
    tree: TreeDemand | None = field(default=None, compare=False)


class VictimReason(StrEnum):
    """The `reason` label of `gputopo_scheduler_preemption_victims_total`."""

    PREEMPT = "preempt"  # a lower-priority unit of U's own leaf
    RECLAIM = "reclaim"  # a borrowing unit of another queue


@dataclass(frozen=True, slots=True, kw_only=True)
class Eviction:
    """One victim unit: the pods of it to delete (all of them, or spare members taken alone)."""

    unit: str
    pods: tuple[str, ...]
    reason: VictimReason


@dataclass(frozen=True, slots=True, kw_only=True)
class VictimChoice:
    """The chosen victim set and where U then starts (pod key -> node), on the snapshot without
    the victims. `violated`: the names of the budgets the set violates (empty unless
    `pdb: preferred` found no set violating none)."""

    evictions: tuple[Eviction, ...]
    nodes: Mapping[str, str]
    violated: tuple[str, ...] = ()
    gpus: int = 0  # whole-GPU equivalents freed (milli / 1000, rounded up)

    @property
    def pods(self) -> tuple[str, ...]:
        return tuple(pod for eviction in self.evictions for pod in eviction.pods)


@dataclass(frozen=True, slots=True, kw_only=True)
class NoChoice:
    """No victim set lets U start; `reason` says why in one line (it is shown on U), e.g.
    `preemption: evicting every lower-priority pod would still not fit the pod group` or
    `preemption: every victim set violates PodDisruptionBudget ns/name (pdb: required)`.
    `nothing_eligible`: no unit may be evicted for U at all (the runtime then shows nothing about
    preemption on U: the plain reason it waits says it all)."""

    reason: str
    budgets: tuple[str, ...] = field(default=())
    nothing_eligible: bool = False
