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
   remaining victims, and what is decided apart lets U onto its node there: for a pod with
   devices decided apart (`Preemptor.devices`: its DRA claims, by the claim allocator), they
   fit; for a gang with such devices (`Preemptor.gang_devices`), they fit together on the
   area's nodes where every member fits the rest of its request, and each member then fits
   the rest on the node they chose; for a tree of pod groups with a topology below its root
   (`Preemptor.tree`), the tree's walk places it whole (`treefit`), the devices of its pods
   with them when they have any (`TreeDemand.devices`); for a pod whose inter-pod
   rules read beyond the area (`InterPodFit`), they let it, on the live snapshot with the
   victims gone. The reprieve first tests fit with arithmetic (free GPUs, cpu, memory, pods:
   necessary conditions, so a piece it keeps out would not fit either; and what is decided
   apart, a gang's devices on the whole area) and places U once at the end; should that fail
   (devices, NUMA, topology), the reprieve is redone placing U at every step.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from scheduler.placement import Assignment, Placer, PodRequest, place_gang

from .budgets import BudgetBook
from .eligibility import Piece
from .interpodfit import GangInterPodFit
from .ledger import Ledger
from .model import DeviceFit, GangDeviceFit, Preemptor, TreeDemand
from .room import Room
from .treefit import place_tree

__all__ = ["Estimate", "Miss", "Outcome", "Workbench", "reprieve_order", "victim_rank"]


Rank = tuple[int, int, int, float]


def victim_rank(pieces: Sequence[Piece], violations: int) -> Rank:
    """Smaller is better: PDB violations, highest victim priority, milli-GPU evicted, work lost
    (with the GPUs equal, Σ milli × (now − started) is smallest where Σ milli × started is
    largest: no clock needed)."""
    priority = max((p.unit.priority for p in pieces), default=-(2**63))
    milli = sum(p.milli for p in pieces)
    work = sum(p.milli * p.unit.started for p in pieces)
    return (violations, priority, milli, -work)


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimate:
    """An area's victims as counted (greedy, then the reprieve by arithmetic), before the
    placement code confirms them. `greedy`: the set before the reprieve, in reprieve order."""

    area: frozenset[str]
    greedy: tuple[Piece, ...]
    pieces: tuple[Piece, ...]
    violations: int
    violated: tuple[str, ...]

    def rank(self) -> tuple[int, int, int, float, float, str]:
        """`Outcome.rank` with the best score possible, taken as a bound on the area's outcome
        (confirming keeps these victims, or redoes the reprieve placing U, which gives back
        no more than the arithmetic did)."""
        return (*victim_rank(self.pieces, self.violations), -float("inf"), _name(self.area))


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
        """`victim_rank`, then U's placement score there (higher first), then the name."""
        return (*victim_rank(self.pieces, self.violations), -self.score, self.area)


def _name(area: Iterable[str]) -> str:
    return ",".join(sorted(area))


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
        self,
        placer: Placer,
        preemptor: Preemptor,
        ledger: Ledger,
        budgets: BudgetBook,
        inter_pod: DeviceFit | None = None,
        gang_inter_pod: GangInterPodFit | None = None,
    ) -> None:
        """`inter_pod`: U's inter-pod rules, when the clones cannot decide them (`placer` then
        ignores them): a node takes U only where they let it, with the victims gone;
        `gang_inter_pod`: the same for a gang's members, each placement judged whole."""
        self._placer = placer
        self._snapshot = placer.snapshot
        self._preemptor = preemptor
        self._apart = tuple(f for f in (preemptor.devices, inter_pod) if f is not None)
        self._gang_inter_pod = gang_inter_pod
        self._ledger = ledger
        self._budgets = budgets
        self._removed: dict[int, Piece] = {}  # taken out (by id)
        self._gone: dict[int, Piece] = {}  # taken out of the clones (`_sync`)
        self._saved: dict[str, tuple[PodRequest, Assignment]] = {}
        for node in self._snapshot.nodes.values():
            self._saved.update(node.pods)

    def estimate(
        self, area: frozenset[str], pool: Sequence[Piece], off: Sequence[Piece]
    ) -> Estimate | Miss:
        """Greedy, then the reprieve by arithmetic, on `area`; `pool`: eligible pieces with a
        pod there, `off`: eligible pieces elsewhere, in eviction order (only for a max U
        breaks). Nothing is changed on return."""
        try:
            problem = self._greedy(self._ordered(pool), off)
            if problem is not None:
                return Miss(quota=problem)
            if not self._apart_fit(area):
                return Miss()  # U's devices do not fit even with every victim gone
            greedy = tuple(self._ordered(sorted(self._removed.values(), key=reprieve_order)))
            room = Room(self._snapshot, area, self._saved)
            for piece in greedy:
                room.charge(piece, -1)
            self._reprieve(greedy, room, area)
            pieces = tuple(sorted(self._removed.values(), key=reprieve_order))
            count, names = self._violations(pieces)
            return Estimate(
                area=area, greedy=greedy, pieces=pieces, violations=count, violated=names
            )
        finally:
            self._reset()

    def confirm(self, estimate: Estimate) -> Outcome | Miss:
        """Place U on the clones without the estimate's victims; should the placement code
        refuse, the reprieve is redone from the greedy set placing U at every step."""
        area = estimate.area
        try:
            for piece in estimate.pieces:
                self._remove(piece)
            self._sync()
            placed = self._place(area)
            if placed is None:
                for piece in estimate.greedy:
                    self._remove(piece)
                self._sync()
                if self._place(area) is None:
                    return Miss()
                self._reprieve(estimate.greedy, None, area)
                self._sync()  # the reprieve's last piece may have been taken out again
                placed = self._place(area)
                if placed is None:  # unreachable: the last step kept U placeable
                    return Miss()
            return self._outcome(area, placed)
        finally:
            self._reset()

    def evaluate(
        self, area: frozenset[str], pool: Sequence[Piece], off: Sequence[Piece]
    ) -> Outcome | Miss:
        """`estimate`, then `confirm`."""
        found = self.estimate(area, pool, off)
        return found if isinstance(found, Miss) else self.confirm(found)

    def _reset(self) -> None:
        for piece in list(self._removed.values()):
            self._restore(piece)
        self._sync()

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

    def _reprieve(self, order: Sequence[Piece], room: Room | None, area: frozenset[str]) -> None:
        """Give pieces back in `order` while U stays admitted and fits: by `room`'s arithmetic
        (the clones are synced afterwards), or, without one, placing U on the clones."""
        cores = {p.unit.key: p for p in order if p.core}
        for piece in order:
            if id(piece) not in self._removed:
                continue
            core = cores.get(piece.unit.key)
            if not piece.core and core is not None and id(core) in self._removed:
                continue
            self._restore(piece)
            if room is not None:
                room.charge(piece, 1)
            if self._ledger.admission() is None and self._fits(room, area):
                continue
            self._remove(piece)
            if room is not None:
                room.charge(piece, -1)

    def _fits(self, room: Room | None, area: frozenset[str]) -> bool:
        if room is not None:
            return room.may_fit(self._preemptor.pods) and self._apart_fit(area)
        self._sync()
        return self._place(area) is not None

    def _apart_fit(self, area: frozenset[str]) -> bool:
        """What is decided apart from placement lets U onto a node of `area` without the pieces
        taken out: its devices (`Preemptor.devices`) fit there and its inter-pod rules let it
        (always, for a unit that needs neither); a tree's devices, with the tree's walk."""
        tree = self._preemptor.tree
        if tree is not None and tree.devices is not None:  # placed with the tree's walk
            self._sync()
            return self._place_tree(tree, area) is not None
        gang = self._preemptor.gang_devices
        if not self._apart and gang is None:
            return True
        gone = self._gone_keys()
        if gang is not None and gang.place(sorted(area), gone) is None:
            return False
        return not self._apart or any(
            all(f.fits(node, gone) for f in self._apart) for node in sorted(area)
        )

    def _gone_keys(self) -> frozenset[str]:
        return frozenset(place.key for piece in self._removed.values() for place in piece.pods)

    # -- pieces: taken out logically, then on the clones -----------------------------------------
    def _remove(self, piece: Piece) -> None:
        if id(piece) not in self._removed:
            self._removed[id(piece)] = piece
            self._ledger.remove(piece)

    def _restore(self, piece: Piece) -> None:
        if self._removed.pop(id(piece), None) is not None:
            self._ledger.restore(piece)

    def _sync(self) -> None:
        """Make the clones hold every pod but those of the pieces taken out."""
        for key, piece in list(self._gone.items()):
            if key not in self._removed:
                del self._gone[key]
                for place in piece.pods:
                    saved = self._saved.get(place.key)
                    if saved is not None:
                        self._snapshot.assume(saved[0], saved[1])
        for key, piece in self._removed.items():
            if key not in self._gone:
                self._gone[key] = piece
                for place in piece.pods:
                    if place.key in self._saved:
                        self._snapshot.forget(place.key)

    # -- does U fit ------------------------------------------------------------------------------
    def _place(self, area: frozenset[str]) -> tuple[dict[str, str], float] | None:
        """Where the placement code puts all of U on the clones of `area`, and U's score."""
        pods = self._preemptor.pods
        if self._preemptor.tree is not None:
            return self._place_tree(self._preemptor.tree, area)
        if len(pods) == 1:
            decision = self._placer.decide(pods[0], allowed=area, explain=False)
            if decision.assignment is None:
                return None
            node = decision.assignment.node
            if not self._apart_fit(frozenset((node,))):
                return None
            return {pods[0].key: node}, decision.score
        gang = self._preemptor.gang_devices
        if gang is not None:
            return self._place_with_devices(gang, area)
        placed = place_gang(
            pods,
            self._placer,
            topology=self._preemptor.topology,
            prefer_clique=self._preemptor.prefer_clique,
            reasons=False,
        )
        if not placed.ok:
            return None
        ordered = [(pod, placed.assignments[pod.key]) for pod in pods]
        if not self._rules_let(ordered):
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

    def _place_tree(
        self, demand: TreeDemand, area: frozenset[str]
    ) -> tuple[dict[str, str], float] | None:
        """A tree of pod groups, group by group as the scheduler places it (`place_tree`)."""
        placed = place_tree(self._preemptor, demand, self._placer, area, self._gone_keys())
        if placed is None or not self._rules_let(placed):
            return None
        scoring = self._placer.scoring
        score = sum(scoring.total(p, self._snapshot.node(a.node), a) for p, a in placed)
        return {pod.key: a.node for pod, a in placed}, score

    def _place_with_devices(
        self, gang: GangDeviceFit, area: frozenset[str]
    ) -> tuple[dict[str, str], float] | None:
        """A gang whose devices are decided apart, as the scheduler places it: on the nodes of
        `area` where every pod fits the rest of its request, the devices choose each pod's
        node, and each pod takes the rest of its request there, the earlier ones counted."""
        pods = self._preemptor.pods
        nodes = set(area)
        for pod in pods:
            nodes.intersection_update(self._placer.feasible(pod))
        where = gang.place(sorted(nodes), self._gone_keys()) if nodes else None
        if where is None:
            return None
        taken: list[tuple[PodRequest, Assignment]] = []
        try:
            for pod in pods:
                node = where.get(pod.key)
                assignment = None if node is None else self._placer.assignment_on(pod, node)
                if assignment is None:
                    return None
                self._snapshot.assume(pod, assignment)
                taken.append((pod, assignment))
            scoring = self._placer.scoring
            score = sum(scoring.total(p, self._snapshot.node(a.node), a) for p, a in taken)
        finally:
            for pod, _ in taken:
                self._snapshot.forget(pod.key)
        if not self._rules_let(taken):
            return None
        return {pod.key: a.node for pod, a in taken}, score

    def _rules_let(self, placed: Sequence[tuple[PodRequest, Assignment]]) -> bool:
        """A gang's inter-pod rules that read beyond the area let its members go as `placed`,
        with the pieces taken out gone (always, when the clones decide them)."""
        rules = self._gang_inter_pod
        return rules is None or rules.fits(placed, self._gone_keys())

    def _outcome(self, area: frozenset[str], placed: tuple[dict[str, str], float]) -> Outcome:
        pieces = tuple(sorted(self._removed.values(), key=reprieve_order))
        count, names = self._violations(pieces)
        return Outcome(
            area=_name(area),
            pieces=pieces,
            nodes=placed[0],
            score=placed[1],
            violations=count,
            violated=names,
        )

    def _violations(self, pieces: Sequence[Piece]) -> tuple[int, tuple[str, ...]]:
        if not self._budgets:
            return 0, ()
        return self._budgets.violations(p.key for piece in reversed(pieces) for p in piece.pods)
