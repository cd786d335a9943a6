"""Each node's last verdict per claim shape, kept while nothing it read has changed.

A verdict (`Fit`: the picks and the node's rank, or `NO_FIT`) reads the node's devices
and GPUs (fixed objects), what `Usage` holds of the node's pools (`Usage.versions`: a fresh token
per change, so copies of a `Usage` never share a token for different contents), and, to rank,
what the shipped scores read of the node's `NodeState` (`gpu_pod_node_reads`) and the learning
scores' versions. The key holds all of those; a hit must also be for the same node objects. With
scores that are not all shipped, verdicts are not kept (what they read is unknown).
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.placement import Scoring
from scheduler.placement.scores import gpu_pod_node_reads

from .decision import ClaimNode
from .search import Pick
from .usage import Usage

__all__ = ["NO_FIT", "Fit", "Verdicts"]

_MEMO_LIMIT = 100_000


@dataclass(frozen=True, slots=True)
class Fit:
    """The picks on a node and its rank there: (used node first, score); larger wins."""

    picks: tuple[Pick, ...]
    rank: tuple[bool, float]
    fits: bool = True


NO_FIT = Fit((), (False, 0.0), fits=False)
"""The verdict of a node where the claims do not fit."""


class Verdicts:
    def __init__(self, scoring: Scoring) -> None:
        self._learners = scoring.learners()
        self._shipped = scoring.shipped
        self._memo: dict[tuple[object, ...], tuple[ClaimNode, Fit]] = {}

    def _key(
        self, node: ClaimNode, shape: tuple[str, ...], usage: Usage
    ) -> tuple[object, ...] | None:
        state = node.state
        if state is not None and not self._shipped:
            return None
        reads = None if state is None else gpu_pod_node_reads(state)
        learned = tuple(fn.version for fn in self._learners)
        tokens = tuple(usage.versions.get(p) for p in node.devices.pools)
        return node.name, shape, tokens, reads, learned

    def get(self, node: ClaimNode, shape: tuple[str, ...], usage: Usage) -> Fit | None:
        """The kept verdict, or None when there is none."""
        key = self._key(node, shape, usage)
        hit = None if key is None else self._memo.get(key)
        if hit is None or hit[0] is not node:
            return None
        return hit[1]

    def put(self, node: ClaimNode, shape: tuple[str, ...], usage: Usage, fit: Fit) -> None:
        key = self._key(node, shape, usage)
        if key is None:
            return
        if len(self._memo) >= _MEMO_LIMIT:
            self._memo.clear()
        self._memo[key] = (node, fit)
