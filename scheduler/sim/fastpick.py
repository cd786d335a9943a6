"""The simulator's fast path for `scheduler.placement.pick`: the same decision, memoised.

`pick(pod, snapshot, scoring)` filters and scores every candidate node for every pod. In a
simulation most of that work repeats: a node's verdict for a pod depends only on the pod's request
and the node's state, and one decision changes one node. `FastPicker` keeps, per *pod class* (the
request without its key), each node's verdict from the real `filter_node` and `Scoring.total`, and
recomputes it only for nodes changed since that class was last placed. The choice among the cached
verdicts follows `pick`'s ranking exactly: (used-node tier, weighted score, lowest name).

Exactness needs `scoring.candidate_limit == 0` (every feasible node is ranked, as in the paper's
simulator); a non-zero limit makes `pick` depend on the snapshot's candidate order, so callers
use the real `pick` then (see `supports`). A vectorised pre-check (free cpu, memory, pod slots,
idle GPUs, largest free share) skips nodes that certainly fail; it is a necessary condition of
`filter_node`, never a second copy of it. Verdicts are also shared between nodes in the same
state: same static shape (labels, taints, allocatable, GPUs and links) and the same dynamic state
(free milli-GPU per GPU, requested resources, MIG and NUMA-zone counters), since filters and
scores are pure functions of those. Every change to the snapshot must go through `bind` /
`unbind` (or be reported with `touch`). Score functions that learn from the pods they score
(an `observe(pod)` method and a `version` counter, like `FragmentationScore`) are shown every pod
here, and a new version drops every cached verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from scheduler.placement import (
    Assignment,
    NodeState,
    PodRequest,
    Scoring,
    Snapshot,
    TopologyPolicy,
    filter_node,
)
from scheduler.placement.request import CPU, MEMORY, PODS

__all__ = ["FastPicker", "Learner", "pod_class"]

_IntArray = npt.NDArray[np.int64]
_FloatArray = npt.NDArray[np.float64]
_BoolArray = npt.NDArray[np.bool_]
_ClassKey = tuple[object, ...]
_Verdict = tuple[bool, bool, float, Assignment | None]
_MEMO_LIMIT = 1_000_000


def pod_class(pod: PodRequest) -> _ClassKey:
    """Everything in a request that filters and scores can see, i.e. all but its key."""
    return (
        pod.vector,
        pod.gpu_milli,
        tuple(sorted(pod.mig.items())),
        tuple(sorted(pod.node_selector.items())),
        pod.affinity,
        pod.tolerations,
        tuple(sorted(pod.gpu_models)),
        pod.priority,
        pod.guaranteed,
        pod.unsupported,
        pod.pod_group,
    )


@runtime_checkable
class Learner(Protocol):
    """A score function that learns from the pods it scores (see `FragmentationScore`)."""

    version: int

    def observe(self, pod: PodRequest) -> None: ...


@dataclass(slots=True)
class _Verdicts:
    """One pod class's view of every node, valid up to position `seen` of the change log."""

    feasible: _BoolArray
    tier: _BoolArray
    score: _FloatArray
    assignment: list[Assignment | None]
    seen: int


