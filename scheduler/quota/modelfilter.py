"""Where quota meets placement: a model-keyed `max` filters that model's nodes, and a unit that
names no model prefers the models it is within guarantee on (DESIGN §10 "Per GPU model"). Pure:
the scheduler runtime and the simulator both filter through `model_filter`.

A unit's admission checks its plain keys; which model it will run on is known only once a node is
chosen. So before placing, every model whose keys the unit's GPUs would breach somewhere on its
path has its nodes excluded, as nodes held for others are; the unit may still start on another
model. A refusal then names the queue's breach for those nodes instead of "held". With no model
key in the tree nothing is computed.

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
    Decision,
    PodRequest,
    Snapshot,
    format_reasons,
)
from scheduler.placement.pick import REASON_HELD
from scheduler.quota.admission import admission_problem, guaranteed_models
from scheduler.quota.amounts import Amounts, add_into, request_amounts
from scheduler.quota.models import blocked_models
from scheduler.quota.tree import QuotaTree
from scheduler.quota.usage import Usage

__all__ = ["ModelFilter", "ModelNodes", "assigned", "model_filter"]

_Placed = TypeVar("_Placed", bound=Sequence[Any])
_Decided = TypeVar("_Decided")


class ModelNodes:
    """The known nodes of each GPU model (nodes without one left out), and the nodes of some
    models together, memoised: units are kept off or avoid one of few sets of models, and a
    decision must not pay for building a set of thousands of nodes. Rebuild when a node's model
    changes."""

    def __init__(self, by_model: Mapping[str, Iterable[str]]) -> None:
        self.by_model = {m: frozenset(nodes) for m, nodes in by_model.items()}
        self._unions: dict[frozenset[str], frozenset[str]] = {}

    def union(self, models: Iterable[str]) -> frozenset[str]:
        key = frozenset(models)
        found = self._unions.get(key)
        if found is None:
            found = frozenset().union(*(self.by_model[m] for m in key))
            self._unions[key] = found
        return found


@dataclass(frozen=True, slots=True)
class ModelFilter:
    """Nodes a unit may not use for its queue's model quotas, and why (model -> breach);
    `avoid`: nodes of the models it is not within guarantee on, tried last."""

    nodes: frozenset[str] = frozenset()
    breaches: Mapping[str, str] = field(default_factory=dict)
    by_model: Mapping[str, frozenset[str]] = field(default_factory=dict)
    avoid: frozenset[str] = frozenset()

    def decide(
        self,
        held: AbstractSet[str] | None,
        attempt: Callable[[AbstractSet[str] | None], _Decided],
        ok: Callable[[_Decided], bool],
    ) -> _Decided:
        """`attempt` (a placement off the nodes given) off the avoided nodes too while that is
        `ok`, else off the excluded ones only (`held` and this filter's)."""
        excluded = self.excluded(held)
        if self.avoid:
            first = attempt(self.avoid | (excluded or frozenset()))
            if ok(first):
                return first
        return attempt(excluded)

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


_NONE = ModelFilter()  # nothing filtered or avoided (frozen: one for every such decision)


def model_filter(
    tree: QuotaTree,
    usage: Usage,
    models: ModelNodes,
    snapshot: Snapshot,
    leaf: str,
    requests: Iterable[PodRequest],
) -> ModelFilter:
    """The filter for a unit of `requests` in `leaf` (each member alone: the largest decides);
    `models`: the known nodes by GPU model."""
    if not tree.has_models or leaf not in tree.paths:
        return _NONE
    requests = list(requests)
    asked = [request_amounts(request) for request in requests]
    demand = asked[0] if len(asked) == 1 else _largest(asked)
    near = _near_max(tree, usage, leaf, demand)
    breaches = (
        blocked_models(
            [m for m in models.by_model if m in near], demand, _checker(tree, usage, leaf)
        )
        if near
        else {}
    )
    avoid = _avoided(tree, usage, leaf, (requests, asked), models.by_model, breaches)
    if not breaches and not avoid:
        return _NONE
    nodes = models.union(breaches)
    by_model = {m: frozenset(n for n in models.by_model[m] if n in snapshot) for m in breaches}
    return ModelFilter(nodes, breaches, by_model, models.union(avoid))


def _largest(asked: Sequence[Amounts]) -> dict[str, int]:
    """Per resource, the most any member asks."""
    demand: dict[str, int] = {}
    for amounts in asked:
        for resource, amount in amounts.items():
            demand[resource] = max(demand.get(resource, 0), amount)
    return demand


def _near_max(tree: QuotaTree, usage: Usage, leaf: str, demand: Amounts) -> set[str]:
    """The models a model key's max on `leaf`'s path may keep `demand` off: those whose key
    there has less room left than the demand asks of its plain resource. A necessary test, so
    that most decisions ask `blocked_models` (which decides and words the breach) of no model."""
    near: set[str] = set()
    for queue in tree.paths[leaf]:
        limits = tree.model_maxes.get(queue)
        if limits:
            used = usage.used(queue)
            for model, key, resource, limit in limits:
                if used.get(key, 0) + demand.get(resource, 0) > limit:
                    near.add(model)
    return near


def _avoided(
    tree: QuotaTree,
    usage: Usage,
    leaf: str,
    unit: tuple[Sequence[PodRequest], Sequence[Amounts]],
    models: Mapping[str, AbstractSet[str]],
    blocked: Mapping[str, str],
) -> set[str]:
    """The models a unit (its requests and what each asks) that names none is not within
    guarantee on, when it is within guarantee on some (none when no min on its path names a
    model)."""
    requests, asked = unit
    named = not tree.model_min_queues.isdisjoint(tree.paths[leaf])
    if not named or any(r.gpu_models or GPU_PRODUCT_LABEL in r.node_selector for r in requests):
        return set()
    total: dict[str, int] = {}
    for amounts in asked:
        add_into(total, amounts)
    open_models = [m for m in models if m not in blocked]
    within = guaranteed_models(tree, usage, leaf, total, open_models)
    if not within or len(within) == len(open_models):
        return set()
    return {m for m in open_models if m not in within}


def assigned(decision: Decision) -> bool:
    """Did `decision` place the pod (`ModelFilter.decide`'s `ok` for a Placer's decision)?"""
    return decision.assignment is not None


def _checker(tree: QuotaTree, usage: Usage, leaf: str) -> Callable[[Amounts], str | None]:
    return lambda demand: admission_problem(tree, usage, leaf, demand)
