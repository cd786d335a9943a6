"""The queue tree of `kubectl gputopo queues` over any parent graph, and its GPU columns."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.cli.kubectl_queues import NO_STATUS, ROOT, build_tree, queue_row, queue_rows, tree_json

NAMES = ["a", "b", "c", "d", "e", "f"]


def queue(name: str, parent: str | None = None, **fields) -> dict:
    return {"metadata": {"name": name}, "spec": {"parent": parent}} | fields


@given(st.dictionaries(st.sampled_from(NAMES), st.sampled_from([None, ROOT, "ghost", *NAMES])))
def test_every_queue_is_listed_once_whatever_its_parents(parents) -> None:
    tree = build_tree([queue(n, p) for n, p in parents.items()])
    listed = [q["name"] for q in tree_json(tree)]
    assert sorted(listed) == sorted([ROOT, *parents])
    placed = {obj["metadata"]["name"] for _, obj in tree.sections[0].entries}
    for depth, obj in tree.sections[0].entries:  # the tree under the root: parents are placed
        parent = obj["spec"]["parent"]
        assert depth >= 1
        assert parent in (None, ROOT) or parent in placed


def test_children_follow_their_parent_sorted_by_name() -> None:
    objs = [queue("z"), queue("b", "z"), queue("a", "z"), queue("m"), queue("x", "a")]
    tree = build_tree(objs)
    entries = [(d, o["metadata"]["name"]) for d, o in tree.sections[0].entries]
    assert entries == [(1, "m"), (1, "z"), (2, "a"), (3, "x"), (2, "b")]


@pytest.mark.parametrize(
    ("spec", "status", "expected"),
    [
        pytest.param({}, {}, ["q", "-", "-", "-", "-", "-", "-", NO_STATUS], id="no status yet"),
        pytest.param(
            {"max": {"nvidia.com/gpu": 4}},
            {"conditions": [{"type": "Valid", "status": "True"}]},
            ["q", "-", "4", "-", "-", "-", "-", "ok"],
            id="a status with nothing used",
        ),
        pytest.param(
            {"min": {"nvidia.com/gpu": "16"}, "max": {"nvidia.com/gpu": 32}},
            {"used": {"nvidia.com/gpu": "2000m"}, "fairShare": {"nvidia.com/gpu": "1500m"}},
            ["q", "16", "32", "2", "-", "-", "1500m", "ok"],
            id="ints and strings",
        ),
        pytest.param(
            {"min": {"nvidia.com/gpu": "lots"}, "max": {"cpu": "4"}},
            {"conditions": [{"type": "Valid", "status": "False", "reason": "Invalid"}]},
            ["q", "lots", "-", "-", "-", "-", "-", "Invalid"],
            id="malformed quantity shown as written",
        ),
        pytest.param(
            {"paused": True},
            {"conditions": [{"type": "Valid", "status": "False", "reason": "Invalid"}]},
            ["q", "-", "-", "-", "-", "-", "-", "paused"],
            id="paused first",
        ),
        pytest.param(
            {},
            {"pending": {"units": 3, "resources": {"nvidia.com/gpu": 12}}, "conditions": "junk"},
            ["q", "-", "-", "-", "-", "12", "-", "ok"],
            id="pending GPUs, junk conditions",
        ),
    ],
)
def test_queue_row(spec, status, expected) -> None:
    assert list(queue_row(0, {"metadata": {"name": "q"}, "spec": spec, "status": status})) == (
        expected
    )


def test_a_queue_named_root_only_pauses_the_root() -> None:
    assert build_tree([queue(ROOT), queue("a")]).root_paused is False
    root = {"metadata": {"name": ROOT}, "spec": {"parent": "a", "paused": True, "min": {"x": 1}}}
    paused = build_tree([root, queue("a")])
    assert (paused.root_paused, paused.queue_count) == (True, 1)
    assert tree_json(paused)[0] == {
        "name": ROOT,
        "parent": None,
        "depth": 0,
        "problem": None,
        "paused": True,
        "state": "paused",
    }


def test_model_keys_get_a_row_each_under_their_queue() -> None:
    spec = {"max": {"nvidia.com/gpu": 16, "nvidia.com/gpu@NVIDIA-H100": 8}}
    spec["min"] = {"nvidia.com/mig-1g.10gb@NVIDIA-A100": 2}
    status = {"used": {"nvidia.com/gpu": "9", "nvidia.com/gpu@NVIDIA-H100": "8"}}
    rows = queue_rows(1, {"metadata": {"name": "q"}, "spec": spec, "status": status})
    assert [list(r) for r in rows] == [
        ["  q", "-", "16", "9", "-", "-", "-", "ok"],
        ["    @NVIDIA-H100", "-", "8", "8", "-", "-", "-", ""],
        ["    nvidia.com/mig-1g.10gb@NVIDIA-A100", "2", "-", "-", "-", "-", "-", ""],
    ]
