"""Greedy, then reprieve, on one area (a node, or a node set for a gang): the stock scheduler's
way of choosing victims, on clones of the area's nodes, never on the live snapshot.

1. Greedy: remove every eligible piece with a pod in the area (lowest priority, borrowing,
   youngest first, skipping a reclaim piece that would take a queue below its floor); if U's
   admission still fails, remove eligible pieces elsewhere that lower the queue over its max.
2. Reprieve: give pieces back in order — those whose pods would violate a PodDisruptionBudget
   first, then highest priority, within-guarantee before borrowing, oldest — keeping each one
   back only while U's admission passes and U still fits. A gang's spare member may be given
   back only once its core is; giving the core back leaves the spares evicted.
3. The answer stands only when the placement code places all of U on the area without the
   remaining victims. The reprieve first tests fit with arithmetic (free GPUs, cpu, memory,
   pods: necessary conditions, so a piece it keeps out would not fit either) and places U once
   at the end; should that fail (devices, NUMA, topology), the reprieve is redone placing U at
   every step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from scheduler.placement import Assignment, NodeState, Placer, PodRequest, place_gang
from scheduler.placement.request import CPU, MEMORY, PODS

from .budgets import BudgetBook
from .eligibility import Piece
from .ledger import Ledger
from .model import Preemptor

__all__ = ["Miss", "Outcome", "Workbench", "reprieve_order"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """A victim set that lets U start in `area`: the pieces taken and where U goes."""

    area: str
    pieces: tuple[Piece, ...]
    nodes: Mapping[str, str]
    score: float
    violations: int
    violated: tuple[str, ...]

    def rank(self) -> tuple[int, int, int, float, float, str]:
        """Smaller is better: PDB violations, highest victim priority, milli-GPU evicted, work
        lost (with the GPUs equal, Σ milli × (now − started) is smallest where Σ milli ×
        started is largest: no clock needed), then U's placement score there, then the name."""
        priority = max((p.unit.priority for p in self.pieces), default=-(2**63))
        milli = sum(p.milli for p in self.pieces)
        work = sum(p.milli * p.unit.started for p in self.pieces)
        return (self.violations, priority, milli, -work, -self.score, self.area)


@dataclass(frozen=True, slots=True, kw_only=True)
class Miss:
    """No victim set in the area: `quota` says which max still breaks (else U did not fit)."""

    quota: str | None = None


def reprieve_order(piece: Piece) -> tuple[int, bool, float, str, bool, str]:
    """Highest priority, within-guarantee, oldest first; a unit's core before its spares."""
    first = piece.pods[0].key if piece.pods else ""
    return (
        -piece.unit.priority,
        not piece.guaranteed,
        piece.unit.started,
        piece.unit.key,
        not piece.core,
        first,
    )


