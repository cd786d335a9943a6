"""The victim search (DESIGN §11): `find_victims` for a unit U that cannot start.

Who may be evicted is `eligibility`'s; where to look, `candidates`'; how one node or node set
is decided (greedy, then reprieve, on clones), `reprieve`'s. Victim priorities are thresholds,
lowest first: every candidate area at threshold p is evaluated with the eligible victims of
priority ≤ p there, and the search stops at the first threshold with a set that violates no
PodDisruptionBudget (a higher threshold cannot do better on the first two criteria). Among the
sets found: fewest PDB violations, lowest highest victim priority, fewest GPUs evicted, least
work lost, U's best placement score, then the area's name (`Outcome.rank`).

The live snapshot is left as it was: areas are evaluated on clones of their nodes, in a small
`Snapshot` with a `Placer` of the live placer's scoring (a gang's rules beyond the area change
the live snapshot while a placement is judged, and put it back: `GangInterPodFit`).

A search may be kept to some nodes: those of the GPU models U reclaims on (`Rules.area`) less
the nodes U may not use (`Preemptor.excluded`). U is placed, and victims are taken, only there;
when reclaim kept to a model's nodes finds nothing, U may still preempt lower-priority units of
its own leaf on any node it may use (a second search, without reclaim).

Inter-pod rules that read beyond a node (`interpodfit`) are judged on the live snapshot with an
area's victims gone: a single pod's on every node tried, a gang's on each placement the clones
make (its members judged in order, each with the ones before it placed).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace
from functools import cached_property

from agent.model import MILLI_PER_GPU
from scheduler.placement import Placer, Snapshot
from scheduler.placement.interpod import decided_per_node, refused_whatever_leaves
from scheduler.quota import Amounts, QuotaTree, Usage

from .budgets import BudgetBook
from .candidates import Bound, Tally, gang_sets, node_candidates
from .columns import BoolArray
from .eligibility import (
    Piece,
    Rules,
    charged_amounts,
    gpus_of,
    pieces_of,
    rules_for,
)
from .index import RunningIndex
from .interpodfit import GANG_RULE_PODS, GangInterPodFit, InterPodFit
from .ledger import Ledger, guaranteed_leaves
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
from .reprieve import Estimate, Miss, Outcome, Workbench, reprieve_order

__all__ = ["find_victims", "find_victims_where_it_may_start"]


def find_victims(
    preemptor: Preemptor,
    placer: Placer,
    index: RunningIndex,
    tree: QuotaTree,
    usage: Usage,
    budgets: Sequence[Budget],
    settings: PreemptionSettings,
    capacity: Amounts,
) -> VictimChoice | NoChoice:
    """The victims whose eviction lets U start (admission and placement of all of U), and where
    U then goes; or why there are none. `capacity`: the root's (DESIGN §10: what gputopo may
    schedule, each shared GPU counted once; `scheduler.quota.capacity`), which fair shares
    divide. Nothing shared is left changed (the snapshot, the usage; a gang's rules beyond the
    area change the snapshot while a placement is judged and put it back); the index's node
    columns (a cache) catch up with the snapshot. `index` must read the placer's snapshot. Not
    thread-safe: the caller serialises, as for the `Placer`."""
    if index.columns.snapshot is not placer.snapshot:
        raise ValueError("find_victims: the index and the placer read different snapshots")
    if preemptor.never:
        return NoChoice(reason="preemption: the pod's preemptionPolicy is Never")
    if not preemptor.pods:
        return NoChoice(reason="preemption: nothing to place")
    live = placer.snapshot
    gang_rules = None  # a gang's rules that read beyond its nodes
    if len(preemptor.pods) > 1 and not all(decided_per_node(p, live) for p in preemptor.pods):
        gang_rules = GangInterPodFit(preemptor.pods, live)
        if len(gang_rules.read) > GANG_RULE_PODS:
            return NoChoice(reason=_too_many_read(len(gang_rules.read)))
    rules = rules_for(preemptor, tree, usage, index, settings, capacity, live)
    book = BudgetBook(budgets)
    found = _Search(placer, index, tree, usage, rules, book, settings, gang_rules).run()
    if isinstance(found, VictimChoice) or rules.area is None or not rules.preempt:
        return found
    own = replace(rules, floors=None, floor_paths={}, area=None)
    again = _Search(placer, index, tree, usage, own, book, settings, gang_rules).run()
    return again if isinstance(again, VictimChoice) or found.nothing_eligible else found


class _Search:
    def __init__(
        self,
        placer: Placer,
        index: RunningIndex,
        tree: QuotaTree,
        usage: Usage,
        rules: Rules,
        budgets: BudgetBook,
        settings: PreemptionSettings,
        gang_rules: GangInterPodFit | None = None,
    ) -> None:
        self.placer, self.index, self.tree, self.usage = placer, index, tree, usage
        self.rules, self.budgets, self.settings = rules, budgets, settings
        self.live = placer.snapshot
        self.pods = rules.preemptor.pods
        self.fits_now: list[str] = []  # set once there is anything to search
        self.best: Outcome | None = None
        self.misses: list[Miss] = []
        self.violated: set[str] = set()
        self.off_cache: dict[int, list[Piece]] = {}
        self.amounts_of = charged_amounts(usage)
        self.excluded = rules.preemptor.excluded
        claimed = rules.preemptor.claimed.gpus  # the room U's devices need, by pod
        self.apart = {key: MILLI_PER_GPU * gpus for key, gpus in claimed.items()}
        self.kept = rules.area is not None or bool(self.excluded)  # only some nodes are used
        self.inter_pod = (  # U's inter-pod rules, when the clones cannot decide them
            InterPodFit(self.pods[0], self.live, placer.read_memo(self.pods[0]))
            if len(self.pods) == 1 and not decided_per_node(self.pods[0], self.live)
            else None
        )
        self.gang_inter_pod = gang_rules  # a gang's, judged on the live snapshot placement-wise

    @cached_property
    def guaranteed(self) -> frozenset[str]:
        """The leaves whose units are within their guarantee; first read with a victim to weigh,
        so a search that finds none eligible never works it out (nothing shared changes during
        a search: it is what it would have been at the start)."""
        return guaranteed_leaves(self.tree, self.usage, self.index.leaves())

    @cached_property
    def quota(self) -> str | None:
        """Why U's demand breaks a max now (None: it does not); read lazily as `guaranteed`."""
        return Ledger(self.tree, self.usage, self.rules).admission()

    def allowed(self, node: str) -> bool:
        """May the search place U on `node`, and take victims there?"""
        area = self.rules.area
        return (area is None or node in area) and node not in self.excluded

    def run(self) -> VictimChoice | NoChoice:
        thresholds = self._thresholds()
        if not thresholds:
            return NoChoice(
                reason=f"preemption: no eligible victims ({self._why_none()})",
                nothing_eligible=True,
            )
        self.fits_now = [n for n in self._fits_now() if self.allowed(n)]
        tally = Tally(self.index)
        if self.kept:
            tally.keep(self.rules.area, self.excluded)
        if self.inter_pod is not None:
            leaving = self._eligible(self.inter_pod.read)
            memo = self.inter_pod.memo
            tally.keep(None, refused_whatever_leaves(self.pods[0], self.live, leaving, memo))
        elif self.gang_inter_pod is not None:  # members are alike: the first one's refusals
            leaving = self._eligible(self.gang_inter_pod.read)
            tally.keep(None, refused_whatever_leaves(self.pods[0], self.live, leaving))
        for priority, leaves in thresholds:
            touched = tally.add(priority, leaves)
            if touched.any():
                self._evaluate(tally, touched, priority)
            if self.best is not None and self.best.violations == 0:
                break
        if self.best is None:
            return self._no_choice()
        return _choice(self.best)

    # -- thresholds and areas --------------------------------------------------------------------
    def _thresholds(self) -> list[tuple[int, list[str]]]:
        """Victim priorities ascending, each with the leaves that have eligible units at it."""
        by_priority: dict[int, list[str]] = {}
        for leaf in self.index.leaves():
            below = self.rules.max_priority(leaf)
            if below is None:
                continue
            for priority in self.index.priorities(leaf):
                if priority < below:
                    by_priority.setdefault(priority, []).append(leaf)
        return sorted(by_priority.items())

    def _fits_now(self) -> list[str]:
        """Nodes where U's pods fit already (a max alone keeps U out, a gang partly fits, or
        the caller asked for a unit that needs no eviction at all)."""
        if len(self.pods) == 1:
            found = self.placer.best_assignment(self.pods[0])
            return [] if found is None else [found.node]
        names: set[str] = set()
        for pod in {(p.gpus, p.gpu_milli, p.cpu_milli, p.memory): p for p in self.pods}.values():
            names.update(self.placer.feasible(pod)[: len(self.pods)])
        return sorted(names)

    def _evaluate(self, tally: Tally, touched: BoolArray, priority: int) -> None:
        """Evaluate the candidate areas of this threshold (nodes with new victims only)."""
        limit = self.settings.candidate_limit
        if len(self.pods) == 1:
            bound = Bound.of(self.pods, self.apart)
            nodes = node_candidates(tally, touched, bound, limit)
            nodes += [n for n in self.fits_now if n not in nodes]
            bench = self._bench(nodes)
            estimates = []
            for name in nodes:
                found = bench.estimate(frozenset((name,)), *self._pools([name], priority))
                if isinstance(found, Miss):
                    self.misses.append(found)
                else:
                    estimates.append(found)
            self._confirm(bench, estimates)
            return
        topology = self.rules.preemptor.topology
        label = topology.label if topology is not None and topology.required else None
        across = None
        rules = self.gang_inter_pod
        if rules is not None and label is None:  # the members' own rules shape the sets
            label, across = rules.together, None if rules.together else rules.apart
        sets = gang_sets(tally, self.fits_now, self.pods, label, limit, self.apart, across)
        for names, cut in sets:
            while True:
                area = self._whole_domains(names[:cut])
                bench = self._bench(area)
                done = bench.evaluate(frozenset(area), *self._pools(area, priority))
                if isinstance(done, Outcome) or done.quota or cut >= len(names):
                    self._keep(done)
                    break
                cut *= 2

    def _whole_domains(self, area: list[str]) -> list[str]:
        """`area`, and for a tree with a topology below its root every node the search may use
        in each domain of those topologies that `area` touches: a group placed inside one
        domain then meets all of its room (the nodes that fit now are cut to U's pod count,
        and could leave a domain half in the area)."""
        demand = self.rules.preemptor.tree
        if demand is None or not demand.tree.inner_topology():
            return area
        seen, whole = set(area), list(area)
        for label in sorted(demand.tree.labels()):
            domains = self.live.domains(label)
            values = {self.live.node(n).labels.get(label) for n in whole}
            for value in sorted(v for v in values if v is not None and v in domains):
                for name in sorted(domains[value].names - seen):
                    if self.allowed(name):
                        seen.add(name)
                        whole.append(name)
        return whole

    def _confirm(self, bench: Workbench, estimates: list[Estimate]) -> None:
        """Confirm estimates best first until a confirmed outcome ranks first: only areas
        whose counted rank ties with or beats it are ever placed (an estimate ranks as well as
        any outcome of its area can)."""
        heap: list[tuple[tuple[int, int, int, float, float, str], int, Estimate | Outcome]]
        heap = [(e.rank(), i, e) for i, e in enumerate(estimates)]
        heapq.heapify(heap)
        tie = len(heap)
        while heap:
            _rank, _i, item = heapq.heappop(heap)
            if isinstance(item, Outcome):
                if self._acceptable(item):
                    self._keep(item)
                    return
                continue
            found = bench.confirm(item)
            if isinstance(found, Miss):
                self.misses.append(found)
            else:
                heapq.heappush(heap, (found.rank(), tie, found))
                tie += 1

    def _bench(self, nodes: Iterable[str]) -> Workbench:
        """Clones of `nodes` (and of the nodes a tree's placed pods hold: its groups' domains
        are read from them) to try areas on."""
        names = list(nodes)
        tree = self.rules.preemptor.tree
        if tree is not None:
            held = {n for placed in tree.held.values() for n in placed if n in self.live}
            names += sorted(held.difference(names))
        small = Snapshot(self.live.node(n).clone() for n in names)
        small.namespace_labels = self.live.namespace_labels
        ledger = Ledger(self.tree, self.usage, self.rules)
        inter_pod, gang = self.inter_pod, self.gang_inter_pod
        # a single pod's rules beyond the area are judged on the live snapshot alone; a gang's
        # there too, but the clones read them first, so that members that repel or attract
        # each other are placed as the rules ask among the area's nodes
        return Workbench(
            Placer(small, self.placer.scoring, memo=False, inter_pod=inter_pod is None),
            self.rules.preemptor,
            ledger,
            self.budgets,
            inter_pod,
            gang,
        )

    def _keep(self, found: Outcome | Miss) -> None:
        if isinstance(found, Miss):
            self.misses.append(found)
        elif self._acceptable(found) and (self.best is None or found.rank() < self.best.rank()):
            self.best = found

    def _acceptable(self, found: Outcome) -> bool:
        """False (noting why) for a set that violates a budget under `pdb: required`, or that
        leaves less free in the cluster than the gang's `minResources`."""
        if self.settings.pdb_required and found.violations:
            self.violated.update(found.violated)
            return False
        wanted = self.rules.preemptor.min_resources
        if wanted:
            free = self.live.free_totals()
            for piece in found.pieces:
                for place in piece.pods:
                    for resource, qty in place.request.vector:
                        free[resource] = free.get(resource, 0) + qty
            if any(free.get(r, 0) < qty for r, qty in wanted.items()):
                self.misses.append(Miss())
                return False
        return True

    # -- victims ---------------------------------------------------------------------------------
    def _pools(self, area: Sequence[str], priority: int) -> tuple[list[Piece], list[Piece]]:
        """The eligible pieces of priority ≤ `priority` with a pod in `area`, and (only while a
        max keeps U out) those elsewhere that may lower it, in eviction order."""
        on = frozenset(area)
        seen: set[str] = set()
        pool: list[Piece] = []
        for name in area:
            for unit in self.index.on_node(name):
                if unit.key not in seen:
                    seen.add(unit.key)
                    pool += self._pieces(unit, priority, on)
        return pool, self._off(priority)

    def _off(self, priority: int) -> list[Piece]:
        """While a max keeps U out: the eligible pieces of priority ≤ `priority` in leaves under
        a queue of U's path that has a max, in eviction order (kept for the threshold)."""
        if self.quota is None:
            return []
        cached = self.off_cache.get(priority)
        if cached is not None:
            return cached
        capped = {q for q in self.tree.paths[self.rules.preemptor.leaf] if self.tree.specs[q].max}
        off: list[Piece] = []
        for leaf in self.index.leaves():
            if capped.intersection(self.tree.paths.get(leaf, ())):
                for unit in self.index.in_leaf(leaf):
                    off += self._pieces(unit, priority, None)
        off.sort(key=reprieve_order, reverse=True)
        self.off_cache[priority] = off
        return off

    def _eligible(self, keys: Iterable[str]) -> frozenset[str]:
        """Those of the pods `keys` whose units the search may evict."""
        index, eligible = self.index, set()
        for key in keys:
            unit = index.get(index.unit_of_pod(key) or "")
            if unit is not None and self.rules.reason(unit) is not None:
                eligible.add(key)
        return frozenset(eligible)

    def _pieces(self, unit: Running, priority: int, on: frozenset[str] | None) -> list[Piece]:
        reason = self.rules.reason(unit)
        if reason is None or unit.priority > priority:
            return []
        places = self.index.places(unit.key)
        if any(self.live.node_of(p.key) != p.node for p in places):
            return []  # the index is behind the snapshot: not a victim this time
        guaranteed = unit.leaf in self.guaranteed
        pieces = pieces_of(unit, places, reason, guaranteed, on, self.amounts_of)
        if self.kept:
            pieces = [p for p in pieces if all(self.allowed(pl.node) for pl in p.pods)]
        return pieces

    # -- answers ---------------------------------------------------------------------------------
    def _why_none(self) -> str:
        rules = self.rules
        leaf = rules.preemptor.leaf
        parts = []
        if rules.preempt:
            parts.append(f"no lower-priority pod runs in queue {leaf}")
        else:
            parts.append("priority preemption is off")
        if rules.floors is not None:
            parts.append("no other queue has reclaimable pods")
        elif self.settings.reclaim:
            parts.append(f"queue {leaf} is not within its guarantee, so it reclaims nothing")
        return "; ".join(parts)

    def _no_choice(self) -> NoChoice:
        if self.violated:
            names = tuple(sorted(self.violated))
            return NoChoice(
                reason="preemption: every victim set violates PodDisruptionBudget "
                f"{', '.join(names)} (pdb: required)",
                budgets=names,
            )
        quota = [m.quota for m in self.misses if m.quota]
        if quota and len(quota) == len(self.misses):
            return NoChoice(
                reason=f"preemption: evicting every eligible victim would still "
                f"exceed a queue max: {quota[0]}"
            )
        what = "the pod" if len(self.pods) == 1 else "the pod group"
        return NoChoice(
            reason=f"preemption: evicting every eligible victim would still not fit {what}"
        )


