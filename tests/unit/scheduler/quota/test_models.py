"""Quota keys per GPU model (DESIGN §10 "Per GPU model"): the key form, the product a node's
label stands for, validation, and property tests on random trees with model keys."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.placement import Snapshot
from scheduler.quota import (
    QuotaTree,
    Usage,
    admission_problem,
    admission_problem_of,
    guaranteed_models,
    read_queue,
    request_amounts,
    within_guarantee,
)
from scheduler.quota.modelfilter import ModelNodes, model_filter
from scheduler.quota.models import blocked_models, check_key, model_amounts, model_of_product
from tests.builders.placement import pod

GPU = "nvidia.com/gpu"
G = 1000
MODELS = ("H100", "T4")


def queue(name: str, **spec: Any) -> Any:
    return read_queue({"metadata": {"name": name}, "spec": spec})


@pytest.mark.parametrize(
    ("label", "model"),
    [
        ("NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-80GB-HBM3"),
        ("NVIDIA-H100-80GB-HBM3-SHARED", "NVIDIA-H100-80GB-HBM3"),
        ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "NVIDIA-A100-SXM4-40GB"),
        ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED", "NVIDIA-A100-SXM4-40GB"),
        ("", ""),
    ],
)
def test_a_nodes_product_label_names_its_model_without_sharing_or_mig(label, model) -> None:
    assert model_of_product(label) == model


@pytest.mark.parametrize(
    "key",
    ["nvidia.com/gpu@H100", "nvidia.com/mig-1g.10gb@NVIDIA-A100", "cpu", "nvidia.com/gpu"],
)
def test_gpu_and_mig_keys_may_name_a_model(key) -> None:
    check_key(key)


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("cpu@H100", "only nvidia.com/gpu and nvidia.com/mig-*"),
        ("nvidia.com/gpu@", "not a valid label value"),
        ("nvidia.com/gpu@bad model", "not a valid label value"),
        ("nvidia.com/gpu@-H100", "not a valid label value"),
    ],
)
def test_a_malformed_model_key_makes_the_queue_invalid_naming_it(key, why) -> None:
    with pytest.raises(ValueError, match=why):
        check_key(key)
    spec = queue("q", max={key: 4})
    assert why in spec.problem
    assert f"spec.max[{key}]" in spec.problem
    assert "q" in QuotaTree.build([spec]).problems


def test_a_model_min_above_the_plain_min_is_invalid_and_within_it_is_fine() -> None:
    assert "above spec.min[nvidia.com/gpu]" in queue("q", min={GPU: 2, f"{GPU}@H100": 4}).problem
    assert (
        "above spec.max[nvidia.com/gpu]" in queue("q", min={f"{GPU}@H100": 4}, max={GPU: 2}).problem
    )
    fine = queue("q", min={GPU: 8, f"{GPU}@H100": 4}, max={f"{GPU}@T4": "1500m"})
    assert not fine.problem
    assert fine.min[f"{GPU}@H100"] == 4 * G
    assert fine.max[f"{GPU}@T4"] == 1500


def test_a_model_max_blocks_only_that_model_with_the_queues_numbers() -> None:
    tree = QuotaTree.build([queue("a", max={f"{GPU}@H100": 8})])
    usage = Usage(tree)
    usage.charge("p", ("a", {GPU: 8 * G, f"{GPU}@H100": 8 * G}))
    blocked = blocked_models(
        MODELS, {GPU: G}, lambda demand: admission_problem(tree, usage, "a", demand)
    )
    assert blocked == {"H100": "queue a: nvidia.com/gpu@H100 8 used + 1 requested > max 8"}
    assert model_amounts({GPU: G, "cpu": 500}, "T4") == {f"{GPU}@T4": G}
    assert model_amounts({GPU: G}, "") == {}


# -- properties --------------------------------------------------------------------------------

amount = st.integers(min_value=0, max_value=12)


@st.composite
def model_trees(draw: st.DrawFn) -> QuotaTree:
    """`org` over leaves `x` and `y`; every key's min <= its max, a plain min >= its models' mins
    summed, and `org`'s max >= the mins of its children (guarantees the tree can keep)."""
    keys = [GPU, *(f"{GPU}@{m}" for m in MODELS)]
    leaves = []
    total_min: dict[str, int] = {}
    for name in ("x", "y"):
        low = {k: draw(amount) for k in keys if draw(st.booleans())}
        if len(low) > 1 or GPU not in low:  # the plain min holds its models' mins
            low[GPU] = max(low.get(GPU, 0), sum(v for k, v in low.items() if k != GPU))
        high = {k: low.get(k, 0) + draw(amount) for k in keys if draw(st.booleans())}
        for k, v in low.items():
            total_min[k] = total_min.get(k, 0) + v
        leaves.append(queue(name, parent="org", min=low, max=high))
    org_max = {k: total_min.get(k, 0) + draw(amount) for k in keys if draw(st.booleans())}
    tree = QuotaTree.build([queue("org", max=org_max), *leaves])
    assert set(tree.specs) >= {"org", "x", "y"}, tree.problems
    return tree