class Workbench:
    """Clones of candidate nodes (a small snapshot and its `Placer`) where areas are tried."""

    def __init__(
        self, placer: Placer, preemptor: Preemptor, ledger: Ledger, budgets: BudgetBook
    ) -> None:
        self._placer = placer
        self._snapshot = placer.snapshot
        self._preemptor = preemptor
        self._ledger = ledger
        self._budgets = budgets
        self._removed: dict[int, Piece] = {}
        self._saved: dict[str, tuple[PodRequest, Assignment]] = {}
        for node in self._snapshot.nodes.values():
            self._saved.update(node.pods)

    def evaluate(
        self, area: frozenset[str], pool: Sequence[Piece], off: Sequence[Piece]
    ) -> Outcome | Miss:
        """Greedy then reprieve on `area`; `pool`: eligible pieces with a pod there, `off`:
        eligible pieces elsewhere, in eviction order (only for a max U breaks). The clones are
        as they were on return."""
        try:
            order = self._ordered(pool)
            problem = self._greedy(order, off)
            if problem is not None:
                return Miss(quota=problem)
            taken = sorted(self._removed.values(), key=reprieve_order)
            order = self._ordered(taken)
            self._reprieve(order, lambda: self._may_fit(area))
            placed = self._place(area)
            if placed is None:
                for piece in order:
                    self._remove(piece)
                if self._place(area) is None:
                    return Miss()
                self._reprieve(order, lambda: self._place(area) is not None)
                placed = self._place(area)
                if placed is None:  # unreachable: the last step kept U placeable
                    return Miss()
            return self._outcome(area, placed)
        finally:
            for piece in list(self._removed.values()):
                self._restore(piece)

    # -- the two steps ---------------------------------------------------------------------------
    def _ordered(self, pieces: Iterable[Piece]) -> list[Piece]:
        """Reprieve order: units with a piece violating a budget first, then `reprieve_order`."""
        order = sorted(pieces, key=reprieve_order)
        if not self._budgets:
            return order
        flags = self._budgets.violating([p.key for p in piece.pods] for piece in order)
        bad = {piece.unit.key for piece, flag in zip(order, flags, strict=True) if flag}
        return [p for p in order if p.unit.key in bad] + [p for p in order if p.unit.key not in bad]

    def _greedy(self, order: Sequence[Piece], off: Sequence[Piece]) -> str | None:
        for piece in reversed(order):
            self._take(piece)
        problem = self._ledger.admission()
        pooled = {piece.unit.key for piece in order}
        for piece in off:
            if problem is None:
                break
            if piece.unit.key not in pooled and self._ledger.helps(piece):
                self._take(piece)
                problem = self._ledger.admission()
        return problem

    def _take(self, piece: Piece) -> None:
        """Remove `piece` (with its spares when it is a core), floors permitting."""
        group = [p for p in (piece, *piece.spares) if id(p) not in self._removed]
        if group and self._ledger.keeps_floors(group):
            for member in group:
                self._remove(member)

    def _reprieve(self, order: Sequence[Piece], fits: Callable[[], bool]) -> None:
        cores = {p.unit.key: p for p in order if p.core}
        for piece in order:
            if id(piece) not in self._removed:
                continue
            core = cores.get(piece.unit.key)
            if not piece.core and core is not None and id(core) in self._removed:
                continue
            self._restore(piece)
            if self._ledger.admission() is not None or not fits():
                self._remove(piece)

    # -- pieces on the clones --------------------------------------------------------------------
    def _remove(self, piece: Piece) -> None:
        if id(piece) in self._removed:
            return
        self._removed[id(piece)] = piece
        self._ledger.remove(piece)
        for place in piece.pods:
            if place.key in self._saved:
                self._snapshot.forget(place.key)

    def _restore(self, piece: Piece) -> None:
        if self._removed.pop(id(piece), None) is None:
            return
        self._ledger.restore(piece)
        for place in piece.pods:
            saved = self._saved.get(place.key)
            if saved is not None:
                self._snapshot.assume(saved[0], saved[1])

    # -- does U fit ------------------------------------------------------------------------------
    def _may_fit(self, area: frozenset[str]) -> bool:
        """Necessary conditions for U on `area`: enough idle GPUs, GPU share, cpu, memory and
        pod slots in all, and a node with idle GPUs for the largest pod."""
        pods = self._preemptor.pods
        nodes = [self._snapshot.node(n) for n in area]
        whole = max((p.gpus for p in pods), default=0)
        if whole and not any(n.idle_mask.bit_count() >= whole for n in nodes):
            return False
        room = [sum(_room(n)[i] for n in nodes) for i in range(5)]
        need = [sum(_need(p)[i] for p in pods) for i in range(5)]
        return all(r >= w for r, w in zip(room, need, strict=True) if w > 0)

    def _place(self, area: frozenset[str]) -> tuple[dict[str, str], float] | None:
        """Where the placement code puts all of U on the clones of `area`, and U's score."""
        pods = self._preemptor.pods
        if len(pods) == 1:
            decision = self._placer.decide(pods[0], allowed=area, explain=False)
            if decision.assignment is None:
                return None
            return {pods[0].key: decision.assignment.node}, decision.score
        placed = place_gang(pods, self._placer, topology=self._preemptor.topology)
        if not placed.ok:
            return None
        scoring = self._placer.scoring
        score = sum(
            scoring.total(
                pod,
                self._snapshot.node(placed.assignments[pod.key].node),
                placed.assignments[pod.key],
            )
            for pod in pods
        )
        return {key: a.node for key, a in placed.assignments.items()}, score

    def _outcome(self, area: frozenset[str], placed: tuple[dict[str, str], float]) -> Outcome:
        pieces = tuple(sorted(self._removed.values(), key=reprieve_order))
        pods = [place.key for piece in reversed(pieces) for place in piece.pods]
        count, names = self._budgets.violations(pods) if self._budgets else (0, ())
        return Outcome(
            area=",".join(sorted(area)),
            pieces=pieces,
            nodes=placed[0],
            score=placed[1],
            violations=count,
            violated=names,
        )


def _room(node: NodeState) -> tuple[int, int, int, int, int]:
    """Idle GPUs, free milli-GPU, cpu, memory, pod slots."""
    milli = node.gpu_capacity_milli() - node.used_milli
    return (node.idle_mask.bit_count(), milli, node.free(CPU), node.free(MEMORY), node.free(PODS))


def _need(pod: PodRequest) -> tuple[int, int, int, int, int]:
    return (pod.gpus, pod.gpu_milli_total, pod.cpu_milli, pod.memory, 1)
