"""Who may evict whom (DESIGN §11), decided once per search: the rules for one preemptor U.

- *preempt* (`enabled`): units of U's own leaf with a lower priority than U;
- *reclaim* (`reclaim`, U within its guarantee): units of any other leaf, whatever their
  priority, as long as every queue on the victim's path below the lowest common ancestor with
  U's leaf keeps at least its `min` of every resource that min names, counting every eviction
  chosen so far (the `floors`; `ledger` checks them). With GPU models in the tree, U reclaims
  only on the nodes of the models it is within guarantee on (`area`), and a victim's amounts
  carry the model keys its pods are charged, so a model min is a floor too;
- *reclaim to fair share* (`reclaimToFairShare` and `reclaim`, U not within its guarantee):
  the same, with each queue's fair share as the floor, when U's leaf stays within its own fair
  share with U's demand added. Fair shares are computed with U's demand as the only pending work.

Never a unit at or above `nonPreemptiblePriority`; `default` (or a leaf the tree does not know)
never reclaims, while units of `default` (no min: all of it borrows) may be reclaimed. Spare
gang members (above `minMember`) are pieces of their own: each may be taken alone, while taking
the rest of the gang (its core) takes them all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from agent.model import MILLI_PER_GPU
from scheduler.placement import Snapshot
from scheduler.quota import (
    DEFAULT_QUEUE,
    ROOT,
    Amounts,
    QuotaTree,
    Usage,
    add_into,
    fair_shares,
    request_amounts,
)

from .area import reclaim_area
from .index import PodPlace, RunningIndex
from .model import PreemptionSettings, Preemptor, Running, VictimReason

__all__ = ["Piece", "Rules", "charged_amounts", "demand_of", "pieces_of", "rules_for"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Rules:
    """What U may evict. `floors`: per queue, what reclaim must leave it (None: no reclaim).
    `area`: the nodes U reclaims on, when not every node (only its models, see `area`)."""

    preemptor: Preemptor
    demand: Amounts
    preempt: bool
    floors: Mapping[str, Amounts] | None
    floor_paths: Mapping[str, tuple[str, ...]]
    non_preemptible: int
    area: frozenset[str] | None = None

    def reason(self, unit: Running) -> VictimReason | None:
        """Why `unit` may be a victim of U, or None when it may not."""
        if unit.priority >= self.non_preemptible or unit.key == self.preemptor.key:
            return None
        if unit.leaf == self.preemptor.leaf:
            ok = self.preempt and unit.priority < self.preemptor.priority
            return VictimReason.PREEMPT if ok else None
        if self.floors is not None and unit.leaf in self.floor_paths:
            return VictimReason.RECLAIM
        return None

    def max_priority(self, leaf: str) -> int | None:
        """Units of `leaf` below this priority may be victims; None: none may."""
        if leaf == self.preemptor.leaf:
            return min(self.preemptor.priority, self.non_preemptible) if self.preempt else None
        if self.floors is not None and leaf in self.floor_paths:
            return self.non_preemptible
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Piece:
    """What one eviction takes: a whole unit (`core`: its pods but the spare pieces') or one
    spare member alone. `amounts`: the quota amounts of `pods`; `milli`: their milli-GPU."""

    unit: Running
    pods: tuple[PodPlace, ...]
    reason: VictimReason
    core: bool
    guaranteed: bool
    amounts: Amounts
    milli: int
    spares: tuple[Piece, ...] = ()  # a core's spare pieces (taken with it)


def demand_of(preemptor: Preemptor) -> dict[str, int]:
    """U's demand in quota units (its pending pods summed, and what its devices decided apart
    will be charged)."""
    demand: dict[str, int] = dict(preemptor.claimed.amounts)
    for pod in preemptor.pods:
        add_into(demand, request_amounts(pod))
    return demand


def rules_for(
    preemptor: Preemptor,
    tree: QuotaTree,
    usage: Usage,
    index: RunningIndex,
    settings: PreemptionSettings,
    capacity: Amounts,
    snapshot: Snapshot,
) -> Rules:
    """The rules for U; `capacity`: the root's (for fair shares; read only when asked);
    `snapshot`: the live one (which GPU model each node has)."""
    demand = demand_of(preemptor)
    floors: Mapping[str, Amounts] | None = None
    leaf = preemptor.leaf
    reclaims = settings.reclaim and leaf != DEFAULT_QUEUE and tree.is_leaf(leaf)
    area = reclaim_area(tree, usage, leaf, preemptor.pods, demand, snapshot) if reclaims else None
    if area is not None and area.within:
        floors = {q: spec.min for q, spec in tree.specs.items()}
    elif reclaims and settings.reclaim_to_fair_share:
        shares = fair_shares(tree, usage, {leaf: demand}, capacity)
        if _within(usage.used(leaf), demand, shares.get(leaf, {})):
            floors = shares
    paths = {} if floors is None else _floor_paths(tree, index, leaf)
    return Rules(
        preemptor=preemptor,
        demand=demand,
        preempt=settings.enabled,
        floors=floors,
        floor_paths=paths,
        non_preemptible=settings.non_preemptible_priority,
        area=area.nodes if area is not None and area.within else None,
    )


def _within(used: Amounts, demand: Amounts, share: Amounts) -> bool:
    """used + demand within `share` for every resource `share` names that U asks for."""
    asked = [r for r in share if demand.get(r, 0) > 0]
    return bool(asked) and all(used.get(r, 0) + demand[r] <= share[r] for r in asked)


def _floor_paths(tree: QuotaTree, index: RunningIndex, leaf: str) -> dict[str, tuple[str, ...]]:
    """Each other leaf with running units: its queues below the common ancestor with `leaf`."""
    ours = {*tree.paths[leaf], ROOT}
    out: dict[str, tuple[str, ...]] = {}
    for other in index.leaves():
        if other == leaf or other not in tree.paths:
            continue
        path = tree.paths[other]
        cut = next((i for i, q in enumerate(path) if q in ours), len(path))
        out[other] = path[:cut]
    return out


def pieces_of(
    unit: Running,
    places: tuple[PodPlace, ...],
    reason: VictimReason,
    guaranteed: bool,
    on: frozenset[str] | None,
    amounts_of: Callable[[PodPlace], Amounts],
) -> list[Piece]:
    """`unit` as pieces: up to `spare` members on the nodes `on` (any node: None) alone, then
    the core (every other pod). The core comes first (the reprieve order). `amounts_of`: what
    a pod is charged in quota (its model keys included)."""
    spare = [p for p in places if on is None or p.node in on][: unit.spare]
    spare_keys = {p.key for p in spare}
    core = tuple(p for p in places if p.key not in spare_keys)
    alone = [_piece(unit, (p,), reason, guaranteed, amounts_of) for p in spare]
    if not core:
        return alone
    return [_piece(unit, core, reason, guaranteed, amounts_of, spares=tuple(alone)), *alone]


def _piece(
    unit: Running,
    pods: tuple[PodPlace, ...],
    reason: VictimReason,
    guaranteed: bool,
    amounts_of: Callable[[PodPlace], Amounts],
    *,
    spares: tuple[Piece, ...] | None = None,
) -> Piece:
    amounts: dict[str, int] = {}
    for place in pods:
        add_into(amounts, amounts_of(place))
    milli = sum(p.milli for p in pods)
    return Piece(
        unit=unit,
        pods=pods,
        reason=reason,
        core=spares is not None,
        guaranteed=guaranteed,
        amounts=amounts,
        milli=milli,
        spares=spares or (),
    )


def charged_amounts(usage: Usage) -> Callable[[PodPlace], Amounts]:
    """What each pod is charged in `usage` (its request when not charged)."""

    def amounts_of(place: PodPlace) -> Amounts:
        charge = usage.charged(place.key)
        return request_amounts(place.request, place.shares) if charge is None else charge[1]

    return amounts_of


def gpus_of(milli: int) -> int:
    """Whole-GPU equivalents, rounded up."""
    return -(-milli // MILLI_PER_GPU)
