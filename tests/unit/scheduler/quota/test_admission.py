"""Admission, within-guarantee, the order across queues and fair share; property tests on random
trees and arrival orders (DESIGN §10)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.quota import (
    QueueOrder,
    QuotaTree,
    Usage,
    admission_problem,
    choose_leaf,
    fair_shares,
    queue_problem,
    read_queue,
    within_guarantee,
)

GPU = "nvidia.com/gpu"
G = 1000  # one GPU in quota units


def queue(name: str, **spec: Any) -> Any:
    return read_queue({"metadata": {"name": name}, "spec": spec})


def two_teams() -> QuotaTree:
    return QuotaTree.build(
        [
            queue("a", min={GPU: 8}, max={GPU: 16}),
            queue("b", min={GPU: 8}, max={GPU: 16}),
            queue("c", max={GPU: 4}),
        ]
    )


def test_max_is_checked_with_the_numbers_in_the_reason() -> None:
    tree = two_teams()
    usage = Usage(tree)
    usage.charge("p", ("a", {GPU: 14 * G}))
    assert admission_problem(tree, usage, "a", {GPU: 2 * G}) is None
    assert (
        admission_problem(tree, usage, "a", {GPU: 4 * G})
        == "queue a: nvidia.com/gpu 14 used + 4 requested > max 16"
    )
    assert admission_problem(tree, usage, "c", {GPU: 5 * G}) is not None


def test_a_hierarchy_caps_its_children_together() -> None:
    tree = QuotaTree.build(
        [
            queue("org", max={GPU: 12}),
            queue("x", parent="org", max={GPU: 10}),
            queue("y", parent="org", max={GPU: 10}),
        ]
    )
    usage = Usage(tree)
    usage.charge("p", ("x", {GPU: 10 * G}))
    assert usage.used("org") == {GPU: 10 * G}
    assert admission_problem(tree, usage, "y", {GPU: 2 * G}) is None
    assert "queue org:" in str(admission_problem(tree, usage, "y", {GPU: 3 * G}))
    usage.charge("p", None)
    assert usage.used("org") == {}


def test_within_guarantee_needs_a_min_on_the_path_and_room_under_it() -> None:
    tree = two_teams()
    usage = Usage(tree)
    assert within_guarantee(tree, usage, "b", {GPU: 8 * G})
    assert not within_guarantee(tree, usage, "b", {GPU: 9 * G})
    assert not within_guarantee(tree, usage, "c", {GPU: G})  # no min
    assert not within_guarantee(tree, usage, "default", {GPU: G})
    assert not within_guarantee(tree, usage, "b", {"cpu": 1000})  # asks for nothing guaranteed


def test_below_min_first_then_the_lowest_weighted_dominant_share() -> None:
    tree = two_teams()
    usage = Usage(tree)
    usage.charge("a1", ("a", {GPU: 2 * G}))
    usage.charge("b1", ("b", {GPU: 6 * G}))
    capacity = {GPU: 16 * G}
    heads = {"a": {GPU: G}, "b": {GPU: G}}
    assert choose_leaf(tree, usage, capacity, heads) == "a"  # 2/8 below 6/8
    usage.charge("a1", ("a", {GPU: 9 * G}))  # a borrows now: only b has guaranteed work
    assert choose_leaf(tree, usage, capacity, heads) == "b"
    usage.charge("b1", ("b", {GPU: 8 * G}))  # nobody within guarantee: lowest share (b 8 < a 9)
    assert choose_leaf(tree, usage, capacity, heads) == "b"


def test_weight_divides_the_share() -> None:
    tree = QuotaTree.build([queue("heavy", weight=3), queue("light")])
    usage = Usage(tree)
    usage.charge("h", ("heavy", {GPU: 6 * G}))
    usage.charge("l", ("light", {GPU: 3 * G}))
    heads = {"heavy": {GPU: G}, "light": {GPU: G}}
    assert choose_leaf(tree, usage, {GPU: 12 * G}, heads) == "heavy"  # 6/12/3 < 3/12


def test_fair_share_is_min_plus_the_surplus_by_weight_capped_by_max() -> None:
    tree = QuotaTree.build(
        [
            queue("a", min={GPU: 4}, max={GPU: 16}, weight=2),
            queue("b", min={GPU: 4}, max={GPU: 6}),
            queue("idle", min={GPU: 2}),
        ]
    )
    usage = Usage(tree)
    shares = fair_shares(tree, usage, {"a": {GPU: 16 * G}, "b": {GPU: 16 * G}}, {GPU: 20 * G})
    assert shares["idle"][GPU] == 2 * G  # its min, though it wants nothing
    assert shares["b"][GPU] == 6 * G  # capped by max
    assert shares["a"][GPU] == 12 * G  # the rest
    assert sum(shares[q][GPU] for q in ("a", "b", "idle")) == 20 * G


def test_a_paused_or_invalid_queue_starts_nothing() -> None:
    tree = QuotaTree.build([queue("p", paused=True), queue("bad", min={GPU: -1})])
    assert queue_problem(tree, "p") == "queue p is paused"
    assert "spec.min" in str(queue_problem(tree, "bad"))
    root_paused = QuotaTree.build([queue("root", paused=True)])
    assert "paused" in str(queue_problem(root_paused, "default"))


# -- properties ------------------------------------------------------------------------------


@st.composite
def trees(draw: st.DrawFn) -> tuple[QuotaTree, list[str]]:
    """2-3 levels; leaf mins, parents' min = their children's sum, max >= min everywhere."""
    specs: list[Any] = []
    leaves: list[str] = []
    for o in range(draw(st.integers(1, 3))):
        kids = draw(st.integers(0, 3))
        kid_mins = [draw(st.integers(0, 6)) for _ in range(kids)]
        for k, low in enumerate(kid_mins):
            high = draw(st.one_of(st.none(), st.integers(low, 12)))
            spec: dict[str, Any] = {"parent": f"o{o}", "min": {GPU: low}}
            if high is not None:
                spec["max"] = {GPU: high}
            specs.append(queue(f"o{o}k{k}", **spec))
            leaves.append(f"o{o}k{k}")
        total = sum(kid_mins)
        high = draw(st.one_of(st.none(), st.integers(total, total + 12)))
        spec = {"min": {GPU: total}} | ({"max": {GPU: high}} if high is not None else {})
        specs.append(queue(f"o{o}", **spec))
        if not kids:
            leaves.append(f"o{o}")
    tree = QuotaTree.build(specs)
    assert not [p for p in tree.problems.values() if p.fatal]
    return tree, leaves


def _replay(tree: QuotaTree, units: list[tuple[int, int, bool]], leaves: list[str]) -> list[bool]:
    """Admit units in order (finishing some); check the max invariant after every step."""
    usage = Usage(tree)
    decisions = []
    for i, (pick, gpus, finish_one) in enumerate(units):
        leaf, demand = leaves[pick % len(leaves)], {GPU: gpus * G}
        guaranteed = within_guarantee(tree, usage, leaf, demand)
        admitted = admission_problem(tree, usage, leaf, demand) is None
        assert admitted or not guaranteed, f"unit {i} within guarantee refused at {leaf}"
        if admitted:
            usage.charge(i, (leaf, demand))
        if finish_one and i > 0:
            usage.charge(i // 2, None)
        for q, spec in tree.specs.items():
            if GPU in spec.max:
                assert usage.used(q).get(GPU, 0) <= spec.max[GPU], f"{q} above max"
        decisions.append(admitted)
    return decisions


@settings(max_examples=150, deadline=None)
@given(
    trees(), st.lists(st.tuples(st.integers(0, 20), st.integers(1, 8), st.booleans()), max_size=40)
)
def test_no_queue_exceeds_max_and_guarantees_are_never_refused(drawn, units) -> None:
    tree, leaves = drawn
    first = _replay(tree, units, leaves)
    assert first == _replay(tree, units, leaves)  # deterministic


@settings(max_examples=100, deadline=None)
@given(trees(), st.lists(st.tuples(st.integers(0, 20), st.integers(1, 4)), max_size=30))
def test_usage_is_the_sum_of_charges_whatever_the_order(drawn, charges) -> None:
    tree, leaves = drawn
    forward, backward = Usage(tree), Usage(tree)
    items = [(i, (leaves[p % len(leaves)], {GPU: g * G})) for i, (p, g) in enumerate(charges)]
    for key, charge in items:
        forward.charge(key, charge)
    for key, charge in reversed(items):
        backward.charge(key, charge)
    for q in tree.specs:
        assert forward.used(q) == backward.used(q)
    expected = sum(g for _, g in charges) * G
    assert forward.used("root").get(GPU, 0) == expected


@settings(max_examples=100, deadline=None)
@given(
    trees(),
    st.lists(
        st.tuples(st.integers(0, 20), st.integers(1, 6), st.integers(0, 3), st.booleans()),
        min_size=1,
        max_size=40,
    ),
)
def test_the_memoised_order_answers_as_choose_leaf(drawn, steps) -> None:
    """Heads come and go, usage changes under them: `QueueOrder` never answers differently,
    given every head or told only the heads that changed."""
    tree, leaves = drawn
    usage, order, told = Usage(tree), QueueOrder(), QueueOrder()
    capacity = {GPU: 64 * G}
    heads: dict[str, tuple[int, dict[str, int]]] = {}
    changed: dict[str, int | None] = {}  # heads changed since `told` was last asked
    for i, (pick, gpus, action, finish) in enumerate(steps):  # 0 new head, 1-2 choose, 3 other
        leaf = leaves[pick % len(leaves)]
        if action == 0:
            heads[leaf] = (i, {GPU: gpus * G})  # a new head unit
            changed[leaf] = i
        elif action in (1, 2) and heads:
            chosen = choose_leaf(tree, usage, capacity, {q: d for q, (_, d) in heads.items()})
            tokens = {q: token for q, (token, _) in heads.items()}
            memo = order.choose(tree, usage, capacity, tokens, lambda q: heads[q][1])
            assert memo == chosen
            assert told.choose_changed(tree, usage, capacity, changed, lambda q: heads[q][1]) == (
                chosen
            )
            usage.charge(i, (chosen, heads.pop(chosen)[1]))
            changed = {chosen: None}
        else:  # work that started elsewhere changes usage under the waiting heads
            usage.charge(i, (leaf, {GPU: gpus * G}))
        if finish and i:
            usage.charge(i // 2, None)


def test_the_memoised_order_sees_usage_change_under_a_waiting_head() -> None:
    tree = QuotaTree.build([queue("a", min={GPU: 8}), queue("b", min={GPU: 4})])
    usage, order = Usage(tree), QueueOrder()
    usage.charge("a-running", ("a", {GPU: 7 * G}))
    heads = {"a": ("a-head", {GPU: G}), "b": ("b-head", {GPU: 2 * G})}
    tokens = {q: token for q, (token, _) in heads.items()}
    capacity = {GPU: 16 * G}
    assert order.choose(tree, usage, capacity, tokens, lambda q: heads[q][1]) == "b"  # 0/4 < 7/8
    usage.charge("b-running", ("b", {GPU: 3 * G}))  # b's head no longer fits its guarantee
    assert order.choose(tree, usage, capacity, tokens, lambda q: heads[q][1]) == "a"


def test_the_memoised_order_ranks_again_after_a_head_a_charge_a_capacity_or_a_queue_change() -> (
    None
):
    """The kept ranks and choices follow the heads, usage (charge and uncharge), the capacity
    and the tree."""
    cpu = "cpu"
    specs = [queue("a", max={GPU: 64, cpu: 64}), queue("b", max={GPU: 64, cpu: 64})]
    tree = QuotaTree.build(specs)
    usage, order = Usage(tree), QueueOrder()
    heads = {"a": "a-head", "b": "b-head"}
    capacity = {GPU: 16 * G, cpu: 64 * G}

    def chosen(at: QuotaTree) -> str:
        return order.choose(at, usage, capacity, heads, lambda q: {GPU: G})

    assert chosen(tree) == "a"  # both 0: by name
    del heads["a"]
    assert chosen(tree) == "b"  # a has no work left
    heads["a"] = "a-next"
    assert chosen(tree) == "a"
    usage.charge("a-running", ("a", {GPU: 4 * G}))
    assert chosen(tree) == "b"  # a 4/16 GPUs
    usage.charge("b-running", ("b", {cpu: 32 * G}))
    assert chosen(tree) == "a"  # b 32/64 CPUs
    capacity = {GPU: 8 * G, cpu: 128 * G}
    assert chosen(tree) == "b"  # a 4/8 GPUs, b 32/128 CPUs
    usage.charge("a-running", None)
    assert chosen(tree) == "a"
    usage.charge("a-running", ("a", {GPU: 4 * G}))
    assert chosen(tree) == "b"
    heavier = QuotaTree.build([queue("a", weight=4, max={GPU: 64, cpu: 64}), specs[1]])
    usage.rebuild(heavier, {"a-running": "a", "b-running": "b"})
    assert chosen(heavier) == "a"  # a's share 0.5 / 4