class FastPicker:
    """`pick` for a snapshot whose changes all go through this object."""

    def __init__(self, snapshot: Snapshot, scoring: Scoring) -> None:
        if not self.supports(scoring):
            raise ValueError("FastPicker needs scoring.candidate_limit == 0 (rank every node)")
        self.snapshot = snapshot
        self.scoring = scoring
        self._names = snapshot.names()
        self._nodes: list[NodeState] = [snapshot.node(n) for n in self._names]
        self._index = {name: i for i, name in enumerate(self._names)}
        size = len(self._names)
        self._cpu: _IntArray = np.zeros(size, dtype=np.int64)
        self._memory: _IntArray = np.zeros(size, dtype=np.int64)
        self._slots: _IntArray = np.zeros(size, dtype=np.int64)
        self._idle: _IntArray = np.zeros(size, dtype=np.int64)
        self._share: _IntArray = np.zeros(size, dtype=np.int64)
        self._log: list[int] = []
        self._classes: dict[_ClassKey, _Verdicts] = {}
        self._memo: dict[tuple[int, int], _Verdict] = {}
        self._class_ids: dict[_ClassKey, int] = {}
        self._learners: list[Learner] = []
        for weighted in scoring.scores:
            fn: object = weighted.fn
            if isinstance(fn, Learner):
                self._learners.append(fn)
        self._version = self._learned_version()
        shapes: dict[tuple[object, ...], int] = {}
        self._shape = [shapes.setdefault(_static(n), len(shapes)) for n in self._nodes]
        self._states: dict[tuple[object, ...], int] = {}  # (shape, load) -> small int
        self._state = [0] * size
        for i in range(size):
            self._measure(i)

    @staticmethod
    def supports(scoring: Scoring) -> bool:
        return scoring.candidate_limit == 0

    # -- changes ---------------------------------------------------------------------------------
    def bind(self, pod: PodRequest, assignment: Assignment) -> None:
        self.snapshot.assume(pod, assignment)
        self.touch(assignment.node)

    def unbind(self, key: str) -> Assignment | None:
        name = self.snapshot.node_of(key)
        found = self.snapshot.forget(key)
        if name is not None:
            self.touch(name)
        return found

    def touch(self, name: str) -> None:
        """Record that node `name` changed outside `bind`/`unbind`."""
        i = self._index[name]
        self._measure(i)
        self._log.append(i)

    def _measure(self, i: int) -> None:
        node = self._nodes[i]
        state = (self._shape[i], *_dynamic(node))
        self._state[i] = self._states.setdefault(state, len(self._states))
        self._cpu[i] = node.free(CPU)
        self._memory[i] = node.free(MEMORY)
        self._slots[i] = node.free(PODS)
        self._idle[i] = len(node.free_whole_gpus())
        self._share[i] = max(
            (f for g, f in enumerate(node.gpu_free) if not node.gpu_mig[g]), default=0
        )

    # -- decisions -------------------------------------------------------------------------------
    def feasible(self, pod: PodRequest) -> list[str]:
        """Names of the nodes where `pod` fits (as `filter_node` says), sorted."""
        verdicts = self._refresh(pod)
        return [self._names[i] for i in np.flatnonzero(verdicts.feasible)]

    def assignment_on(self, pod: PodRequest, name: str) -> Assignment | None:
        """The devices `pod` gets on `name` (None if it does not fit), from the cache."""
        return self._assignment(self._refresh(pod), self._index[name])

    def pick(self, pod: PodRequest) -> tuple[Assignment, float] | None:
        """The node `pick` would choose, with its assignment and score; None when none fits."""
        if pod.unsupported:
            return None
        verdicts = self._refresh(pod)
        candidates = verdicts.feasible
        if not candidates.any():
            return None
        if self.scoring.prefer_used_nodes and pod.wants_gpu:
            used = candidates & verdicts.tier
            if used.any():
                candidates = used
        scores = np.where(candidates, verdicts.score, -np.inf)
        best = int(np.argmax(scores))  # the first maximum: the lowest name
        chosen = self._assignment(verdicts, best)
        if chosen is None:  # unreachable: a feasible node always has an assignment
            raise RuntimeError(f"node {self._names[best]} is feasible without an assignment")
        return chosen, float(verdicts.score[best])

    def _assignment(self, verdicts: _Verdicts, i: int) -> Assignment | None:
        """The cached assignment of node `i` (cached per state, so named after the node here)."""
        found = verdicts.assignment[i]
        name = self._names[i]
        if found is None or found.node == name:
            return found
        return replace(found, node=name)

    def _learned_version(self) -> int:
        return sum(fn.version for fn in self._learners)

    def _observe(self, pod: PodRequest) -> None:
        """Let learning scores see `pod`; when one refits, every cached verdict is stale."""
        for fn in self._learners:
            fn.observe(pod)
        version = self._learned_version()
        if version != self._version:
            self._version = version
            self._classes.clear()
            self._memo.clear()

    def _refresh(self, pod: PodRequest) -> _Verdicts:
        if self._learners:
            self._observe(pod)
        key = pod_class(pod)
        verdicts = self._classes.get(key)
        if verdicts is None:
            size = len(self._names)
            verdicts = _Verdicts(
                feasible=np.zeros(size, dtype=np.bool_),
                tier=np.zeros(size, dtype=np.bool_),
                score=np.zeros(size, dtype=np.float64),
                assignment=[None] * size,
                seen=len(self._log),
            )
            self._classes[key] = verdicts
            dirty: _IntArray = np.arange(size, dtype=np.int64)
        else:
            if verdicts.seen == len(self._log):
                return verdicts
            dirty = np.unique(np.asarray(self._log[verdicts.seen :], dtype=np.int64))
            verdicts.seen = len(self._log)
        self._evaluate(pod, verdicts, dirty)
        return verdicts

    def _maybe(self, pod: PodRequest, dirty: _IntArray) -> _BoolArray:
        """Nodes among `dirty` that pass the necessary resource conditions of `filter_node`."""
        ok = (self._cpu[dirty] >= pod.cpu_milli) & (self._memory[dirty] >= pod.memory)
        ok &= self._slots[dirty] >= 1
        if pod.gpus:
            ok &= self._idle[dirty] >= pod.gpus
        if pod.gpu_milli:
            ok &= self._share[dirty] >= pod.gpu_milli
        return ok

    def _evaluate(self, pod: PodRequest, verdicts: _Verdicts, dirty: _IntArray) -> None:
        maybe = self._maybe(pod, dirty)
        verdicts.feasible[dirty[~maybe]] = False
        key = self._class_id(pod)
        for i in dirty[maybe].tolist():
            node = self._nodes[i]
            state = (key, self._state[i])
            verdict = self._memo.get(state)
            if verdict is None:
                verdict = self._verdict(pod, node)
                if len(self._memo) >= _MEMO_LIMIT:
                    self._memo.clear()
                self._memo[state] = verdict
            feasible, tier, score, assignment = verdict
            verdicts.feasible[i] = feasible
            verdicts.tier[i] = tier
            verdicts.score[i] = score
            verdicts.assignment[i] = assignment

    def _class_id(self, pod: PodRequest) -> int:
        return self._class_ids.setdefault(pod_class(pod), len(self._class_ids))

    def _verdict(self, pod: PodRequest, node: NodeState) -> _Verdict:
        fit = filter_node(pod, node)
        if fit.assignment is None:
            return (False, False, 0.0, None)
        score = self.scoring.total(pod, node, fit.assignment)
        return (True, node.gpu_used(), score, fit.assignment)


def _static(node: NodeState) -> tuple[object, ...]:
    """What never changes on a node and filters or scores may read (not its name)."""
    return (
        tuple(sorted(node.labels.items())),
        node.taints,
        node.unschedulable,
        tuple(sorted(node.allocatable.items())),
        node.gpu_numa,
        node.gpu_mig,
        node.links,
        node.topology_policy,
    )


def _dynamic(node: NodeState) -> tuple[object, ...]:
    """The node's load: free share per GPU, requested resources, MIG and NUMA-zone counters."""
    mig = tuple(tuple(sorted(m.items())) for m in node.mig_free) if True in node.gpu_mig else ()
    zones: tuple[object, ...] = ()
    if node.topology_policy is TopologyPolicy.SINGLE_NUMA_NODE and node.numa_free is not None:
        zones = tuple((k, tuple(sorted(v.items()))) for k, v in sorted(node.numa_free.items()))
    return (tuple(node.gpu_free), tuple(sorted(node.requested.items())), mig, zones)