steps = st.lists(
    st.tuples(st.sampled_from(["x", "y", "leave"]), st.integers(1, 3), st.sampled_from(MODELS)),
    max_size=40,
)


def _reclaimed(tree: QuotaTree, usage: Usage, leaf: str) -> Any:
    """What each queue would use once the other leaves gave back what they borrow (reclaim)."""
    others = [q for q in ("x", "y") if q != leaf]

    def used_of(queue: str) -> dict[str, int]:
        used = dict(usage.used(queue))
        if queue == leaf:
            return used
        for other in others if queue == "org" else ():
            low = tree.specs[other].min
            for k, v in usage.used(other).items():
                used[k] -= max(0, v - low.get(k, 0))
        return used

    return used_of


def _arrive(tree: QuotaTree, usage: Usage, n: int, step: tuple[str, int, str]) -> bool:
    """One unit of `step` arrives: it starts on its model, else on another one with room."""
    leaf, gpus, preferred = step
    demand = {GPU: gpus * G}
    on_model = demand | model_amounts(demand, preferred)
    reclaimed = _reclaimed(tree, usage, leaf)
    if within_guarantee(tree, usage, leaf, demand):
        assert admission_problem_of(tree, reclaimed, leaf, demand) is None
    named = any(f"{GPU}@{preferred}" in tree.specs[q].min for q in tree.paths[leaf])
    if named and within_guarantee(tree, usage, leaf, on_model):  # within guarantee for its model
        assert admission_problem_of(tree, reclaimed, leaf, on_model) is None
    if admission_problem(tree, usage, leaf, demand) is not None:
        return False
    blocked = blocked_models(MODELS, demand, lambda d: admission_problem(tree, usage, leaf, d))
    allowed = [m for m in (preferred, *MODELS) if m not in blocked]
    if allowed:
        usage.charge(n, (leaf, demand | model_amounts(demand, allowed[0])))
    return bool(allowed)


@settings(max_examples=80, deadline=None)
@given(model_trees(), steps)
def test_no_model_max_is_exceeded_and_guarantees_are_never_refused(tree, script) -> None:
    """After every arrival and departure no max (plain or per model) is exceeded at any level;
    a unit within its guarantee is never refused for quota once others' borrowing is reclaimed."""
    usage = Usage(tree)
    running: list[int] = []
    for n, (leaf, gpus, preferred) in enumerate(script):
        if leaf == "leave":
            if running:
                usage.charge(running.pop(gpus % len(running)), None)
        elif _arrive(tree, usage, n, (leaf, gpus, preferred)):
            running.append(n)
        for queue_name, spec in tree.specs.items():
            used = usage.used(queue_name)
            assert all(used.get(k, 0) <= v for k, v in spec.max.items()), (queue_name, used)


# -- which models a unit that names none is within guarantee on ---------------------------------
def _guaranteed(spec: dict[str, int], used: dict[str, int], gpus: int) -> frozenset[str]:
    """Min `spec` and usage `used` in GPUs; `gpus`: what the unit asks."""
    tree = QuotaTree.build([read_queue({"metadata": {"name": "a"}, "spec": {"min": spec}})])
    usage = Usage(tree)
    if used:
        usage.charge("running", ("a", {k: v * G for k, v in used.items()}))
    return guaranteed_models(tree, usage, "a", {GPU: gpus * G}, ("H100", "T4", ""))


