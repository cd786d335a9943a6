"""The `Placer`'s memo: `pick`'s decisions with each node's verdict kept until that node changes.

`pick(pod, snapshot, scoring)` filters and scores every candidate node for every pod. Most of that
work repeats: a node's verdict for a pod depends only on the pod's request and the node's state,
and one decision changes one node. `VerdictMemo` keeps, per *pod class* (the request without its
key and pod group, which no filter or score reads), each node's verdict from the real
`filter_node` and `Scoring.total`, and recomputes it only for nodes changed since that class was
last decided. The snapshot says which (`Snapshot.changed_since`: every add, remove, assume,
forget and `refresh` is counted), so callers change the snapshot as they always do; a GPU
share pod's class looks only at the changes of nodes with shared GPUs, a whole-GPU pod's only
at those of nodes that can give whole GPUs (`NodeSlots.log_for`). The choice among the cached
verdicts follows `pick`'s ranking exactly: (used-node tier, weighted score, lowest name).
Classes of GPU pods that differ only in the memory they ask share one table of verdicts
(`_share_table`): each class's pre-check checks its own memory, exactly as the filter does,
and nothing else reads the memory of a GPU pod that is not Guaranteed (`score_reads`). Classes
of pods without GPUs that differ only in memory share their verdicts on nodes with GPUs the
same way when no score reads memory there (`_sibling_key`; at 5,000 nodes such verdicts went
from some 14,000 to 6,400 in 10,000 decisions). A GPU pod's scores are kept by what the scores
read (`ShareMemo`), across classes and states, and so are the verdicts that fit of pods without
share containers or MIG devices, by what their filters and scores read of a node
(`ReadVerdicts`: 20,000 single pods at 40,000 nodes filtered and scored some 13,100 nodes
instead of 36,600; each class still keeps its own per-state table).

Exactness needs `scoring.candidate_limit == 0` (every feasible node ranked); a non-zero limit
makes `pick` depend on the snapshot's candidate order, so the `Placer` uses `pick` itself then.
A vectorised pre-check (free cpu, memory, pod slots, idle GPUs, largest free share) skips nodes
that certainly fail; it is a necessary condition of `filter_node`, never a second copy of it.
Verdicts are also shared between nodes in the same state: the same static shape (taints,
allocatable, GPUs and links, topology policy), the same values of the labels the class reads (its
node selector's and affinity's keys and the GPU product label: all that filters and scores read
of labels) and the same load (free milli-GPU per GPU, requested resources, MIG and NUMA-zone
counters). A node object is never changed in place except through its snapshot; a node whose
labels or capacity change is replaced (`add_node`).

The best node of a class comes from a heap kept with its verdicts (`Verdicts.best`), so a decision
after a few changes touches only the changed nodes and stays in plain Python: numpy calls
(`unique`, sorts, even small reductions) can release the GIL, and in the scheduler another
thread then keeps it for up to a switch interval. Many changes at once (a new class, a refit, a
class unused for long) are evaluated one verdict per live state, found through the index of the
slots in each state (`StateMembers`, kept by `NodeSlots` in name order, a bisection per node
change), and spread to the slots by one gather per array; the heap's best nodes then come, at
the next decision among all nodes (one within a topology domain ranks the domain's slots alone),
from the states ranked by score level, whole states while they fit and then the first names of
the states of the last level (`StateMembers.best_slots`): the cost grows with the states, not
the nodes (at 40,000 nodes a rebuild went from a selection over every slot to some 1,500
states).
Classes kept are bounded by cells (classes × slots), so a 40,000-node cluster still keeps a
typical mix's classes (about a hundred) instead of evicting one per decision.

Score functions that learn (`Learner`, like `FragmentationScore`) see every pod first, as in
`pick` (`Scoring.observe`), and a new `version` makes every score stale. No filter reads a score,
so a state's rejection is kept and a state that fits keeps its assignment and is only scored
again (`_rescore_classes`); a class that reads no labels, at its next use, brings its changed
slots up to date and then scores again only the live states it finds feasible, spread by one
gather of the score array (`_rescore_states`: O(states) Python, one pass over the slots instead
of four; at 40,000 nodes some 20 states of 1,500 per class).

`decide` and `best` also remember the classes that fit on no node but held ones, and `decide`
why, until the snapshot's generation moves (`refusals`): waiting pods are offered again and again
(the simulator at every pass: at 48 GPU nodes under a queue 94 % of its calls asked for a class
refused since the last change; the scheduler each time room may have been freed), and counting
every node's reason costs O(nodes) a pod.

Not thread-safe: the caller serialises access (the scheduler holds its cache lock).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace
from functools import partial
from typing import cast

import numpy as np

from .class_verdicts import HEAP_TOP, ClassKey, Verdict, Verdicts, label_keys, pod_class
from .filters import device_reason, filter_node, node_reasons
from .node import Assignment, NodeState, TopologyPolicy
from .node_slots import BoolArray, FloatArray, IntArray, NodeSlots
from .pick import Decision, Rejection, count_reasons
from .read_verdicts import ReadVerdicts
from .refusals import Refusals, refusal_of
from .request import NODE_NAME_KEY, PodRequest
from .scores import Learner, Scoring
from .share_memo import ShareMemo
from .snapshot import Snapshot

__all__ = ["VerdictMemo"]

_CLASS_CELLS = 1 << 23  # classes kept × node slots; the least recently used class goes first
_FEW = 32  # changed slots up to which a class is updated slot by slot (else vectorised)
_TABLES = 1024  # verdict tables shared between classes, kept before they start afresh
_SIBLINGS = 1 << 18  # verdicts shared by classes that differ only in memory, before afresh
_SIBLING_BITS = 32  # a sibling key: state id << this | the class's number


class VerdictMemo:
    """`pick` on one snapshot with one scoring; the snapshot may change in any way between calls."""

    def __init__(self, snapshot: Snapshot, scoring: Scoring, *, heap_top: int = HEAP_TOP) -> None:
        """`heap_top`: how many best nodes per pod class a heap rebuild keeps (`Verdicts`)."""
        if scoring.candidate_limit != 0:
            raise ValueError("VerdictMemo needs scoring.candidate_limit == 0 (rank every node)")
        self._snapshot = snapshot
        self._scoring = scoring
        self._heap_top = max(1, heap_top)
        self._nodes = NodeSlots(snapshot)
        self._classes: dict[ClassKey, Verdicts] = {}
        self._learners: tuple[Learner, ...] = scoring.learners()
        self._version = self._learned_version()
        self._shares = ShareMemo(scoring)
        self._shipped = scoring.shipped  # what its scores read of a pod is `score_reads`
        self._memory_blind = scoring.memory_blind_on_gpu_nodes
        self._siblings: dict[int, Verdict] = {}  # (state, class without memory) -> verdict
        self._reads = ReadVerdicts(memory_blind=self._memory_blind) if self._shipped else None
        self._sibling_numbers: dict[ClassKey, int] = {}
        self._sibling_pod: PodRequest | None = None  # the last pod keyed, and its number
        self._sibling_number = 0
        self._tables: dict[ClassKey, dict[int, Verdict]] = {}  # shared by classes (`_share_table`)
        self._allowed: tuple[AbstractSet[str], int, IntArray] | None = None
        self._refusals = Refusals()
        self._feasible: tuple[Verdicts, int, BoolArray, tuple[str, ...]] | None = None

    # -- decisions -------------------------------------------------------------------------------
    def decide(
        self,
        pod: PodRequest,
        *,
        allowed: AbstractSet[str] | None = None,
        explain: bool = True,
        excluded: AbstractSet[str] | None = None,
    ) -> Decision:
        """`pick(pod, snapshot, scoring, allowed=allowed, explain=explain, excluded=excluded)`
        for a supported pod: the same node, devices and score, and the same reasons when nothing
        fits (none when something does). An unsupported pod is the caller's (the `Placer` hands
        it to `pick`). `excluded` costs O(its nodes) plus one vector operation. A refusal among
        all nodes is its class's until the snapshot changes (`refusals.Refusals`): a pod of a
        class refused since gets that decision, its reasons not counted again."""
        refusal = None
        if allowed is None:
            refusal = refusal_of(pod, excluded)
            known = self._refusals.decision(refusal, self._snapshot.generation, explain)
            if known is not None:
                if self._learners:
                    self._observe(pod)  # what `_refresh` does first, as for a pod decided
                return replace(known, pod=pod.key)
        total = len(self._snapshot)
        verdicts = self._refresh(pod)
        best = self._best(pod, verdicts, self._where(allowed, excluded))
        if best is not None:
            return Decision(pod=pod.key, assignment=best[0], score=best[1], nodes_total=total)
        if explain:
            nodes: Iterable[NodeState] = self._snapshot.nodes.values()
        else:
            nodes = self._snapshot.candidates(pod, allowed)
        reasons = count_reasons(nodes, allowed, self._rejections(pod, verdicts), excluded)
        decision = Decision(pod=pod.key, assignment=None, reasons=reasons, nodes_total=total)
        if refusal is not None:
            self._refusals.add(refusal, (explain, decision))
        return decision

    def best_by_group(
        self,
        pod: PodRequest,
        groups: Sequence[AbstractSet[str] | None],
        *,
        allowed: AbstractSet[str] | None,
        excluded: AbstractSet[str] | None,
        held: AbstractSet[str] | None,
    ) -> list[tuple[Assignment, float] | None]:
        """The best node of each of `groups` with its score, as `decide` ranks them, the pod
        seen once: None stands for every node in `allowed` but `excluded`, a set for its nodes
        in `allowed` but `held`. Each group's nodes carry one bonus (`Placer`'s preferences),
        which the caller adds."""
        verdicts = self._refresh(pod)
        out: list[tuple[Assignment, float] | None] = []
        for group in groups:
            if group is None:
                out.append(self._best(pod, verdicts, self._where(allowed, excluded)))
                continue
            members = group if allowed is None else group & allowed
            if held:
                members = members - held
            out.append(
                self._best(pod, verdicts, self._nodes.slots_of(members)) if members else None
            )
        return out

    def reasons(
        self,
        pod: PodRequest,
        *,
        allowed: AbstractSet[str] | None,
        explain: bool,
        excluded: AbstractSet[str] | None,
        refused: Mapping[str, str],
    ) -> dict[str, int]:
        """The reasons `pick(..., refused=refused)` counts when nothing fits, from the kept
        verdicts (every node with `explain`, else the candidates)."""
        verdicts = self._refresh(pod)
        nodes: Iterable[NodeState] = (
            self._snapshot.nodes.values() if explain else self._snapshot.candidates(pod, allowed)
        )
        return count_reasons(nodes, allowed, self._rejections(pod, verdicts), excluded, refused)

    def best(
        self,
        pod: PodRequest,
        *,
        allowed: AbstractSet[str] | None = None,
        excluded: AbstractSet[str] | None = None,
    ) -> Assignment | None:
        """`decide(pod, allowed=allowed, excluded=excluded)`'s assignment, without counting
        reasons when nothing fits. A class refused on every node (but `excluded`) stays refused
        until the snapshot changes (`refusals.Refusals`): under a queue most offers are such."""
        refusal = None
        if allowed is None:
            refusal = refusal_of(pod, excluded)
            if self._refusals.refused(refusal, self._snapshot.generation):
                if self._learners:
                    self._observe(pod)  # what `_refresh` does first, as for a pod decided
                return None
        verdicts = self._refresh(pod)
        best = self._best(pod, verdicts, self._where(allowed, excluded))
        if best is None:
            if refusal is not None:
                self._refusals.add(refusal)
            return None
        return best[0]

    def trial_begins(self) -> None:
        """Changes to the snapshot begin that will all be undone (`Placer.trial`)."""
        self._refusals.keep(self._snapshot.generation)

    def trial_undone(self, before: int) -> None:
        """The snapshot is again as it was at `before`, when the trial began."""
        self._refusals.restored(before, self._snapshot.generation)

    def _where(
        self, allowed: AbstractSet[str] | None, excluded: AbstractSet[str] | None
    ) -> IntArray | None:
        """The slots of `allowed` (None: every slot) less those of `excluded`; after
        `_refresh`, which brings the slots up to date."""
        where = None if allowed is None else self._allowed_slots(allowed)
        if excluded:
            held = self._nodes.mask(excluded)
            where = np.flatnonzero(~held) if where is None else where[~held[where]]
        return where

    def feasible(self, pod: PodRequest) -> tuple[str, ...]:
        """Names of the nodes where `pod` fits (as `filter_node` says), sorted: the very tuple
        given last time while it is the same class, no node took or left a slot and the same
        slots fit (compared in C; making it again reads a name per node, scattered in memory:
        0.85 ms at 20,000 nodes), so that a caller may know an unchanged answer by identity."""
        verdicts = self._refresh(pod)
        last, epoch = self._feasible, self._nodes.epoch
        if (
            last is not None
            and last[0] is verdicts
            and last[1] == epoch
            and np.array_equal(last[2], verdicts.feasible)
        ):
            return last[3]
        names = self._nodes.names  # a feasible slot always holds a node: no None here
        found = cast(
            "tuple[str, ...]", tuple(names[i] for i in self._nodes.by_name(verdicts.feasible))
        )
        self._feasible = (verdicts, epoch, verdicts.feasible.copy(), found)
        return found

    def assignment_on(self, pod: PodRequest, name: str) -> Assignment | None:
        """The devices `pod` gets on `name` (None if it does not fit), from the cache."""
        verdicts = self._refresh(pod)
        return self._assignment(pod, verdicts, self._nodes.slot(name))

    def _best(
        self, pod: PodRequest, verdicts: Verdicts, where: IntArray | None
    ) -> tuple[Assignment, float] | None:
        """The best slot's assignment and score, among `where` (None: every slot)."""
        if where is None:
            choose = None if verdicts.labels else self._top_slots
            best = verdicts.best(self._nodes.names, self._nodes.ranks, choose)
        else:
            best = self._best_of(verdicts, where)
        if best is None:
            return None
        chosen = self._assignment(pod, verdicts, best)
        if chosen is None:  # unreachable: a feasible node always has an assignment
            raise RuntimeError(f"node {self._nodes.name(best)} is feasible without an assignment")
        return chosen, float(verdicts.score[best])

    def _best_of(self, verdicts: Verdicts, slots: IntArray) -> int | None:
        """`pick`'s ranking over `slots` (vectorised, O(their count): a topology domain's
        nodes cost as many, whatever the cluster's size)."""
        candidates = slots[verdicts.feasible[slots]]
        if not len(candidates):
            return None
        if verdicts.tiered:
            used = candidates[verdicts.tier[candidates]]
            if len(used):
                candidates = used
        scores = verdicts.score[candidates]
        ties = candidates[scores == scores.max()]
        return int(ties[0]) if len(ties) == 1 else self._nodes.first_by_name(ties)

    def _assignment(self, pod: PodRequest, verdicts: Verdicts, i: int) -> Assignment | None:
        """The cached assignment of slot `i` (cached per state, so named after the node here);
        made again when a sibling class pruned it from a shared table (`_share_table`)."""
        code = int(verdicts.code[i])
        found = None
        if code >= 0:
            found = self._kept(pod, verdicts, code, i)[3]
        name = self._nodes.name(i)
        if found is None or found.node == name:
            return found
        return found.on(name)

    def _allowed_slots(self, allowed: AbstractSet[str]) -> IntArray:
        """The slots of `allowed` (the last ones are reused while that set object and the
        slots stand: a gang's members, and the gangs after it in the same domain, pass one)."""
        last = self._allowed
        if last is not None and last[0] is allowed and last[1] == self._nodes.epoch:
            return last[2]
        slots = self._nodes.slots_of(allowed)
        self._allowed = (allowed, self._nodes.epoch, slots)
        return slots

    def _rejections(self, pod: PodRequest, verdicts: Verdicts) -> Rejection:
        """Why a node of the snapshot rejects `pod`, from `verdicts` (`pod`'s class, up to date);
        a node the pre-check skipped is filtered now, once per state. Its code is not kept: a
        share pod's class does not follow the changes of nodes without shared GPUs, which the
        pre-check always skips, so a code kept for one would go stale."""
        codes: list[int] = verdicts.code.tolist()  # a list reads faster, node after node
        slot_of, table = self._nodes.slot, verdicts.table
        skipped = {} if verdicts.shared_table else table  # (a shared table: the pre-check's)

        def rejection(node: NodeState) -> tuple[str, ...]:
            slot = slot_of(node.name)
            code = codes[slot]
            kept = table
            if code < 0:
                code, kept = self._code(verdicts, slot), skipped
            verdict = kept.get(code)
            if verdict is None:
                verdict = kept[code] = self._verdict(pod, slot)
            return verdict[4]

        return rejection

    # -- cached verdicts -------------------------------------------------------------------------
    def _learned_version(self) -> int:
        return sum(fn.version for fn in self._learners)

    def _observe(self, pod: PodRequest) -> None:
        """Let learning scores see the snapshot's GPU nodes and `pod` (as `pick` does); when what
        they learned changes, every verdict is stale."""
        idle, gpu_nodes = self._snapshot.idle_gpu_nodes, self._snapshot.gpu_nodes
        for fn in self._learners:
            fn.watch(idle, gpu_nodes)
            fn.observe(pod)
        version = self._learned_version()
        if version != self._version:
            self._version = version
            self._rescore_classes()
            self._shares.forget_scores()
            self._siblings.clear()
            if self._reads is not None:
                self._reads.clear()

    def _rescore_classes(self) -> None:
        """What the learners know changed, so every score is stale: each class is evaluated in
        full at its next use, with its verdicts kept aside (`Verdicts.stale`). No filter reads a
        score, so a state's rejection stands, and a state that fits keeps its assignment and is
        scored again, not filtered again (`_made`)."""
        tables: dict[ClassKey, dict[int, Verdict]] = {}
        for verdicts in self._classes.values():
            verdicts.stale = (
                verdicts.table if verdicts.stale is None else verdicts.stale | verdicts.table
            )
            if verdicts.labels:
                verdicts.seen = -1  # before every log position: evaluated in full
            else:
                verdicts.rescore = True  # changed slots first, then the feasible states' scores
            key = verdicts.table_key
            verdicts.table = {} if key is None else tables.setdefault(key, {})
        self._tables = tables

    def _refresh(self, pod: PodRequest) -> Verdicts:
        if self._learners:
            self._observe(pod)
        if self._nodes.sync():  # slots added: every class starts afresh
            self._classes.clear()
            self._tables.clear()
        key = pod_class(pod)
        verdicts = self._classes.pop(key, None)
        capacity = self._nodes.capacity
        log = self._nodes.log_for(pod)
        dirty: list[int] | None = None
        if verdicts is None:
            tiered = self._scoring.prefer_used_nodes and pod.wants_gpu
            verdicts = Verdicts.empty(
                capacity, label_keys(pod), tiered, log.position, self._heap_top
            )
            self._share_table(pod, verdicts)
            while self._classes and len(self._classes) * capacity >= _CLASS_CELLS:
                del self._classes[next(iter(self._classes))]  # the least recently used
        else:
            dirty = log.changed_after(verdicts.seen)
        verdicts.seen = log.position
        if dirty is None or len(dirty) > max(_FEW, capacity // 8):
            if verdicts.labels:
                all_slots = np.arange(capacity, dtype=np.int64)
                self._evaluate_many(pod, verdicts, all_slots if dirty is None else np.array(dirty))
                verdicts.defer_rebuild()
            else:
                self._evaluate_states(pod, verdicts)
            verdicts.stale, verdicts.rescore = None, False  # every state evaluated again
        else:
            self._evaluate_few(pod, verdicts, dirty)
            if verdicts.rescore:
                self._rescore_states(pod, verdicts)
        verdicts.prune()
        self._classes[key] = verdicts  # most recently used last
        return verdicts

    def _share_table(self, pod: PodRequest, verdicts: Verdicts) -> None:
        """Give a new class the verdict table of the classes that differ from it only in memory,
        when nothing but the resource fit reads a pod's memory: a GPU pod (whose scores do not
        read it, `score_reads`) that is not Guaranteed (no NUMA zone's memory to fit) and reads
        no labels (codes are state ids). Each class's pre-check checks the memory itself, so a
        verdict kept there, made for a sibling whose memory fit the node, is the class's too."""
        if verdicts.labels or not pod.wants_gpu or pod.guaranteed or not self._shipped:
            return
        if len(self._tables) >= _TABLES:
            self._tables.clear()
        verdicts.table_key = pod_class(pod, memory=False)
        verdicts.table = self._tables.setdefault(verdicts.table_key, {})
        verdicts.shared_table = True

    def _evaluate_few(self, pod: PodRequest, verdicts: Verdicts, dirty: list[int]) -> None:
        """Bring the verdicts of slots `dirty` up to date, slot by slot (plain Python: no numpy
        call gives the GIL away), with what each slot needs looked up once."""
        passed, failed = self._nodes.sift(pod, dirty)
        verdicts.reject(failed)
        if verdicts.labels:
            codes = [self._code(verdicts, slot) for slot in passed]
        else:
            states = self._nodes.state_ids
            codes = [states[slot] for slot in passed]
        table, made = verdicts.table, []
        for code, slot in zip(codes, passed, strict=True):
            verdict = table.get(code)  # (an earlier slot of this state may have made it)
            if verdict is None:
                verdict = table[code] = self._made(pod, verdicts, code, slot)
            made.append(verdict)
        names = cast("Sequence[str]", self._nodes.names)  # passed: a node is in each of those
        verdicts.put(passed, codes, made, names)

    def _evaluate_many(self, pod: PodRequest, verdicts: Verdicts, dirty: IntArray) -> None:
        """Bring the verdicts of slots `dirty` up to date: one verdict per distinct state (the
        caller rebuilds the heap)."""
        maybe = self._nodes.maybe_fits(pod, dirty)
        rejected, kept = dirty[~maybe], dirty[maybe]
        verdicts.feasible[rejected] = False
        verdicts.code[rejected] = -1
        if not len(kept):
            return
        if verdicts.labels:
            codes = np.array([self._code(verdicts, slot) for slot in kept.tolist()], dtype=np.int64)
        else:
            codes = self._nodes.states[kept]
        distinct, first, at = np.unique(codes, return_index=True, return_inverse=True)
        firsts = kept[first].tolist()
        feasible = np.zeros(len(firsts), dtype=np.bool_)
        tier = np.zeros(len(firsts), dtype=np.bool_)
        score = np.zeros(len(firsts), dtype=np.float64)
        for j, (code, slot) in enumerate(zip(distinct.tolist(), firsts, strict=True)):
            verdict = self._kept(pod, verdicts, code, slot)
            feasible[j], tier[j], score[j] = verdict[0], verdict[1], verdict[2]
        verdicts.feasible[kept] = feasible[at]
        verdicts.tier[kept] = tier[at]
        verdicts.score[kept] = score[at]
        verdicts.code[kept] = codes

    def _evaluate_states(self, pod: PodRequest, verdicts: Verdicts) -> None:
        """Every slot's verdict for a class that reads no labels (codes are state ids): the
        pre-check on one slot per live state (`StateMembers`, vectorised) and a verdict per state
        that passes it, spread to the slots by one gather per array, so a new class or a refit
        costs O(states), never a pass over the slots."""
        members = self._nodes.members
        first = members.first_slots()  # the last row: slots without a node (row -1)
        live = np.flatnonzero(first >= 0)
        passed = self._nodes.maybe_fits(pod, first[live])
        rows, slots = live[passed], first[live[passed]]
        states = self._nodes.states[slots].tolist()
        table = verdicts.table
        made = []
        for state, slot in zip(states, slots.tolist(), strict=True):
            verdict = table.get(state)
            if verdict is None:
                verdict = table[state] = self._made(pod, verdicts, state, slot)
            made.append(verdict)
        feasible = np.zeros(len(first), dtype=np.bool_)
        tier = np.zeros(len(first), dtype=np.bool_)
        score = np.zeros(len(first), dtype=np.float64)
        code = np.full(len(first), -1, dtype=np.int64)
        feasible[rows] = [verdict[0] for verdict in made]
        tier[rows] = [verdict[1] for verdict in made]
        score[rows] = [verdict[2] for verdict in made]
        code[rows] = states
        at = members.rows  # -1 (no node): the last row, as `wrap` takes it
        for row_values, slot_values in (
            (feasible, verdicts.feasible),
            (tier, verdicts.tier),
            (score, verdicts.score),
            (code, verdicts.code),
        ):
            np.take(row_values, at, out=slot_values, mode="wrap")  # unbuffered, no temporary
        verdicts.defer_rebuild()

    def _rescore_states(self, pod: PodRequest, verdicts: Verdicts) -> None:
        """After a refit, with the changed slots up to date: the score of each live state a
        class without labels finds feasible, spread to the slots by one gather. A refit changes
        no fit, used tier or code, and nothing reads a score where a slot does not fit, so one
        array is written, not four, and only the feasible states are scored again."""
        members = self._nodes.members
        first = members.first_slots()  # the last row: slots without a node (row -1)
        live = np.flatnonzero(first >= 0)
        rows = live[verdicts.feasible[first[live]]]
        slots = first[rows]
        score = np.zeros(len(first), dtype=np.float64)
        kept = self._kept
        score[rows] = [
            kept(pod, verdicts, code, slot)[2]
            for code, slot in zip(verdicts.code[slots].tolist(), slots.tolist(), strict=True)
        ]
        np.take(score, members.rows, out=verdicts.score, mode="wrap")
        verdicts.stale, verdicts.rescore = None, False
        verdicts.defer_rebuild()

    def _top_slots(self, verdicts: Verdicts) -> IntArray | None:
        """The best `verdicts.top` feasible slots by (used tier, score, name), in no order, for
        a class that reads no labels (its slots in one state share a verdict); None when no
        more are feasible. Each state's (tier, score) gets a level, and the states' slots, kept
        in name order, are taken level by level (`StateMembers.best_slots`): the cost grows
        with the states, not the slots."""
        if int(np.count_nonzero(verdicts.feasible)) <= verdicts.top:
            return None
        members = self._nodes.members
        first = members.first_slots()  # per row; the last: rows of no node
        feasible, tier, score = (
            verdicts.feasible[first],
            verdicts.tier[first],
            verdicts.score[first],
        )
        feasible[first < 0] = False
        level = _levels(feasible, tier if verdicts.tiered else None, score)
        return np.array(members.best_slots(level, verdicts.top), dtype=np.int64)

    def _code(self, verdicts: Verdicts, slot: int) -> int:
        """The key of slot `slot`'s verdict: its state id, or for a class that reads more labels
        (a node selector or affinity) a code for (state id, those labels' values; the node's
        name for `NODE_NAME_KEY`)."""
        state = self._nodes.state(slot)
        if not verdicts.labels:
            return state
        node = self._nodes.node(slot)
        if NODE_NAME_KEY not in verdicts.labels:
            return verdicts.combo(state, tuple(map(node.labels.get, verdicts.labels)))
        labels = node.labels
        values = tuple(node.name if k == NODE_NAME_KEY else labels.get(k) for k in verdicts.labels)
        return verdicts.combo(state, values)

    def _kept(self, pod: PodRequest, verdicts: Verdicts, code: int, slot: int) -> Verdict:
        """The verdict under `code` in the class's table (slot `slot` is in that state); made and
        kept when missing."""
        verdict = verdicts.table.get(code)
        if verdict is None:
            verdict = verdicts.table[code] = self._made(pod, verdicts, code, slot)
        return verdict

    def _made(self, pod: PodRequest, verdicts: Verdicts, code: int, slot: int) -> Verdict:
        """The verdict for slot `slot` (which passed the class's pre-check), from the one kept
        aside at the last refit (`verdicts.stale`, under `code`) when there is one: a rejection
        as it was, a fit's assignment scored again (a share pod's too: where its shares go
        reads no score, `ShareMemo.fit`); else the one a class that differs only in memory
        made for its state (`_sibling_key`), or `_verdict`."""
        stale = verdicts.stale
        old = None if stale is None else stale.get(code)
        if old is None:
            return self._fresh(pod, verdicts, slot)
        fits, used, _score, assignment, _reasons = old
        if not fits:
            return old
        if assignment is None:
            return self._verdict(pod, slot)
        return (True, used, self._score(pod, slot, assignment), assignment, ())

    def _fresh(self, pod: PodRequest, verdicts: Verdicts, slot: int) -> Verdict:
        """The verdict for slot `slot` (which passed the class's pre-check) that fits under
        what its filters and scores read (`ReadVerdicts`), else the one a class that differs
        only in memory made for its state (`_sibling_key`), else `_verdict`."""
        if pod.shares:  # (neither table keeps a share pod's verdict)
            return self._verdict(pod, slot)
        reads = self._reads
        read_key = None
        if reads is not None and not verdicts.labels:
            nodes = self._nodes
            read_key = reads.key(pod, nodes.state(slot), nodes.shape(slot), nodes.node(slot))
            if read_key is not None:
                kept = reads.get(read_key)
                if kept is not None:
                    return kept
        key = self._sibling_key(pod, verdicts, slot)
        if key is None:
            found = self._verdict(pod, slot)
        else:
            sibling = self._siblings.get(key)
            if sibling is None:
                if len(self._siblings) >= _SIBLINGS:
                    self._siblings.clear()
                sibling = self._siblings[key] = self._verdict(pod, slot)
            found = sibling
        if read_key is not None and reads is not None:
            reads.keep(read_key, found)
        return found

    def _sibling_key(self, pod: PodRequest, verdicts: Verdicts, slot: int) -> int | None:
        """The key under which classes of pods without GPUs that differ only in memory share
        a verdict on slot `slot`'s state, when nothing but the resource fit reads a pod's
        memory there (which the pre-check each class passed checks as the filter does): the
        node has GPUs and the scoring is `memory_blind_on_gpu_nodes`, the pod is not
        Guaranteed (no NUMA zone's memory to fit) and its class reads no labels (the state
        holds its verdict). None otherwise."""
        if pod.wants_gpu or pod.guaranteed or verdicts.labels or not self._memory_blind:
            return None
        if not self._nodes.node(slot).gpu_count:
            return None
        if pod is not self._sibling_pod:
            key = pod_class(pod, memory=False)
            number = self._sibling_numbers.get(key)
            if number is None:
                if len(self._sibling_numbers) >= _TABLES:  # numbers afresh: verdicts too
                    self._sibling_numbers.clear()
                    self._siblings.clear()
                number = self._sibling_numbers[key] = len(self._sibling_numbers)
            self._sibling_pod, self._sibling_number = pod, number
        return self._nodes.state(slot) << _SIBLING_BITS | self._sibling_number

    def _score(self, pod: PodRequest, slot: int, assignment: Assignment) -> float:
        """`scoring.total` of `assignment` on slot `slot`'s node; a GPU pod's through
        `ShareMemo`, which keys it by what the scores read (the node's memory is not among
        them: only a cpu-only pod's scores read it)."""
        node = self._nodes.node(slot)
        state, shape = self._nodes.state(slot), self._nodes.shape(slot)
        if pod.shares:
            return self._shares.scored(state, shape, pod, node, assignment)[1]
        if pod.wants_gpu:
            return self._shares.whole_score(state, shape, pod, node, assignment)
        if self._memory_blind and node.gpu_count:
            return self._shares.cpu_pod_score(state, shape, pod, node, assignment)
        return self._scoring.total(pod, node, assignment)

    def _verdict(self, pod: PodRequest, slot: int) -> Verdict:
        """The verdict for slot `slot`'s node; a share pod's placement and score come through
        the per-state `ShareMemo`, which other share classes fill too."""
        node = self._nodes.node(slot)
        if not pod.shares:
            fit = filter_node(pod, node)
            if fit.assignment is None:
                return (False, False, 0.0, None, fit.reasons)
            score = self._score(pod, slot, fit.assignment)
            return (True, node.gpu_used(), score, fit.assignment, ())
        state, shape = self._nodes.state(slot), self._nodes.shape(slot)
        if pod.mig or node.topology_policy is TopologyPolicy.SINGLE_NUMA_NODE:
            fit = filter_node(pod, node, share_fit=partial(self._shares.fit, state, shape))
            if fit.assignment is None:
                return (False, False, 0.0, None, fit.reasons)
            assignment, score = self._shares.scored(state, shape, pod, node, fit.assignment)
            return (True, node.gpu_used(), score, assignment, ())
        # `filter_node`'s stages, with the placement found once for the fit and the score:
        # only shares to place, and no NUMA node to align them to (`choose_devices`)
        reasons = node_reasons(pod, node)
        if reasons:
            return (False, False, 0.0, None, reasons)
        placed = self._shares.fit_scored(state, shape, pod, node)
        if placed is None:
            return (False, False, 0.0, None, (device_reason(pod, node),))
        return (True, node.gpu_used(), placed[1], placed[0], ())


def _levels(feasible: BoolArray, tier: BoolArray | None, score: FloatArray) -> IntArray:
    """Per row, the rank of its (used tier when `tier` is given, score) among the rows, equal
    ones alike, the best 0; rows not feasible after every feasible one: slots ordered by (their
    row's level, node name) are in `pick`'s order."""
    group = np.where(feasible, 0, 2) if tier is None else np.where(feasible, ~tier, 2)
    order = np.lexsort((-score, group))
    ordered_group, ordered_score = group[order], score[order]
    starts = np.ones(len(order), dtype=np.int64)
    starts[1:] = (ordered_group[1:] != ordered_group[:-1]) | (
        ordered_score[1:] != ordered_score[:-1]
    )
    level = np.empty(len(order), dtype=np.int64)
    level[order] = np.cumsum(starts) - 1
    return level
