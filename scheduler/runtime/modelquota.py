"""Where quota meets placement: a model-keyed `max` filters that model's nodes (DESIGN §10
"Per GPU model").

A unit's admission checks its plain keys (`QueueGate.problem`); which model it will run on is
known only once a node is chosen. So before placing, every model whose keys the unit's GPUs would
breach somewhere on its path has its nodes excluded, as nodes held for others are; the unit may
still start on another model. A refusal then names the queue's breach for those nodes instead of
"held". A gang is placed with each member's demand filtered this way, and then admitted only if
its members' summed demand per model fits (`gang_breach`, which also names the nodes of a model
beyond its budget, left out when the gang is tried again). With no model key in the tree nothing
is computed.

The exclusion is a per-call node mask: the Placer's verdict memo keeps per-node verdicts that do
not depend on budgets, so a cached verdict never outlives the budget it was made under.

Fungibility (§10): a unit that names no model takes free room on any model, preferring the
models it is within guarantee on. When a min on its path names a model and the unit is within
guarantee on some models but not all, the others' nodes are `avoid`ed in a first try
(`decide`, `place`); only when nothing fits there is it placed on any model. It reclaims on the
models it is within guarantee on only (the victim search's area).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, TypeVar

from scheduler.placement import (
    GPU_PRODUCT_LABEL,
    Assignment,
    Decision,
    Placer,
    PodRequest,
    Snapshot,
    format_reasons,
)
from scheduler.placement.pick import REASON_HELD
from scheduler.quota import (
    Amounts,
    QuotaTree,
    Usage,
    add_into,
    admission_problem,
    admission_problem_of,
    guaranteed_models,
    request_amounts,
)
from scheduler.quota.models import MODEL_SEP, blocked_models
from scheduler.runtime.queuebook import QueueBook

__all__ = ["ModelFilter", "gang_breach", "model_filter"]

_Placed = TypeVar("_Placed", bound=Sequence[Any])


@dataclass(frozen=True, slots=True)
class ModelFilter:
    """Nodes a unit may not use for its queue's model quotas, and why (model -> breach);
    `avoid`: nodes of the models it is not within guarantee on, tried last."""

    nodes: frozenset[str] = frozenset()
    breaches: Mapping[str, str] = field(default_factory=dict)
    by_model: Mapping[str, frozenset[str]] = field(default_factory=dict)
    avoid: frozenset[str] = frozenset()

    def decide(
        self, placer: Placer, request: PodRequest, held: AbstractSet[str] | None
    ) -> Decision:
        """`request` placed off the excluded nodes, off the avoided ones when it fits there."""
        excluded = self.excluded(held)
        if self.avoid:
            first = placer.decide(request, excluded=self.avoid | (excluded or frozenset()))
            if first.assignment is not None:
                return first
        return placer.decide(request, excluded=excluded)

    def place(
        self,
        excluded: AbstractSet[str] | None,
        attempt: Callable[[AbstractSet[str] | None], tuple[_Placed, str]],
        undo: Callable[[_Placed], object],
    ) -> tuple[_Placed, str]:
        """A gang's `attempt` off the avoided nodes too, then (anyone left out: `undo` what it
        placed) off `excluded` only."""
        if self.avoid:
            placed, left = attempt(self.avoid | (excluded or frozenset()))
            if placed and not left:
                return placed, left
            undo(placed)
        return attempt(excluded)

    def excluded(self, held: AbstractSet[str] | None) -> AbstractSet[str] | None:
        """`held` (nodes held for others) with this filter's nodes added."""
        if not self.nodes:
            return held
        return self.nodes | held if held else self.nodes

    def message(self, decision: Decision, held: AbstractSet[str] | None) -> str:
        """`decision`'s refusal with the filtered nodes counted under the queue's breach."""
        if not self.nodes or not decision.reasons:
            return self.explain(decision.message())
        reasons = dict(decision.reasons)
        for model, nodes in sorted(self.by_model.items()):
            counted = len(nodes - (held or frozenset()))
            if counted:
                reasons[REASON_HELD] = reasons.get(REASON_HELD, 0) - counted
                reasons[f"node(s) of GPU model {model} over quota ({self.breaches[model]})"] = (
                    counted
                )
        kept = {r: n for r, n in reasons.items() if n > 0}
        return format_reasons(decision.nodes_total, kept)

    def explain(self, message: str) -> str:
        """`message` (a gang's refusal) preceded by the breaches, when any."""
        if not self.breaches:
            return message
        return "; ".join([*(self.breaches[m] for m in sorted(self.breaches)), message])


