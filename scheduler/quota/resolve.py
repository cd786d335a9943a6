"""Which queue a pod is in (DESIGN §10): its label or its PodGroup's, else the Queue serving its
namespace, else that namespace's ElasticQuota, else `default`. Pure."""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.quota.admission import queue_problem
from scheduler.quota.spec import DEFAULT_QUEUE, QUEUE_LABEL
from scheduler.quota.tree import QuotaTree

__all__ = ["resolve_queue"]


def resolve_queue(
    tree: QuotaTree,
    namespace: str,
    labels: Mapping[str, str],
    group_labels: Mapping[str, str] | None = None,
) -> tuple[str, str | None]:
    """(queue name, why the pod must wait whatever it asks, or None)."""
    named = labels.get(QUEUE_LABEL) or (group_labels or {}).get(QUEUE_LABEL)
    if not named:
        queue = tree.namespace_queue.get(namespace, DEFAULT_QUEUE)
        return queue, queue_problem(tree, queue)
    problem = queue_problem(tree, named)
    if problem is None:
        served = tree.specs[named].namespaces
        if served and namespace not in served:
            problem = (
                f"queue {named} does not serve namespace {namespace} "
                f"(its spec.namespaces: {', '.join(served)})"
            )
    return named, problem