def _too_many_read(count: int) -> str:
    return (
        f"preemption: not for a pod group whose inter-pod rules beyond kubernetes.io/hostname "
        f"read {count} running pods (at most {GANG_RULE_PODS})"
    )


def _choice(best: Outcome) -> VictimChoice:
    by_unit: dict[str, list[Piece]] = {}
    for piece in best.pieces:
        by_unit.setdefault(piece.unit.key, []).append(piece)
    evictions = []
    for key in sorted(by_unit):
        pieces = by_unit[key]
        unit = pieces[0].unit
        whole = any(p.core for p in pieces)
        pods = unit.pods if whole else tuple(sorted(pl.key for p in pieces for pl in p.pods))
        evictions.append(Eviction(unit=key, pods=pods, reason=pieces[0].reason))
    return VictimChoice(
        evictions=tuple(evictions),
        nodes=dict(best.nodes),
        violated=best.violated,
        gpus=gpus_of(sum(p.milli for p in best.pieces)),
    )


def find_victims_where_it_may_start(
    preemptor: Preemptor,
    held: AbstractSet[str],
    search: Callable[[Preemptor], VictimChoice | NoChoice],
) -> VictimChoice | NoChoice:
    """`search` (a `find_victims` on the live state) for U, never placing U on a node a
    starvation hold keeps it from (`held`: `Nominations.held_from`) unless the choice reclaims:
    a hold gives way to a reclaim on its nodes (`Nominations.nominate`), not to a preemption of
    its priority, so U, kept off the held node, would not start and its victims would go in
    vain. Such a choice is searched again off the held nodes; any other is the first search's
    (one search unless U's choice meets a hold)."""
    choice = search(preemptor)
    if not held or not isinstance(choice, VictimChoice) or not choice.pods:
        return choice
    reclaims = any(e.reason is VictimReason.RECLAIM for e in choice.evictions)
    if reclaims or not held & set(choice.nodes.values()):
        return choice
    return search(replace(preemptor, excluded=preemptor.excluded | held))
