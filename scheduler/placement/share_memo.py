"""What `VerdictMemo`'s pod classes of GPU shares have in common on one node state (DESIGN §12),
and the scores of every GPU pod's classes, kept by what the scores read.

Share pods come in many classes: every (cpu, memory, `gpu-memory`, `gpu-compute`) combination is
one, and each class decides every changed shared node on its own. Two parts of that verdict are
the same for many classes on one node state, so `ShareMemo` keeps them per state id (ids are
never reused for another state, `NodeSlots`):

* where the pod's share containers go (`share_devices`): it reads only the share containers and
  what the node's GPUs have free (`shared_room`), not the pod's cpu or memory nor the node's,
  so the classes that differ in those, on states that differ in those, share it, and the one
  `Assignment` object made for it (`fit`). A pod of one share container (most are) needs only
  its GPU found on a room not seen before (`share_gpu`): what it takes there depends on the
  GPU's static size alone, so one assignment per (static shape, containers, GPU) serves every
  room that leads there (a share bind makes a room no node was in, and its next share mostly
  goes to the same GPU);
* the weighted score: score functions read a share pod's shares only through its assignment,
  as each share's GPU and milli-GPU (`placed_milli`, `chosen_gpu`), so classes asking different
  memory or compute that land on the same GPU with the same milli share it. The key is what the
  scores read of the pod (`score_reads`: not its memory, which only cpu-only pods' scores read;
  the whole pod class without its share containers when a score is not a shipped one), plus
  each placed share's (GPU, milli, slots), on what the scores read of the node: its static
  shape, GPU product label and `gpu_pod_node_reads` (free cpu and milli-GPU per GPU, MIG in
  use), so states that differ only in memory or in what shares leave of a GPU's memory,
  compute and replicas share it too (the node state itself when a score is not shipped).
  Pods asking a GPU without share containers (whole GPUs, a `gpu_milli` share, MIG devices)
  keep their scores here the same way (`whole_score`): a bind mostly makes a state no node was
  in, and the classes that look at it next find the score when another state had as much cpu
  and milli-GPU free (29 % of the scores at 5,000 nodes in `bench/scheduler_bench.py`).
  Pods without GPUs keep theirs on nodes with GPUs when no score reads memory there
  (`cpu_pod_score`, `Scoring.memory_blind_on_gpu_nodes`): keyed without the pod's memory, so
  the classes that differ only in it score each new state once, not once each (at 5,000
  nodes they made over half of all scorings).

An assignment from `fit` carries the number of its score key's placement part, so a score is
keyed by numbers, not by nested tuples built per verdict: fewer objects kept means fewer garbage
collections, which a share pod's many classes would otherwise pay for. The assignments are
shared between nodes, so their node name is the first such node's (the memo's caller names
the node it hands out; no score reads the name).

Scores are dropped with the learners' version (the memo's caller says when); the tables are
bounded and start afresh when full. Not thread-safe, like the memo.
"""

from __future__ import annotations

from .class_verdicts import pod_class
from .filters import share_devices
from .node import GPU_PRODUCT_LABEL, Assignment, NodeState
from .request import PodRequest
from .scores import Scoring, gpu_pod_node_reads, score_reads
from .shares import share_gpu, shared_room

__all__ = ["ShareMemo"]

_LIMIT = 1 << 18  # entries per table before it starts afresh
_BITS = 32  # a key packs a state id and numbers below 1 << _BITS into one int (no tuple kept)
_RENUMBER = 1 << (_BITS - 1)  # numbers reached before a pod: every table starts afresh

_Fit = tuple[Assignment, int] | None  # the assignment and its placement part's number


