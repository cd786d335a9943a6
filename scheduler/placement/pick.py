"""One pod, one decision, the plain way: filter the snapshot's candidates, score the feasible ones.

`pick` is the reference the `Placer` (the decision API every caller uses) is tested against, and
the Placer's own path when the scoring has a candidate limit. Ranking is documented in `scores`:
(used-node tier, weighted score, lowest name). When no node fits, every node is filtered so
`Decision.reasons` counts each node's reason, as the stock scheduler's "0/N nodes are available:
..." does (`count_reasons`, shared with the memoised path). When a node is found, `reasons`
covers the nodes examined.

`VerdictCache` keeps each node's verdict for one pod shape until the snapshot says that node
changed, so pods of one shape in a row (a gang's members) are filtered and scored once per node;
the decisions are the same as without it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from .filters import filter_node
from .node import Assignment, NodeState
from .request import PodRequest
from .scores import Scoring
from .snapshot import Snapshot

__all__ = [
    "REASON_HELD",
    "REASON_OUTSIDE_DOMAIN",
    "Decision",
    "Rejection",
    "VerdictCache",
    "count_reasons",
    "format_reasons",
    "pick",
    "score_node",
]

REASON_OUTSIDE_DOMAIN = "node(s) outside the pod group's topology domain"
REASON_HELD = "node(s) held for another pod (nomination or starvation hold)"
_NO_REASONS: Mapping[str, int] = MappingProxyType({})

Rejection = Callable[[NodeState], tuple[str, ...]]
"""Why a node rejects the pod being decided (its filter reasons)."""


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


def count_reasons(
    nodes: Iterable[NodeState],
    allowed: AbstractSet[str] | None,
    rejection: Rejection,
    excluded: AbstractSet[str] | None = None,
    refused: Mapping[str, str] | None = None,
) -> dict[str, int]:
    """How many of `nodes` reject the pod for each reason: a node outside `allowed` because of
    the domain, one in `excluded` because it is held, any other for the reasons `rejection`
    gives, or else for its reason in `refused` (inter-pod rules, filtered after the rest)."""
    reasons: dict[str, int] = {}
    for node in nodes:
        if allowed is not None and node.name not in allowed:
            found: tuple[str, ...] = (REASON_OUTSIDE_DOMAIN,)
        elif excluded is not None and node.name in excluded:
            found = (REASON_HELD,)
        else:
            found = rejection(node)
            if not found and refused is not None and node.name in refused:
                found = (refused[node.name],)
        for reason in found:
            reasons[reason] = reasons.get(reason, 0) + 1
    return reasons


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
    cache: VerdictCache | None = None,
    excluded: AbstractSet[str] | None = None,
    refused: Mapping[str, str] | None = None,
    bonus: Mapping[str, float] | None = None,
) -> Decision:
    """The best node for `pod` among `allowed` (default: all nodes) but `excluded` (nodes held
    for other pods, DESIGN §11) and `refused` (nodes inter-pod rules refuse, with the reason:
    `interpod.refused_nodes`), each node's score raised by its `bonus` (the pod's inter-pod
    preferences: `interpod.preference_bonus`). The snapshot is not changed.

    When nothing fits and `explain` is set, every node is filtered for the reasons (O(nodes));
    without it the reasons cover only the candidates examined. Learning scores see the pod first
    (`Scoring.observe`), whether or not it fits. `cache`: verdicts kept for `snapshot` between
    calls (the same decisions).
    """
    total = len(snapshot)
    scoring.observe(pod, snapshot)
    reasons: dict[str, int] = {}
    verdicts = cache.verdicts(pod, scoring, snapshot) if cache is not None else None
    where = (allowed, excluded, refused, bonus)
    best = _best_candidate(pod, snapshot, scoring, where, reasons, verdicts)
    if best is not None:
        rank, _name, assignment = best
        return Decision(
            pod=pod.key, assignment=assignment, score=rank[1], reasons=reasons, nodes_total=total
        )
    if explain:
        reasons = count_reasons(
            snapshot.nodes.values(),
            allowed,
            lambda node: filter_node(pod, node).reasons,
            excluded,
            refused,
        )
    return Decision(pod=pod.key, assignment=None, reasons=reasons, nodes_total=total)


_Rank = tuple[bool, float]
_Best = tuple[_Rank, str, Assignment]
_Verdict = tuple[_Rank, Assignment | None, tuple[str, ...]]
_REJECTED: _Rank = (False, 0.0)
_Where = tuple[
    AbstractSet[str] | None,
    AbstractSet[str] | None,
    Mapping[str, str] | None,
    Mapping[str, float] | None,
]


class VerdictCache:
    """Each node's verdict (rank and assignment, or reasons) for one pod shape, on one snapshot.

    A node's verdict is dropped when the snapshot reports the node changed
    (`Snapshot.changed_since`). A pod of another shape (its request without key, pod group,
    inter-pod rules and preferences, which `pick` applies after the verdicts),
    another scoring or a learning score that refitted (`Learner.version`) starts afresh. Score
    functions must depend only on (pod, node, assignment) and what they learned.
    """

    def __init__(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        self._seen = snapshot.generation
        self._shape: tuple[PodRequest, Scoring, int] | None = None
        self._by_node: dict[str, _Verdict] = {}

    def verdicts(
        self, pod: PodRequest, scoring: Scoring, snapshot: Snapshot
    ) -> dict[str, _Verdict]:
        """The verdicts still valid for `pod`'s shape (a dict the caller fills)."""
        if snapshot is not self._snapshot:
            raise ValueError("VerdictCache: used with a snapshot other than its own")
        learned = sum(fn.version for fn in scoring.learners())
        shape = (
            replace(pod, key="", pod_group=None, inter_pod=None, preferences=None),
            scoring,
            learned,
        )
        changed = snapshot.changed_since(self._seen)
        self._seen = snapshot.generation
        if shape != self._shape or changed is None:
            self._shape, self._by_node = shape, {}
        else:
            for name in changed:
                self._by_node.pop(name, None)
        return self._by_node


