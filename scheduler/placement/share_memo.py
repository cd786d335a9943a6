"""What `VerdictMemo`'s pod classes of GPU shares have in common on one node state (DESIGN §12).

Share pods come in many classes: every (cpu, memory, `gpu-memory`, `gpu-compute`) combination is
one, and each class decides every changed shared node on its own. Two parts of that verdict are
the same for many classes on one node state, so `ShareMemo` keeps them per state id (ids are
never reused for another state, `NodeSlots`):

* where the pod's share containers go (`place_shares`): it reads only the share containers and
  the node's shared GPUs, not the pod's cpu or memory, so the classes that differ in those
  share it;
* the weighted score: score functions read a share pod's shares only through its assignment,
  as each share's GPU and milli-GPU (`placed_milli`, `chosen_gpu`), so classes asking different
  memory or compute that land on the same GPU with the same milli share it. The key is the pod
  class without its share containers, plus each placed share's (GPU, milli, slots).

Scores are dropped with the learners' version (the memo's caller says when); both tables are
bounded and start afresh when full. Not thread-safe, like the memo.
"""

from __future__ import annotations

from .class_verdicts import ClassKey, pod_class
from .gpushare import GpuShare
from .node import Assignment, NodeState
from .request import PodRequest
from .scores import Scoring
from .shares import place_shares

__all__ = ["ShareMemo"]

_LIMIT = 1 << 18  # entries per table before it starts afresh

_Placed = tuple[GpuShare, ...] | None


class ShareMemo:
    """Placements and scores of share pods per node state id, shared between pod classes."""

    def __init__(self, scoring: Scoring) -> None:
        self._scoring = scoring
        self._placed: dict[tuple[int, object, object], _Placed] = {}
        self._scores: dict[tuple[int, ClassKey, object], float] = {}

    def forget_scores(self) -> None:
        """What the learners know changed: every score is stale."""
        self._scores.clear()

    def placed(self, state: int, pod: PodRequest, node: NodeState) -> _Placed:
        """`place_shares(pod, node)` for `node` in state `state`."""
        key = (state, pod.shares, pod.share_reuse)
        if key in self._placed:
            return self._placed[key]
        if len(self._placed) >= _LIMIT:
            self._placed.clear()
        found = self._placed[key] = place_shares(pod, node)
        return found

    def score(self, state: int, pod: PodRequest, node: NodeState, assignment: Assignment) -> float:
        """`scoring.total(pod, node, assignment)` for `node` in state `state`."""
        placed = tuple((s.gpu, s.milli, s.slots) for s in assignment.shares)
        key = (state, pod_class(pod, shares=False), (placed, assignment.gpus, assignment.numa))
        found = self._scores.get(key)
        if found is None:
            if len(self._scores) >= _LIMIT:
                self._scores.clear()
            found = self._scores[key] = self._scoring.total(pod, node, assignment)
        return found
