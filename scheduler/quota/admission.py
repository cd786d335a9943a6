"""Admission of one unit (a pod, or a gang's pending members summed) and whether it is within
its guarantee (DESIGN §10). Pure functions over the tree and the usage."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from scheduler.quota.amounts import Amounts, format_amount
from scheduler.quota.models import MODEL_SEP, model_amounts, model_resources
from scheduler.quota.spec import DEFAULT_QUEUE
from scheduler.quota.tree import QuotaTree
from scheduler.quota.usage import Usage

__all__ = [
    "admission_problem",
    "admission_problem_of",
    "guaranteed_models",
    "queue_problem",
    "within_guarantee",
]


def queue_problem(tree: QuotaTree, leaf: str) -> str | None:
    """Why nothing of `leaf` may start now whatever it asks: invalid, not a leaf, paused."""
    if leaf not in tree.specs:
        problem = tree.problems.get(leaf)
        return problem.message if problem else f"queue {leaf} does not exist"
    if not tree.is_leaf(leaf):
        return f"queue {leaf} is not a leaf queue (it has child queues)"
    paused = tree.paused(leaf)
    if paused is not None:
        return (
            "the scheduler is paused (queue root)"
            if paused == "root"
            else (f"queue {paused} is paused")
        )
    return None


def admission_problem(tree: QuotaTree, usage: Usage, leaf: str, demand: Amounts) -> str | None:
    """None when `demand` fits under every max on `leaf`'s path, else the first breach, e.g.
    `queue team-a: nvidia.com/gpu 14 used + 4 requested > max 16`."""
    return admission_problem_of(tree, usage.used, leaf, demand)


def admission_problem_of(
    tree: QuotaTree, used_of: Callable[[str], Mapping[str, int]], leaf: str, demand: Amounts
) -> str | None:
    """`admission_problem` against what `used_of(queue)` says each queue uses: the victim search
    asks it with the victims' usage taken out, without changing the shared `Usage`."""
    for queue in tree.paths[leaf]:
        limits = tree.specs[queue].max
        if not limits:
            continue
        used = used_of(queue)
        for resource, asked in demand.items():
            limit = limits.get(resource)
            if limit is not None and used.get(resource, 0) + asked > limit:
                return (
                    f"queue {queue}: {resource} {format_amount(resource, used.get(resource, 0))}"
                    f" used + {format_amount(resource, asked)} requested > max "
                    f"{format_amount(resource, limit)}"
                )
    return None


def within_guarantee(tree: QuotaTree, usage: Usage, leaf: str, demand: Amounts) -> bool:
    """Does `demand` ask for a resource with a min on its path, and fit under every such min?"""
    if leaf == DEFAULT_QUEUE or leaf not in tree.paths:
        return False
    levels = [(tree.specs[q].min, usage.used(q)) for q in tree.min_paths[leaf]]
    return _fit_mins(levels, demand) is True


def _fit_mins(
    levels: Iterable[tuple[Mapping[str, int], Mapping[str, int]]], asked: Amounts
) -> bool | None:
    """None when a key of `asked` does not fit under a level's (min, use); else whether a min
    names any key it asks (`within_guarantee` is both: fits and named)."""
    guarded = False
    for key, amount in asked.items():
        if amount <= 0:
            continue
        for mins, used in levels:
            low = mins.get(key)
            if low is not None:
                if used.get(key, 0) + amount > low:
                    return None
                guarded = True
    return guarded


def guaranteed_models(
    tree: QuotaTree, usage: Usage, leaf: str, demand: Amounts, models: Iterable[str]
) -> frozenset[str]:
    """The GPU models (of `models`; \"\" for nodes without one) on which `demand`, a unit that
    names no model, is within guarantee (DESIGN §10 "Per GPU model"): its plain keys and the
    model's keys under every min on the path that names them, and on a model a level's min does
    not name, the plain min less what the mins of the models it names still reserve (`min
    {gpu: 8, gpu@H100: 4}` holds 4 GPUs for H100s until they are used). The path is read once
    for all the models (`_Guards`), and the plain keys, the same on every model, checked once."""
    if leaf == DEFAULT_QUEUE or leaf not in tree.paths:
        return frozenset()
    guards = _Guards(tree, usage, leaf)
    plain: dict[str, int] = {}  # what no min names is free
    named: dict[str, int] = {}
    for key, amount in demand.items():
        if key in guards.keys:
            (named if MODEL_SEP in key else plain)[key] = amount
    fits = _fit_mins(guards.levels, plain)
    if fits is None:
        return frozenset()
    devices = model_resources(demand)  # what a model key counts, read once for all models
    within = []
    for model in models:
        asked = {**named, **model_amounts(devices, model)}  # its model keys: the rest of the ask
        own = False if guards.keys.isdisjoint(asked) else _fit_mins(guards.levels, asked)
        if own is not None and (fits or own) and not guards.reserved(plain, asked):
            within.append(model)
    return frozenset(within)


class _Guards:
    """The mins on a leaf's path and what each level uses, read once; `reserved` says whether an
    ask takes room a level's min reserves for another model."""

    def __init__(self, tree: QuotaTree, usage: Usage, leaf: str) -> None:
        self.levels: list[tuple[Mapping[str, int], Mapping[str, int]]] = []
        self.reserves: list[tuple[str, int, int, list[tuple[str, int]]]] = []
        self.keys = tree.min_keys[leaf]  # every key a min on the path names
        for queue in tree.min_paths[leaf]:
            used = usage.used(queue)
            self.levels.append((tree.specs[queue].min, used))
            for plain, low, named in tree.model_mins[queue]:
                rooms = [(key, max(0, m - used.get(key, 0))) for key, m in named]
                self.reserves.append((plain, low, used.get(plain, 0), rooms))

    def reserved(self, plain: Amounts, models: Amounts) -> bool:
        """Does an ask (its `plain` keys, and its `models` keys) take room a level's min
        reserves for the other models it names?"""
        for key, low, used, rooms in self.reserves:
            amount = plain.get(key)
            if amount is not None:
                held = 0
                for named, room in rooms:
                    if named not in models:
                        held += room
                if held and used + amount + held > low:
                    return True
        return False
