"""Scores for one pod on one feasible node, combined as a weighted sum (DESIGN §7).

Each is in 0..100, but `fragmentation` in a living cluster: half a point above (keeping big nodes
whole) and 30 points below (an idle node while idle nodes are scarce), see `FragmentationScore`.

A score function is `(pod, node, assignment) -> float`, evaluated on the node *before* the pod is
added. It reads a share pod's share containers only through the assignment, as each share's GPU,
milli-GPU and slots (the verdict memo shares those scores between share pod classes, `share_memo`).
`Scoring` is the pluggable list of weighted score functions plus the node-ranking rules;
the config file names functions from `SCORE_FUNCTIONS` (stateless) and `SCORE_FACTORIES` (a fresh
instance per `Scoring`, e.g. `fragmentation`, see `fragscores`). Ranking of feasible nodes:

1. with `prefer_used_nodes`, for a GPU pod, a node whose GPUs are already partly in use beats an
   idle one (binpack never opens a new node while a used one fits);
2. the highest weighted sum;
3. the lowest node name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol, runtime_checkable

from agent.model import MILLI_PER_GPU

from .fragscores import FragmentationScore, spread_on_cpu_nodes_score
from .node import Assignment, NodeState
from .request import CPU, MEMORY, PodRequest
from .shares import placed_milli
from .snapshot import Snapshot

__all__ = [
    "DEFAULT_WEIGHTS",
    "SCORE_FACTORIES",
    "SCORE_FUNCTIONS",
    "Learner",
    "ScoreFn",
    "Scoring",
    "WeightedScore",
    "binpack_score",
    "default_scoring",
    "gpu_avoidance_score",
    "gpu_pod_node_reads",
    "score_reads",
    "spread_score",
    "topology_score",
]

ScoreFn = Callable[[PodRequest, NodeState, Assignment], float]
MAX_SCORE = 100.0


def binpack_score(pod: PodRequest, node: NodeState, assignment: Assignment) -> float:
    """GPU pods: the share of the node's GPU capacity in use once the pod is placed (fullest wins).

    A MIG-enabled GPU counts its devices in use by compute slices out of 7. 0 without GPUs.
    """
    if not pod.wants_gpu:
        return 0.0
    mig_gpus = sum(node.gpu_mig)
    capacity = MILLI_PER_GPU * len(node.gpu_mig)
    if capacity == 0:
        return 0.0
    used = node.used_milli + placed_milli(pod, assignment)
    if mig_gpus:
        slices = sum(_slices(p) for _req, a in node.pods.values() for _g, p in a.mig)
        slices += sum(_slices(p) for _g, p in assignment.mig)
        used += MILLI_PER_GPU * slices // 7
    return MAX_SCORE * min(used, capacity) / capacity


def _slices(profile: str) -> int:
    head = profile.split("g", 1)[0]
    return int(head) if head.isdigit() else 1


def topology_score(pod: PodRequest, node: NodeState, assignment: Assignment) -> float:
    """How close the assigned GPU set is to the best set of that size on the idle node (DESIGN §4).

    100 for a set as good as the node's best; NVLinks lost cost up to 60, extra PCIe distance up
    to 30, more than one NUMA node 10. Sets of fewer than two GPUs score 100; pods without GPUs 0.
    """
    if not pod.wants_gpu:
        return 0.0
    gpus = assignment.gpus
    if len(gpus) < 2 or node.selector is None:
        return MAX_SCORE
    sel = node.selector
    nv, pc, numa = sel.objective_of(gpus)
    all_whole = (1 << node.gpu_count) - 1
    for g, is_mig in enumerate(node.gpu_mig):
        if is_mig:
            all_whole &= ~(1 << g)
    ideal_nv, ideal_pc, _ = sel.best_objective(len(gpus), all_whole) or (nv, pc, numa)
    pairs = len(gpus) * (len(gpus) - 1) // 2
    penalty = 0.0
    if ideal_nv > 0:
        penalty += 60.0 * max(0, ideal_nv - nv) / ideal_nv
    penalty += 30.0 * max(0, pc - ideal_pc) / (5 * pairs)
    if numa > 1:
        penalty += 10.0
    return max(0.0, MAX_SCORE - penalty)


def spread_score(pod: PodRequest, node: NodeState, assignment: Assignment) -> float:
    """Pods without GPUs: LeastAllocated over cpu and memory (the emptiest node wins); else 0."""
    del assignment
    if pod.wants_gpu:
        return 0.0
    parts = []
    for name, qty in ((CPU, pod.cpu_milli), (MEMORY, pod.memory)):
        alloc = node.allocatable.get(name, 0)
        if alloc <= 0:
            continue
        parts.append(max(0, alloc - node.requested.get(name, 0) - qty) * MAX_SCORE / alloc)
    return sum(parts) / len(parts) if parts else 0.0


def gpu_avoidance_score(pod: PodRequest, node: NodeState, assignment: Assignment) -> float:
    """Pods without GPUs: 100 on a node without GPUs, so GPU nodes keep their cpu for GPU pods."""
    del assignment
    if pod.wants_gpu:
        return 0.0
    return 0.0 if node.gpu_count else MAX_SCORE


SCORE_FUNCTIONS: Mapping[str, ScoreFn] = MappingProxyType(
    {
        "binpack": binpack_score,
        "topology": topology_score,
        "spread": spread_score,
        "gpuAvoidance": gpu_avoidance_score,
        "spreadOnCpuNodes": spread_on_cpu_nodes_score,
    }
)
"""Score functions by the name the config file uses."""

SCORE_FACTORIES: Mapping[str, Callable[[], ScoreFn]] = MappingProxyType(
    {"fragmentation": FragmentationScore}
)
"""Scores with state of their own (`fragmentation` learns the workload's typical pods): each
`Scoring` gets a fresh one, so nothing is shared between schedulers or simulations."""


@runtime_checkable
class Learner(Protocol):
    """A score function that learns from the pods it scores and the cluster it places them in
    (see `FragmentationScore`).

    `watch(idle_gpu_nodes, gpu_nodes)` tells it how many nodes with GPUs have none in use, before
    each pod; `observe(pod)` counts a pod (once per key) before scoring it, `seen(pod)` one
    placed without it (bound before it began); `queued(pod)` and `dequeued(key)` say
    when a pod starts and stops waiting to be placed. `version` grows whenever what it
    learned or watched changes its scores, so callers that cache scores
    (`scheduler.placement.verdict_memo`) know to drop them.
    """

    version: int

    def watch(self, idle_gpu_nodes: int, gpu_nodes: int) -> None: ...

    def observe(self, pod: PodRequest) -> None: ...

    def seen(self, pod: PodRequest) -> None: ...

    def queued(self, pod: PodRequest) -> None: ...

    def dequeued(self, key: str) -> None: ...


@dataclass(frozen=True, slots=True)
class WeightedScore:
    name: str
    weight: float
    fn: ScoreFn


@dataclass(frozen=True, slots=True, kw_only=True)
class Scoring:
    """How feasible nodes are ranked. `candidate_limit`: stop after this many feasible nodes, taken
    in the snapshot's preference order (like kube-scheduler's percentageOfNodesToScore); 0 = all."""

    scores: tuple[WeightedScore, ...] = field(default_factory=tuple)
    prefer_used_nodes: bool = True
    candidate_limit: int = 32
    _learners: tuple[Learner, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # found once: a protocol `isinstance` per score costs tens of µs, and the queue calls
        # `queued`/`dequeued` at every pod event
        found = tuple(fn for fn in (s.fn for s in self.scores) if isinstance(fn, Learner))
        object.__setattr__(self, "_learners", found)

    @classmethod
    def from_weights(
        cls,
        weights: Mapping[str, float],
        *,
        prefer_used_nodes: bool = True,
        candidate_limit: int = 32,
    ) -> Scoring:
        """Scores named in `SCORE_FUNCTIONS` or `SCORE_FACTORIES`; KeyError names an unknown one."""
        scores = []
        for name, weight in weights.items():
            if name in SCORE_FACTORIES:
                fn = SCORE_FACTORIES[name]()
            elif name in SCORE_FUNCTIONS:
                fn = SCORE_FUNCTIONS[name]
            else:
                known = ", ".join((*SCORE_FUNCTIONS, *SCORE_FACTORIES))
                raise KeyError(f"unknown score {name!r} (known: {known})")
            scores.append(WeightedScore(name, float(weight), fn))
        return cls(
            scores=tuple(scores),
            prefer_used_nodes=prefer_used_nodes,
            candidate_limit=candidate_limit,
        )

    def total(self, pod: PodRequest, node: NodeState, assignment: Assignment) -> float:
        return sum(s.weight * s.fn(pod, node, assignment) for s in self.scores if s.weight)

    @property
    def shipped(self) -> bool:
        """Every function here is one of `SCORE_FUNCTIONS` or made by `SCORE_FACTORIES`: what
        they read of a pod is `score_reads`."""
        plain = set(SCORE_FUNCTIONS.values())
        made = set(SCORE_FACTORIES.values())
        return all(s.fn in plain or type(s.fn) in made for s in self.scores)

    @property
    def memory_blind_on_gpu_nodes(self) -> bool:
        """Every function here is shipped (`shipped`) and none with a weight reads memory when
        it scores a pod without GPUs on a node with GPUs (`spread` does; the others read cpu
        and GPUs there, or score 0): such a pod's score on such a node reads
        `score_reads(pod, memory=False)` of the pod and `gpu_pod_node_reads` of the node."""
        return self.shipped and not any(s.fn is spread_score for s in self.scores if s.weight)

    def learners(self) -> tuple[Learner, ...]:
        """The score functions that learn from the pods they see."""
        return self._learners

    def observe(self, pod: PodRequest, snapshot: Snapshot) -> None:
        """Show `snapshot`'s GPU nodes, then `pod`, to every learning score before the pod is
        decided on `snapshot` (`pick` and the memo do, once per pod)."""
        for fn in self.learners():
            fn.watch(snapshot.idle_gpu_nodes, snapshot.gpu_nodes)
            fn.observe(pod)

    def seen(self, pod: PodRequest) -> None:
        """`pod` was placed without this scoring (bound before the scheduler started or took
        over): learning scores count it as history."""
        for fn in self._learners:
            fn.seen(pod)

    def queued(self, pod: PodRequest) -> None:
        """`pod` starts waiting to be placed (it arrived, or was evicted): learning scores may
        count the waiting pods as the demand to come."""
        for fn in self._learners:
            fn.queued(pod)

    def dequeued(self, key: str) -> None:
        """The pod of `key` stops waiting (bound, or gone)."""
        for fn in self._learners:
            fn.dequeued(key)


def score_reads(pod: PodRequest, *, memory: bool = True) -> tuple[object, ...]:
    """What the shipped score functions read of a request besides its assignment (a learning
    score also learns from its key, before it scores): two requests with equal keys get equal
    scores with one assignment on one node. Memory only for a pod without GPUs (LeastAllocated),
    and not even then with `memory` False (on a node with GPUs, when the scoring is
    `memory_blind_on_gpu_nodes`); a share pod's containers only by their count (where they go
    is the assignment's)."""
    wants = pod.wants_gpu
    return (
        wants,
        pod.cpu_milli,
        0 if wants or not memory else pod.memory,
        pod.gpus,
        pod.gpu_milli,
        tuple(sorted(pod.gpu_models)),
        tuple(sorted(pod.mig.items())),
        len(pod.shares),
    )


