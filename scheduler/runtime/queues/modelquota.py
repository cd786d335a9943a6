"""Where quota meets placement in the runtime (DESIGN §10 "Per GPU model"): the pure model
filter (`scheduler.quota.modelfilter`) over the queue book's nodes by model, and a gang's
admission per model.

A gang is placed with each member's demand filtered, and then admitted only if its members'
summed demand per model fits (`gang_breach`, which also names the nodes of a model beyond its
budget, left out when the gang is tried again). With no model key in the tree nothing is
computed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from scheduler.placement import Assignment, PodRequest, Snapshot
from scheduler.quota import Amounts, Usage, add_into, admission_problem_of, request_amounts
from scheduler.quota.modelfilter import ModelFilter
from scheduler.quota.modelfilter import model_filter as pure_model_filter
from scheduler.runtime.cluster.queuebook import QueueBook

__all__ = ["ModelFilter", "gang_breach", "model_filter"]


def model_filter(
    book: QueueBook, snapshot: Snapshot, leaf: str, requests: Iterable[PodRequest]
) -> ModelFilter:
    """The filter for a unit of `requests` in `leaf`, over the book's nodes by model."""
    if not book.tree.has_models:
        return ModelFilter()
    return pure_model_filter(book.tree, book.usage, book.model_nodes(), snapshot, leaf, requests)


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
