"""Where U may take victims (DESIGN §10 "Per GPU model", §11): a node mask for the search.

With no GPU model named in the queue tree, U reclaims anywhere once it is within its guarantee.
With model keys, a unit is within guarantee for model M when, at every level naming M, used_M +
request ≤ min_M (and its plain keys within theirs): it reclaims only on the nodes of the models
it is within guarantee on (nodes without a GPU model count as model ""). A unit whose pods
name models (their node selector or `gpuModels`) is judged on those models only: placement keeps
it off the others' nodes anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.placement import GPU_PRODUCT_LABEL, PodRequest, Snapshot
from scheduler.quota import Amounts, QuotaTree, Usage, guaranteed_models, within_guarantee
from scheduler.quota.models import model_of_product, models_named

__all__ = ["Area", "reclaim_area"]


@dataclass(frozen=True, slots=True)
class Area:
    """`within`: U may reclaim; `nodes`: only there (None: anywhere)."""

    within: bool
    nodes: frozenset[str] | None = None


def reclaim_area(
    tree: QuotaTree,
    usage: Usage,
    leaf: str,
    pods: Sequence[PodRequest],
    demand: Amounts,
    snapshot: Snapshot,
) -> Area:
    """Whether U (its `pods`, asking `demand` in all, in `leaf`) is within guarantee, and on
    which nodes."""
    if not tree.has_models:
        return Area(within_guarantee(tree, usage, leaf, demand))
    named = _named_models(pods)
    by_model: dict[str, list[str]] = {}
    for name, node in snapshot.nodes.items():
        model = model_of_product(node.labels.get(GPU_PRODUCT_LABEL, ""))
        if not named or model in named:
            by_model.setdefault(model, []).append(name)
    models = guaranteed_models(tree, usage, leaf, demand, by_model)
    if not models:
        return Area(False)
    if len(models) == len(by_model) and not named:
        return Area(True)
    return Area(True, frozenset(n for m in models for n in by_model[m]))


def _named_models(pods: Sequence[PodRequest]) -> frozenset[str]:
    """The models every pod of U may run on, when some pod names any (empty: any model)."""
    named: frozenset[str] | None = None
    for pod in pods:
        models = models_named(pod)
        if models:
            named = models if named is None else named & models
    return named or frozenset()