@pytest.mark.parametrize(
    ("spec", "used", "gpus", "models"),
    [
        pytest.param({GPU: 8}, {}, 1, {"H100", "T4", ""}, id="a plain min: every model"),
        pytest.param({f"{GPU}@H100": 4}, {}, 1, {"H100"}, id="a model min alone: that model"),
        pytest.param(
            {GPU: 8, f"{GPU}@H100": 8}, {}, 1, {"H100"}, id="8 of 8 on H100s: none left for T4s"
        ),
        pytest.param(
            {GPU: 8, f"{GPU}@H100": 4}, {}, 4, {"H100", "T4", ""}, id="8 of 4 on H100s: 4 T4s"
        ),
        pytest.param({GPU: 8, f"{GPU}@H100": 4}, {}, 5, set(), id="5 GPUs: 4 on H100, 4 others"),
        pytest.param(
            {GPU: 8, f"{GPU}@H100": 4},
            {GPU: 4},
            1,
            {"H100"},
            id="4 running elsewhere: the rest is H100s' reserve",
        ),
        pytest.param(
            {GPU: 8, f"{GPU}@H100": 4},
            {GPU: 4, f"{GPU}@H100": 4},
            4,
            {"T4", ""},
            id="H100s' min used: the rest on any model but H100",
        ),
    ],
)
def test_guaranteed_models(
    spec: dict[str, int], used: dict[str, int], gpus: int, models: set[str]
) -> None:
    assert _guaranteed(spec, used, gpus) == models


def _by_definition(tree: QuotaTree, usage: Usage, leaf: str, gpus: int, model: str) -> bool:
    """§10 read literally for one model: within guarantee with the model's key, and at no level
    more than the plain min less what the other models' mins there still reserve."""
    demand = {GPU: gpus * G}
    asked = demand | model_amounts(demand, model)
    if not within_guarantee(tree, usage, leaf, asked):
        return False
    for q in tree.paths[leaf]:
        low, used = tree.specs[q].min, usage.used(q)
        others = [k for k in low if k.startswith(f"{GPU}@") and k not in asked]
        held = sum(max(0, low[k] - used.get(k, 0)) for k in others)
        if GPU in low and held and used.get(GPU, 0) + gpus * G + held > low[GPU]:
            return False
    return True


def _run_step(usage: Usage, n: int, step: tuple[str, int, str]) -> None:
    """Step `n` of a script: a unit starts on its model, or (`leave`) the one `amount` steps
    back finishes."""
    at, amount, model = step
    if at == "leave":
        usage.charge(n - amount, None)
    else:
        demand = {GPU: amount * G}
        usage.charge(n, (at, demand | model_amounts(demand, model)))


@settings(max_examples=80, deadline=None)
@given(model_trees(), steps, st.sampled_from(["x", "y"]), st.integers(1, 6))
def test_the_models_within_guarantee_are_each_models_own_answer(tree, script, leaf, gpus) -> None:
    """Asked for all models at once (the path read once for all), the answer is each model's as
    the definition gives it, after any arrivals and departures."""
    usage = Usage(tree)
    for n, step in enumerate(script):
        _run_step(usage, n, step)
        everyone = guaranteed_models(tree, usage, leaf, {GPU: gpus * G}, (*MODELS, ""))
        expected = {m for m in (*MODELS, "") if _by_definition(tree, usage, leaf, gpus, m)}
        assert everyone == expected


@settings(max_examples=80, deadline=None)
@given(model_trees(), steps, st.sampled_from(["x", "y"]), st.integers(1, 6))
def test_the_model_filter_keeps_a_unit_off_exactly_the_models_it_would_breach(
    tree, script, leaf, gpus
) -> None:
    """The filter asks `blocked_models` only of the models a max on the path may stop (a
    necessary test first): what it keeps the unit off is what asking every model gives."""
    usage = Usage(tree)
    nodes = ModelNodes({m: [f"{m.lower()}-{i}" for i in range(2)] for m in MODELS})
    for n, step in enumerate(script):
        _run_step(usage, n, step)
        unit = pod(f"default/u{n}", gpus=gpus)
        found = model_filter(tree, usage, nodes, Snapshot(), leaf, [unit])
        asked = request_amounts(unit)
        every = blocked_models(MODELS, asked, lambda d: admission_problem(tree, usage, leaf, d))
        assert found.breaches == every
        assert found.nodes == nodes.union(every)
