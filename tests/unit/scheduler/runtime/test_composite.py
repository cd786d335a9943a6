"""CompositePodGroups read (`parse_composite`) and their trees (`build_tree`, `Tree.satisfied`,
`Tree.minimum`), as kube-scheduler 1.37.2 counts a tree: a PodGroup is satisfied with minCount
pods, a CompositePodGroup with minGroupCount children satisfied, children in order of
creation, then name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.objkey import ObjectKey
from scheduler.runtime.cluster.cache import ClusterCache
from scheduler.runtime.cluster.composite import (
    Tree,
    build_tree,
    composite_key,
    parse_composite,
    root_of,
)
from scheduler.runtime.cluster.groups import group_key
from scheduler.runtime.cluster.upstream import parse_upstream_group
from tests.builders.workloads import child_podgroup, composite_podgroup


def _stamped(body: dict[str, Any], created: str) -> dict[str, Any]:
    body["metadata"]["creationTimestamp"] = created
    return body


def test_a_gang_composite_reads_its_policy_parent_and_topology() -> None:
    info = parse_composite(
        composite_podgroup("replica-0", 2, parent="job", topology="gputopo.io/rack")
    )
    assert info.error is None
    assert (info.min_groups, info.basic, info.parent) == (2, False, "job")
    assert info.topology is not None
    assert info.topology.label == "gputopo.io/rack"
    basic = parse_composite(composite_podgroup("job"))
    assert (basic.min_groups, basic.basic, basic.parent) == (1, True, None)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param(
            {"schedulingPolicy": {"gang": {"minGroupCount": 0}}},
            "spec.schedulingPolicy.gang.minGroupCount: must be a positive integer, got 0",
            id="zero groups",
        ),
        pytest.param(
            {"schedulingPolicy": {"gang": {}, "basic": {}}},
            "spec.schedulingPolicy: must set exactly one of basic, gang (got basic, gang)",
            id="two policies",
        ),
        pytest.param(
            {"disruptionMode": {"all": {}, "single": {}}},
            "spec.disruptionMode: must set exactly one of single, all",
            id="two disruption modes",
        ),
        pytest.param(
            {"parentCompositePodGroupName": 7},
            "spec.parentCompositePodGroupName: must be a name, got 7",
            id="parent not a name",
        ),
        pytest.param(
            {"preemptionPolicy": "Sometimes"},
            "spec.preemptionPolicy: must be one of PreemptLowerPriority, Never",
            id="preemption policy",
        ),
    ],
)
def test_a_malformed_composite_is_named_with_its_field(spec: dict[str, Any], message: str) -> None:
    body = composite_podgroup("job", 1)
    body["spec"].update(spec)
    info = parse_composite(body)
    assert info.error is not None
    assert info.error.startswith("invalid CompositePodGroup default/job (scheduling.k8s.io): ")
    assert message in info.error


def test_a_podgroup_names_its_parent() -> None:
    group = parse_upstream_group(child_podgroup("leader", 1, "replica-0"))
    assert group.error is None
    assert group.parent == "replica-0"


def _cache(*bodies: dict[str, Any]) -> ClusterCache:
    cache = ClusterCache("gputopo-scheduler")
    for body in bodies:
        if body["kind"] == "CompositePodGroup":
            cache.upsert_composite(body)
        else:
            cache.upsert_group(body, upstream=True)
    return cache


def _leaf(name: str) -> ObjectKey:
    return group_key("default", name, upstream=True)


def test_the_tree_orders_children_by_creation_then_name() -> None:
    cache = _cache(
        composite_podgroup("job", 2),
        _stamped(child_podgroup("b", 2, "job"), "2026-12-05T00:00:01Z"),
        _stamped(child_podgroup("c", 1, "job"), "2026-12-05T00:00:00Z"),
        _stamped(child_podgroup("a", 3, "job"), "2026-12-05T00:00:01Z"),
    )
    group = cache.gang(composite_key("default", "job"))
    assert group is not None
    assert group.error is None
    assert group.tree is not None
    assert group.tree.leaves() == [_leaf("c"), _leaf("a"), _leaf("b")]
    assert [c.need for c in group.tree.children] == [1, 3, 2]
    assert group.min_member == 2
    assert group.title == "CompositePodGroup default/job (scheduling.k8s.io)"
    for name in "abc":
        assert cache.unit_of(_leaf(name)) == composite_key("default", "job")


def test_a_nested_tree_is_one_unit_under_its_root() -> None:
    cache = _cache(
        composite_podgroup("job", 2),
        composite_podgroup("replica-0", 2, parent="job"),
        composite_podgroup("replica-1", 2, parent="job"),
        *(child_podgroup(f"r{r}-{role}", 1, f"replica-{r}") for r in (0, 1) for role in "lw"),
    )
    root = composite_key("default", "job")
    assert cache.unit_of(_leaf("r1-w")) == root
    assert cache.unit_of(composite_key("default", "replica-1")) == root
    assert sorted(cache.tree_leaves(root)) == sorted(
        _leaf(f"r{r}-{role}") for r in (0, 1) for role in "lw"
    )
    group = cache.gang(root)
    assert group is not None
    assert group.tree is not None
    one_replica = {_leaf("r0-l"): 1, _leaf("r0-w"): 1}
    assert not group.tree.satisfied(lambda k: one_replica.get(k, 0))
    both = {**one_replica, _leaf("r1-l"): 1, _leaf("r1-w"): 1}
    assert group.tree.satisfied(lambda k: both.get(k, 0))


@pytest.mark.parametrize(
    ("bodies", "start", "message"),
    [
        pytest.param(
            [composite_podgroup("a", 1, parent="b"), composite_podgroup("b", 1, parent="a")],
            "a",
            "form a cycle (a -> b -> a)",
            id="cycle",
        ),
        pytest.param(
            [
                composite_podgroup("l0", 1),
                *(composite_podgroup(f"l{i}", 1, parent=f"l{i - 1}") for i in range(1, 5)),
            ],
            "l4",
            "more than 4 levels of CompositePodGroups above a PodGroup",
            id="too deep",
        ),
        pytest.param([], "missing", 'CompositePodGroup "default/missing" not found', id="missing"),
    ],
)
def test_a_broken_chain_of_parents_names_why(
    bodies: list[dict[str, Any]], start: str, message: str
) -> None:
    cache = _cache(*bodies)
    root, why = root_of(cache.composites, "default", start)
    assert root is None
    assert message in why
    # the group's pods wait as a gang of their own, not in a tree
    cache.upsert_group(child_podgroup("leaf", 1, start), upstream=True)
    assert cache.unit_of(_leaf("leaf")) == _leaf("leaf")


def test_each_level_keeps_its_own_topology() -> None:
    cache = _cache(
        composite_podgroup("job", 2, topology="zone"),
        composite_podgroup("replica", 1, parent="job", topology="rack"),
        child_podgroup("w", 1, "replica", schedulingConstraints={"topology": [{"key": "node"}]}),
        child_podgroup("x", 1, "job"),
    )
    group = cache.gang(composite_key("default", "job"))
    assert group is not None
    assert group.error is None
    tree = group.tree
    assert tree is not None
    labels = {c.key: c.topology.label if c.topology else None for c in tree.children}
    assert labels == {composite_key("default", "replica"): "rack", _leaf("x"): None}
    assert tree.topology is not None
    assert tree.topology.label == "zone"
    replica = next(c for c in tree.children if not c.leaf)
    assert [c.topology.label if c.topology else None for c in replica.children] == ["node"]
    assert tree.inner_topology()
    assert not replica.children[0].inner_topology()
    flat = _cache(composite_podgroup("job", 1, topology="zone"), child_podgroup("x", 1, "job"))
    flat_group = flat.gang(composite_key("default", "job"))
    assert flat_group is not None
    assert flat_group.tree is not None
    assert not flat_group.tree.inner_topology()


def test_a_malformed_child_makes_the_tree_wait_naming_it() -> None:
    bad = child_podgroup("w", 1, "job")
    bad["spec"]["schedulingPolicy"] = {"gang": {"minCount": 0}}
    cache = _cache(composite_podgroup("job", 1), bad)
    group = cache.gang(composite_key("default", "job"))
    assert group is not None
    assert group.error is not None
    assert "spec.schedulingPolicy.gang.minCount" in group.error


# -- Tree.minimum: the fewest pods to place, as a property ----------------------------------------

_LEAVES = [ObjectKey(f"default/g{i}@scheduling.k8s.io") for i in range(6)]


@st.composite
def _trees(draw: st.DrawFn, depth: int = 0, used: list[int] | None = None) -> Tree:
    used = used if used is not None else [0]
    stop = depth >= 2 or used[0] >= len(_LEAVES) - 1 or draw(st.booleans())
    if stop and used[0] < len(_LEAVES):
        key = _LEAVES[used[0]]
        used[0] += 1
        return Tree(key, draw(st.integers(1, 3)), leaf=True)
    children = []
    for _ in range(draw(st.integers(1, 3))):
        if used[0] >= len(_LEAVES):
            break
        children.append(draw(_trees(depth + 1, used)))
    need = draw(st.integers(1, max(len(children), 1)))
    return Tree(ObjectKey(f"default/c{depth}-{used[0]}@compositepodgroups"), need, tuple(children))


def _count(counts: Mapping[ObjectKey, int]) -> Any:
    return lambda k: counts.get(k, 0)


@settings(max_examples=300, deadline=None)
@given(
    tree=_trees(),
    held=st.lists(st.integers(0, 3), min_size=6, max_size=6),
    extra=st.lists(st.integers(0, 3), min_size=6, max_size=6),
)
def test_the_minimum_satisfies_the_tree_exactly_when_the_pods_that_exist_can(
    tree: Tree, held: list[int], extra: list[int]
) -> None:
    """With `held` pods placed and `extra` pending per PodGroup: `minimum` is None exactly when
    every pod placed would not satisfy the tree; else placing what it asks satisfies it, asks
    no more pods than exist, and nothing when the held pods satisfy it already."""
    holding = dict(zip(_LEAVES, held, strict=True))
    present = {k: holding[k] + e for k, e in zip(_LEAVES, extra, strict=True)}
    chosen = tree.minimum(_count(present), _count(holding))
    if chosen is None:
        assert not tree.satisfied(_count(present))
        return
    after = {k: holding[k] + chosen.get(k, 0) for k in _LEAVES}
    assert tree.satisfied(_count(after))
    assert all(after[k] <= present[k] for k in _LEAVES)
    if tree.satisfied(_count(holding)):
        assert sum(chosen.values()) == 0


def test_the_minimum_prefers_children_satisfied_already() -> None:
    a, b = ObjectKey("a"), ObjectKey("b")
    root = Tree(ObjectKey("root"), 1, (Tree(a, 2, leaf=True), Tree(b, 2, leaf=True)))
    chosen = root.minimum(_count({a: 2, b: 2}), _count({b: 2}))
    assert chosen == {b: 0}


def test_a_leafless_composite_is_never_satisfied() -> None:
    empty = build_tree(parse_composite(composite_podgroup("job", 1)), {}, {}, {})
    assert empty.tree is not None
    assert not empty.tree.satisfied(lambda _: 10)
    assert empty.tree.minimum(lambda _: 10, lambda _: 0) is None