def model_filter(
    book: QueueBook, snapshot: Snapshot, leaf: str, requests: Iterable[PodRequest]
) -> ModelFilter:
    """The filter for a unit of `requests` in `leaf` (each member alone: the largest decides)."""
    tree = book.tree
    if not tree.has_models or leaf not in tree.paths:
        return ModelFilter()
    requests = list(requests)
    demand: dict[str, int] = {}
    for request in requests:
        for resource, amount in request_amounts(request).items():
            demand[resource] = max(demand.get(resource, 0), amount)
    models = book.nodes_by_model()
    breaches = blocked_models(models, demand, _checker(tree, book.usage, leaf))
    avoid = _avoided(book, leaf, requests, models, set(breaches))
    if not breaches and not avoid:
        return ModelFilter()
    by_model = {m: frozenset(n for n in models[m] if n in snapshot) for m in breaches}
    nodes = frozenset().union(*by_model.values())
    return ModelFilter(nodes, breaches, by_model, frozenset(n for n in avoid if n in snapshot))


def _avoided(
    book: QueueBook,
    leaf: str,
    requests: Sequence[PodRequest],
    models: Mapping[str, set[str]],
    blocked: set[str],
) -> set[str]:
    """The nodes of the models a unit that names none is not within guarantee on, when it is
    within guarantee on some (none when no min on its path names a model)."""
    tree = book.tree
    named = any(MODEL_SEP in k for q in tree.paths[leaf] for k in tree.specs[q].min)
    if not named or any(r.gpu_models or GPU_PRODUCT_LABEL in r.node_selector for r in requests):
        return set()
    total: dict[str, int] = {}
    for request in requests:
        add_into(total, request_amounts(request))
    open_models = [m for m in models if m not in blocked]
    within = guaranteed_models(tree, book.usage, leaf, total, open_models)
    if not within or len(within) == len(open_models):
        return set()
    return {n for m in open_models if m not in within for n in models[m]}


def gang_breach(
    book: QueueBook, leaf: str, placed: Iterable[tuple[PodRequest, Assignment]]
) -> tuple[str, frozenset[str]] | None:
    """The first model key on `leaf`'s path the gang's placed members breach together, and the
    nodes of that model to leave out on the next try: those beyond what its budget holds (taken
    in the order the members were placed). None: the gang is admitted."""
    tree = book.tree
    if not tree.has_models or leaf not in tree.paths:
        return None
    by_node: dict[str, dict[str, int]] = {}
    for request, assignment in placed:
        amounts = request_amounts(request, assignment.shares)
        on_model = book.on_model(amounts, book.model_of(assignment.node))
        add_into(by_node.setdefault(assignment.node, {}), on_model)
    extra: dict[str, int] = {}
    for amounts in by_node.values():
        add_into(extra, amounts)
    before = _without(book.usage, extra)  # the placed members are assumed: charged already
    breach = admission_problem_of(tree, before, leaf, extra) if extra else None
    if breach is None:
        return None
    kept: dict[str, int] = {}
    over = set()
    for node, amounts in by_node.items():
        if admission_problem_of(tree, before, leaf, _summed(kept, amounts)):
            over.add(node)
        else:
            add_into(kept, amounts)
    return breach, frozenset(over)


def _without(usage: Usage, extra: Amounts) -> Callable[[str], Mapping[str, int]]:
    """What each queue on the gang's path used before its placed members were assumed."""

    def used_of(queue: str) -> Mapping[str, int]:
        out = dict(usage.used(queue))
        add_into(out, extra, -1)
        return out

    return used_of


def _summed(into: Mapping[str, int], extra: Mapping[str, int]) -> dict[str, int]:
    out = dict(into)
    add_into(out, extra)
    return out


def _checker(tree: QuotaTree, usage: Usage, leaf: str) -> Callable[[Amounts], str | None]:
    return lambda demand: admission_problem(tree, usage, leaf, demand)