def gpu_pod_node_reads(node: NodeState) -> tuple[object, ...]:
    """What the shipped score functions read of a node's load when they score a pod that wants
    a GPU: its free cpu, each GPU's free milli-GPU and the MIG devices in use and held. Besides
    that only the node's static shape (allocatable, GPUs, MIG mode, links) and its GPU product
    label; not its memory, pod slots or extended resources, nor what shares leave of a GPU's
    memory, compute and replicas (the assignment says what a share takes). Reads no label."""
    held: tuple[str, ...] = ()
    if True in node.gpu_mig or any(node.mig_in_use):
        held = tuple(sorted(p for _pod, a in node.pods.values() for _g, p in a.mig))
    return (node.free(CPU), tuple(node.gpu_free), tuple(node.mig_in_use), held)


DEFAULT_WEIGHTS: Mapping[str, float] = MappingProxyType(
    {"fragmentation": 10.0, "topology": 5.0, "spreadOnCpuNodes": 1.0, "gpuAvoidance": 1.0}
)
"""The shipped weights. `fragmentation` moves in whole points (×10), so it decides; `topology`
(×5, up to 500) still picks the better-linked GPU set for multi-GPU pods; the cpu-only-pod scores
only apply between nodes without GPUs. Measured on the Alibaba GPU trace (`bench/
placement_quality.py`): every node ranked, ties to the lowest name, no used-node tier."""


def default_scoring() -> Scoring:
    """The shipped scoring (same as `scheduler/default-config.yaml`): every feasible node ranked."""
    return Scoring.from_weights(DEFAULT_WEIGHTS, prefer_used_nodes=False, candidate_limit=0)