def _best_candidate(
    pod: PodRequest,
    snapshot: Snapshot,
    scoring: Scoring,
    where: _Where,
    reasons: dict[str, int],
    verdicts: dict[str, _Verdict] | None,
) -> _Best | None:
    """Rank candidates by (used-node tier, score and bonus), lowest name on ties; count the
    rejections. `where`: (allowed, excluded, refused nodes, bonus per node)."""
    best: _Best | None = None
    feasible = 0
    limit = scoring.candidate_limit
    allowed, excluded, refused, bonus = where
    for node in snapshot.candidates(pod, allowed):
        if excluded is not None and node.name in excluded:
            reasons[REASON_HELD] = reasons.get(REASON_HELD, 0) + 1
            continue
        verdict = verdicts.get(node.name) if verdicts is not None else None
        if verdict is None and refused is not None and node.name in refused:
            # refused whatever its score: filtered only, for the reason shown first
            verdict = (_REJECTED, None, filter_node(pod, node).reasons or (refused[node.name],))
        elif verdict is None:
            verdict = _verdict(pod, node, scoring)
            if verdicts is not None:
                verdicts[node.name] = verdict
        rank, assignment, rejected = verdict
        if assignment is not None and refused is not None and node.name in refused:
            assignment, rejected = None, (refused[node.name],)
        if assignment is None:
            for reason in rejected:
                reasons[reason] = reasons.get(reason, 0) + 1
            continue
        if bonus:
            rank = (rank[0], rank[1] + bonus.get(node.name, 0.0))
        if best is None or rank > best[0] or (rank == best[0] and node.name < best[1]):
            best = (rank, node.name, assignment)
        feasible += 1
        if limit and feasible >= limit:
            break
    return best


def _verdict(pod: PodRequest, node: NodeState, scoring: Scoring) -> _Verdict:
    fit = filter_node(pod, node)
    if fit.assignment is None:
        return _REJECTED, None, fit.reasons
    tiered = scoring.prefer_used_nodes and pod.wants_gpu and node.gpu_used()
    return (tiered, scoring.total(pod, node, fit.assignment)), fit.assignment, ()