class ShareMemo:
    """Placements and scores of share pods per node state id, shared between pod classes.

    A pod's two keys (its share containers; its class without them) are numbered once per pod
    decided (`_keys`), not hashed again per node; numbers are never reused while a table holds
    them. Keys are ints (`state << _BITS | number`): an int is no object the garbage collector
    tracks, a tuple is. A pod numbers fewer placements than there are nodes, so numbers stay
    below `1 << _BITS` when the tables start afresh at `_RENUMBER` before a pod."""

    def __init__(self, scoring: Scoring) -> None:
        self._scoring = scoring
        self._shipped = scoring.shipped  # what its scores read of a pod is `score_reads`
        self._fits: dict[int, _Fit] = {}
        self._on_gpu: dict[int, tuple[Assignment, int]] = {}  # (shape, shares, GPU) -> placed
        self._scores: dict[int, float] = {}
        self._node_keys: dict[int, int] = {}  # state id -> number of what scores read there
        self._place_keys: dict[int, int] = {}  # state id -> number of what placement reads
        self._ids: dict[object, int] = {}
        self._pod: PodRequest | None = None  # the last pod keyed, held so its id stays its own
        self._pod_keys = (-1, -1, -1)
        self._next = 0

    def forget_scores(self) -> None:
        """What the learners know changed: every score is stale."""
        self._scores.clear()

    def fit(
        self, state: int, shape: int, pod: PodRequest, node: NodeState, numa: int | None
    ) -> Assignment | None:
        """`share_devices(pod, node, numa)` for `node` in state `state` of static shape
        `shape` (kept when `numa` is None: a NUMA-aligned node's is made afresh)."""
        if numa is not None:
            return share_devices(pod, node, numa)
        kept = self._kept_fit(state, shape, pod, node)
        return None if kept is None else kept[0]

    def fit_scored(
        self, state: int, shape: int, pod: PodRequest, node: NodeState
    ) -> tuple[Assignment, float] | None:
        """`fit(state, shape, pod, node, None)` and, when it fits, its weighted score, as
        `scored` gives it: the placement looked up once for both (a share pod's verdict on a
        node that is not NUMA-aligned, `VerdictMemo`)."""
        kept = self._kept_fit(state, shape, pod, node)
        if kept is None:
            return None
        found, where = kept
        return found, self._score(state, shape, pod, node, found, where, self._pod_keys[1])

    def _kept_fit(self, state: int, shape: int, pod: PodRequest, node: NodeState) -> _Fit:
        """`fit`'s placement on a node that is not NUMA-aligned, and its number: kept."""
        shares = self._keys(pod)[0]  # first: it may start every table afresh
        key = self._place_key(state, shape, node) << _BITS | shares
        if key in self._fits:
            return self._fits[key]
        if len(self._fits) >= _LIMIT:
            self._fits.clear()
        kept = self._fits[key] = self._placed(shape, shares, pod, node)
        return kept

    def _placed(self, shape: int, shares: int, pod: PodRequest, node: NodeState) -> _Fit:
        """`share_devices(pod, node, None)` and its placement's number. A pod of one share
        container (numbered `shares`) gets the same assignment on every node of static shape
        `shape` whose room leads it to the same GPU, so that one is kept and handed out again."""
        if len(pod.shares) != 1:
            found = share_devices(pod, node, None)
            return None if found is None else (found, self._where(found))
        g = share_gpu(pod.shares, node)
        if g is None:
            return None
        key = (shape << _BITS | shares) << _BITS | g
        kept = self._on_gpu.get(key)
        if kept is None:
            if len(self._on_gpu) >= _LIMIT:
                self._on_gpu.clear()
            found = share_devices(pod, node, None)
            if found is None:  # unreachable: `share_gpu` found a GPU
                raise RuntimeError(f"node {node.name}: GPU {g} fits and no assignment")
            kept = self._on_gpu[key] = (found, self._where(found))
        return kept

    def scored(
        self, state: int, shape: int, pod: PodRequest, node: NodeState, found: Assignment
    ) -> tuple[Assignment, float]:
        """`found` (`pod`'s devices on `node`, in state `state` of static shape `shape`, from
        `fit`) and its weighted score (`scoring.total`)."""
        shares = self._keys(pod)[0]  # first: it may start every table afresh
        kept = self._fits.get(self._place_key(state, shape, node) << _BITS | shares)
        where = kept[1] if kept is not None and kept[0] is found else self._where(found)
        return found, self._score(state, shape, pod, node, found, where, self._pod_keys[1])

    def whole_score(
        self, state: int, shape: int, pod: PodRequest, node: NodeState, found: Assignment
    ) -> float:
        """`scoring.total(pod, node, found)` for a pod asking a GPU without share containers
        (whole GPUs, a `gpu_milli` share, MIG devices) on `node`, in state `state` of static
        shape `shape`: kept, like a share pod's, under what the scores read."""
        reads = self._keys(pod)[1]  # first: it may start every table afresh
        return self._score(state, shape, pod, node, found, self._where(found), reads)

    def cpu_pod_score(
        self, state: int, shape: int, pod: PodRequest, node: NodeState, found: Assignment
    ) -> float:
        """`scoring.total(pod, node, found)` for a pod without GPUs on `node`, which has GPUs
        (in state `state` of static shape `shape`), when the scoring is
        `memory_blind_on_gpu_nodes`: kept under what the scores read there, so the pods that
        differ only in the memory they ask share it."""
        reads = self._keys(pod)[2]  # first: it may start every table afresh
        return self._score(state, shape, pod, node, found, self._where(found), reads)

    def _score(
        self,
        state: int,
        shape: int,
        pod: PodRequest,
        node: NodeState,
        found: Assignment,
        where: int,
        reads: int,
    ) -> float:
        """The weighted score of `found` (numbered `where`) for a pod of whom the scores read
        what is numbered `reads`, kept under what the scores read."""
        score_key = (self._node_key(state, shape, node) << _BITS | reads) << _BITS | where
        score = self._scores.get(score_key)
        if score is None:
            if len(self._scores) >= _LIMIT:
                self._scores.clear()
            score = self._scores[score_key] = self._scoring.total(pod, node, found)
        return score

    def _place_key(self, state: int, shape: int, node: NodeState) -> int:
        """The number of what `place_shares` reads of `node` (in state `state`, of shape
        `shape`): its static shape and what each GPU has free (`shared_room`)."""
        found = self._place_keys.get(state)
        if found is None:
            if len(self._place_keys) >= _LIMIT:
                self._place_keys.clear()
            room = node.derive("shared room", shared_room)
            found = self._place_keys[state] = self._number(("room", shape, room))
        return found

    def _node_key(self, state: int, shape: int, node: NodeState) -> int:
        """The number of what the scores read of `node` (in state `state`, of shape `shape`)."""
        if not self._shipped:
            return self._number(("state", state))
        found = self._node_keys.get(state)
        if found is None:
            if len(self._node_keys) >= _LIMIT:
                self._node_keys.clear()
            label = node.labels.get(GPU_PRODUCT_LABEL)
            reads = node.derive("gpu pod scores", gpu_pod_node_reads)
            found = self._node_keys[state] = self._number(("node", shape, label, reads))
        return found

    def _where(self, found: Assignment) -> int:
        """The number of what scores read of `found`: each share's (GPU, milli, slots), its whole
        GPUs, MIG devices and NUMA node."""
        placed = tuple((s.gpu, s.milli, s.slots) for s in found.shares)
        return self._number((placed, found.gpus, found.mig, found.numa))

    def _keys(self, pod: PodRequest) -> tuple[int, int, int]:
        """The numbers of `pod`'s share containers, of what scores read of it, and of that
        without its memory (`cpu_pod_score`)."""
        if pod is not self._pod:
            if self._next >= _RENUMBER:
                self._restart()
            self._pod = pod
            if self._shipped:
                reads = self._number(score_reads(pod))
                blind = reads if pod.wants_gpu else self._number(score_reads(pod, memory=False))
            else:
                blind = reads = self._number(pod_class(pod, shares=False))
            self._pod_keys = (self._number(("placed", pod.shares, pod.share_reuse)), reads, blind)
        return self._pod_keys

    def _restart(self) -> None:
        """Every table afresh, numbers from 0 again."""
        self._fits.clear()
        self._on_gpu.clear()
        self._scores.clear()
        self._node_keys.clear()
        self._place_keys.clear()
        self._ids.clear()
        self._next = 0

    def _number(self, key: object) -> int:
        found = self._ids.get(key)
        if found is None:
            if len(self._ids) >= _LIMIT:  # new numbers only: a forgotten key never shares one
                self._ids.clear()
            found = self._ids[key] = self._next
            self._next += 1
        return found
