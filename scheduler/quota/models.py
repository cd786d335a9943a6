"""Quota keys per GPU model (DESIGN §10 "Per GPU model").

A `min` or `max` key may name one GPU model: `nvidia.com/gpu@<product>` (MIG resources
likewise, `nvidia.com/mig-1g.10gb@<product>`), `<product>` being the node's
`nvidia.com/gpu.product` label value less a trailing `-SHARED` and then a trailing
`-MIG-<profile>`. A model key counts inside its plain key: a pod on a node of model M is charged
its GPUs (and shares) under the plain key and under the key of M, so a model `max` steers
placement away from M's nodes once it is reached (`blocked_models`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from typing import Protocol

from agent.resource_names import (
    GPU_RESOURCE,
    MIG_RESOURCE_PREFIX,
    MODEL_SEP,
    model_key,
    model_key_problem,
)
from scheduler.placement import GPU_PRODUCT_LABEL, PodRequest

__all__ = [
    "MODEL_SEP",
    "base_of",
    "blocked_models",
    "check_key",
    "has_model_keys",
    "model_amounts",
    "model_key",
    "model_of_product",
    "model_resources",
    "models_named",
    "named_model_amounts",
]


class Named(Protocol):
    """What `named_model_amounts` reads of a queue tree (`QuotaTree`)."""

    @property
    def has_models(self) -> bool: ...

    @property
    def managed(self) -> AbstractSet[str]: ...


_MIG_SUFFIX = re.compile(r"-MIG-[A-Za-z0-9.+]+$")
_SHARED_SUFFIX = "-SHARED"


def _takes_model(resource: str) -> bool:
    return resource == GPU_RESOURCE or resource.startswith(MIG_RESOURCE_PREFIX)


def base_of(key: str) -> str:
    """The plain resource of a quota key (`nvidia.com/gpu@X` -> `nvidia.com/gpu`)."""
    return key.split(MODEL_SEP, 1)[0]


def check_key(key: str) -> None:
    """ValueError when `key` names a model wrongly (a plain key always passes); the rule is
    `agent.resource_names.MODEL_KEY_PATTERN`, the Queue CRD's too."""
    problem = model_key_problem(key)
    if problem is not None:
        raise ValueError(problem)


def model_of_product(product: str) -> str:
    """The model a node's `nvidia.com/gpu.product` value stands for ("" when none)."""
    if product.endswith(_SHARED_SUFFIX):
        product = product[: -len(_SHARED_SUFFIX)]
    return _MIG_SUFFIX.sub("", product)


def models_named(request: PodRequest) -> frozenset[str]:
    """The GPU models a pod may run on, when it names any (`gpuModels`, or its node selector on
    `nvidia.com/gpu.product`); empty: any model."""
    products = set(request.gpu_models)
    selected = request.node_selector.get(GPU_PRODUCT_LABEL)
    if selected is not None:
        products.add(selected)
    return frozenset(model_of_product(p) for p in products)


def has_model_keys(keys: Iterable[str]) -> bool:
    return any(MODEL_SEP in key for key in keys)


def model_resources(amounts: Mapping[str, int]) -> dict[str, int]:
    """What of `amounts` a model key counts: its GPUs and MIG devices (non-zero)."""
    return {r: q for r, q in amounts.items() if q and _takes_model(r)}


def model_amounts(amounts: Mapping[str, int], model: str) -> dict[str, int]:
    """The model keys `amounts` adds when placed on a node of `model` (none without a model)."""
    if not model:
        return {}
    return {model_key(r, model): q for r, q in amounts.items() if q and _takes_model(r)}


def named_model_amounts(amounts: Mapping[str, int], model: str, tree: Named) -> dict[str, int]:
    """The model keys `tree` names (its managed resources) that `amounts` adds on `model`."""
    if not tree.has_models:
        return {}
    return {k: v for k, v in model_amounts(amounts, model).items() if k in tree.managed}


def blocked_models(
    models: Iterable[str],
    demand: Mapping[str, int],
    problem_of: Callable[[Mapping[str, int]], str | None],
) -> dict[str, str]:
    """The models whose keys `demand` would breach, each with the breach (`problem_of` is the
    admission check of the unit's path, e.g. `admission_problem` bound to the tree and usage)."""
    out: dict[str, str] = {}
    for model in models:
        extra = model_amounts(demand, model)
        if extra:
            breach = problem_of(extra)
            if breach is not None:
                out[model] = breach
    return out
