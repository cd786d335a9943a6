"""GPU model quotas in event mode (DESIGN §10 "Per GPU model"), as the runtime keeps them.

A pod is charged its plain amounts and the keys of its node's model the tree names; a unit is
placed off the models whose max its queue has reached, preferring the models it is within
guarantee on (`scheduler.quota.modelfilter`, shared with the runtime); a gang is admitted only if
its members together fit every model key (the root's capacity counts each model key on that
model's nodes: `scheduler.quota.capacity`). With no model key in the tree this costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from scheduler.placement import GPU_PRODUCT_LABEL, Assignment, PodRequest, Snapshot
from scheduler.quota import QuotaTree, Usage, add_into, admission_problem, request_amounts
from scheduler.quota.modelfilter import ModelFilter, ModelNodes, model_filter
from scheduler.quota.models import model_of_product, named_model_amounts

__all__ = ["ModelBudgets"]


class ModelBudgets:
    def __init__(self, tree: QuotaTree, usage: Usage, snapshot: Snapshot) -> None:
        self.tree, self.usage, self.snapshot = tree, usage, snapshot
        self.model_of = {
            name: model_of_product(node.labels.get(GPU_PRODUCT_LABEL, ""))
            for name, node in snapshot.nodes.items()
        }
        by_model: dict[str, set[str]] = {}
        for name, model in self.model_of.items():
            if model:
                by_model.setdefault(model, set()).add(name)
        self.nodes = ModelNodes(by_model)

    def amounts(self, pod: PodRequest, assignment: Assignment) -> dict[str, int]:
        """What `pod` placed by `assignment` is charged."""
        amounts = request_amounts(pod, assignment.shares)
        model = self.model_of.get(assignment.node, "")
        return amounts | named_model_amounts(amounts, model, self.tree)

    def filter(self, leaf: str, pods: Sequence[PodRequest]) -> ModelFilter:
        """The nodes a unit of `pods` in `leaf` may not use, and those it tries last."""
        if not self.tree.has_models:
            return ModelFilter()
        return model_filter(self.tree, self.usage, self.nodes, self.snapshot, leaf, pods)

    def gang_fits(
        self, leaf: str, pods: Sequence[PodRequest], where: Mapping[str, Assignment]
    ) -> bool:
        """Do a gang's members, placed at `where`, fit every model key on `leaf`'s path?"""
        if not self.tree.has_models or leaf not in self.tree.paths:
            return True
        extra: dict[str, int] = {}
        for pod in pods:
            assignment = where[pod.key]
            plain = request_amounts(pod, assignment.shares)
            model = self.model_of.get(assignment.node, "")
            add_into(extra, named_model_amounts(plain, model, self.tree))
        return not extra or admission_problem(self.tree, self.usage, leaf, extra) is None
