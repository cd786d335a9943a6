"""One pod, one decision: filter the snapshot's candidates, score the feasible ones, pick the best.

Ranking is documented in `scores`: (used-node tier, weighted score, lowest name). When no node fits,
every node is filtered so `Decision.reasons` counts each node's reason, as the stock scheduler's
"0/N nodes are available: ..." does. When a node is found, `reasons` covers the nodes examined.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from types import MappingProxyType

from .filters import filter_node
from .node import Assignment, NodeState
from .request import PodRequest
from .scores import Scoring
from .snapshot import Snapshot

__all__ = ["REASON_OUTSIDE_DOMAIN", "Decision", "format_reasons", "pick", "score_node"]

REASON_OUTSIDE_DOMAIN = "node(s) outside the pod group's topology domain"
_NO_REASONS: Mapping[str, int] = MappingProxyType({})


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """The outcome for one pod: an assignment (node and devices) or None, with rejection counts."""

    pod: str
    assignment: Assignment | None
    score: float = 0.0
    reasons: Mapping[str, int] = field(default_factory=lambda: _NO_REASONS)
    nodes_total: int = 0

    @property
    def node(self) -> str | None:
        return None if self.assignment is None else self.assignment.node

    def message(self) -> str:
        """`0/12 nodes are available: 4 node(s) had untolerated taint {...}, 8 Insufficient ...`."""
        return format_reasons(self.nodes_total, self.reasons)


def format_reasons(nodes_total: int, reasons: Mapping[str, int]) -> str:
    """The stock FitError text: count-prefixed reasons, sorted as strings, joined by ", "."""
    parts = sorted(f"{count} {reason}" for reason, count in reasons.items())
    return f"0/{nodes_total} nodes are available: {', '.join(parts)}."


def score_node(pod: PodRequest, node: NodeState, assignment: Assignment, scoring: Scoring) -> float:
    """The weighted score of `pod` on `node` with `assignment` (node state before the pod)."""
    return scoring.total(pod, node, assignment)


def pick(
    pod: PodRequest,
    snapshot: Snapshot,
    scoring: Scoring,
    *,
    allowed: AbstractSet[str] | None = None,
    explain: bool = True,
) -> Decision:
    """The best node for `pod` among `allowed` (default: all nodes). The snapshot is not changed.

    When nothing fits and `explain` is set, every node is filtered for the reasons (O(nodes));
    without it the reasons cover only the candidates examined.
    """
    total = len(snapshot)
    if pod.unsupported:
        return Decision(
            pod=pod.key,
            assignment=None,
            reasons={f"unsupported: {pod.unsupported}": total},
            nodes_total=total,
        )
    reasons: dict[str, int] = {}
    best = _best_candidate(pod, snapshot, scoring, allowed, reasons)
    if best is not None:
        rank, _name, assignment = best
        return Decision(
            pod=pod.key, assignment=assignment, score=rank[1], reasons=reasons, nodes_total=total
        )
    if explain:
        reasons = _all_reasons(pod, snapshot, allowed)
    return Decision(pod=pod.key, assignment=None, reasons=reasons, nodes_total=total)


_Best = tuple[tuple[bool, float], str, Assignment]


def _best_candidate(
    pod: PodRequest,
    snapshot: Snapshot,
    scoring: Scoring,
    allowed: AbstractSet[str] | None,
    reasons: dict[str, int],
) -> _Best | None:
    """Rank candidates by (used-node tier, score), lowest name on ties; count the rejections."""
    best: _Best | None = None
    feasible = 0
    limit = scoring.candidate_limit
    tiered = scoring.prefer_used_nodes and pod.wants_gpu
    for node in snapshot.candidates(pod, allowed):
        fit = filter_node(pod, node)
        if fit.assignment is None:
            for reason in fit.reasons:
                reasons[reason] = reasons.get(reason, 0) + 1
            continue
        rank = (tiered and node.gpu_used(), scoring.total(pod, node, fit.assignment))
        if best is None or rank > best[0] or (rank == best[0] and node.name < best[1]):
            best = (rank, node.name, fit.assignment)
        feasible += 1
        if limit and feasible >= limit:
            break
    return best


def _all_reasons(
    pod: PodRequest, snapshot: Snapshot, allowed: AbstractSet[str] | None
) -> dict[str, int]:
    reasons: dict[str, int] = {}
    for name, node in snapshot.nodes.items():
        if allowed is not None and name not in allowed:
            found: tuple[str, ...] = (REASON_OUTSIDE_DOMAIN,)
        else:
            found = filter_node(pod, node).reasons
        for reason in found:
            reasons[reason] = reasons.get(reason, 0) + 1
    return reasons
