"""The queue tree: reading Queue and ElasticQuota objects, validation, which queue a pod is in."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.quota import (
    DEFAULT_QUEUE,
    QuotaTree,
    read_elastic_quota,
    read_queue,
    resolve_queue,
)

GPU = "nvidia.com/gpu"


def queue(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": spec}


def tree(*objs: dict[str, Any]) -> QuotaTree:
    return QuotaTree.build([read_queue(o) for o in objs])


def test_quantities_are_read_in_quota_units() -> None:
    spec = read_queue(queue("a", min={GPU: 8, "cpu": "1500m"}, max={GPU: "16", "memory": "1Gi"}))
    assert spec.problem == ""
    assert spec.min == {GPU: 8000, "cpu": 1500}
    assert spec.max == {GPU: 16000, "memory": 2**30}


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"min": {GPU: -1}}, "spec.min[nvidia.com/gpu]"),
        ({"max": {GPU: "lots"}}, "spec.max[nvidia.com/gpu]"),
        ({"min": {GPU: 9}, "max": {GPU: 8}}, "spec.min[nvidia.com/gpu] is above spec.max"),
        ({"weight": 0}, "spec.weight"),
        ({"paused": "yes"}, "spec.paused"),
        ({"namespaces": "team-a"}, "spec.namespaces"),
        ({"parent": 3}, "spec.parent"),
        ({"min": [8]}, "spec.min"),
    ],
)
def test_a_malformed_queue_names_the_field_and_the_others_keep_working(
    spec: dict[str, Any], field: str
) -> None:
    built = tree(queue("bad", **spec), queue("good", max={GPU: 4}))
    assert field in built.problems["bad"].message
    assert built.problems["bad"].message.startswith("Queue bad:")
    assert "bad" not in built.specs
    assert built.is_leaf("good")


def test_unknown_parent_and_cycles_are_flagged_with_their_descendants() -> None:
    built = tree(
        queue("orphan", parent="nowhere"),
        queue("x", parent="y"),
        queue("y", parent="x"),
        queue("under-x", parent="x"),
        queue("ok"),
    )
    assert built.problems["orphan"].reason == "UnknownParent"
    assert "nowhere does not exist" in built.problems["orphan"].message
    assert {built.problems["x"].reason, built.problems["y"].reason} == {"Cycle"}
    assert "is invalid" in built.problems["under-x"].message
    assert set(built.specs) == {"root", DEFAULT_QUEUE, "ok"}


def test_overcommitted_children_and_a_child_min_above_its_parent_are_flagged_not_dropped() -> None:
    built = tree(
        queue("org", min={GPU: 8}),
        queue("a", parent="org", min={GPU: 6}),
        queue("b", parent="org", min={GPU: 9}),
    )
    assert built.problems["org"].reason == "Overcommitted"
    assert not built.problems["org"].fatal
    assert built.problems["b"].reason == "MinAboveParent"
    assert built.paths["a"] == ("a", "org")
    assert built.is_leaf("b")
    assert not built.is_leaf("org")


def test_a_namespace_two_queues_claim_flags_both() -> None:
    built = tree(queue("a", namespaces=["ml"]), queue("b", namespaces=["ml"]), queue("c"))
    assert built.problems["a"].reason == built.problems["b"].reason == "NamespaceConflict"
    assert "a" not in built.specs
    assert "b" not in built.specs


def test_resolution_order_label_then_namespace_then_elastic_quota_then_default() -> None:
    eq = {
        "metadata": {"namespace": "research", "name": "quota"},
        "spec": {"min": {GPU: 2}, "max": {GPU: 4}},
    }
    eq_ml = {"metadata": {"namespace": "ml", "name": "q"}, "spec": {"max": {GPU: 1}}}
    built = QuotaTree.build(
        [
            read_queue(queue("team", namespaces=["ml"])),
            read_queue(queue("other")),
            read_elastic_quota(eq),
            read_elastic_quota(eq_ml),
        ]
    )
    label = {"gputopo.io/queue": "other"}
    assert resolve_queue(built, "ml", label) == ("other", None)
    assert resolve_queue(built, "ml", {}, label) == ("other", None)
    assert resolve_queue(built, "ml", {}) == ("team", None)  # a Queue before an ElasticQuota
    assert resolve_queue(built, "research", {}) == ("ns/research", None)
    assert built.specs["ns/research"].max == {GPU: 4000}
    assert resolve_queue(built, "elsewhere", {}) == (DEFAULT_QUEUE, None)


def test_a_pod_naming_a_missing_non_leaf_or_foreign_queue_waits_with_the_reason() -> None:
    built = tree(queue("org"), queue("a", parent="org", namespaces=["team-a"]))
    assert resolve_queue(built, "x", {"gputopo.io/queue": "nope"})[1] == "queue nope does not exist"
    assert "not a leaf" in str(resolve_queue(built, "x", {"gputopo.io/queue": "org"})[1])
    why = resolve_queue(built, "team-b", {"gputopo.io/queue": "a"})[1]
    assert why == "queue a does not serve namespace team-b (its spec.namespaces: team-a)"


def test_pausing_a_parent_or_root_pauses_the_leaves_below() -> None:
    built = tree(queue("org", paused=True), queue("a", parent="org"), queue("b"))
    assert built.paused("a") == "org"
    assert built.paused("b") is None
    assert tree(queue("root", paused=True), queue("b")).paused("b") == "root"
