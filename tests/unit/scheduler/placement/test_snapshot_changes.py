"""`Snapshot` counts every change to a node: `generation`, `node_version`, `changed_since`."""

from __future__ import annotations

from scheduler.placement import Assignment, PodRequest, Snapshot
from scheduler.placement.snapshot import _REMOVED_KEPT
from tests.builders.placement import make_node


def test_every_mutation_counts_and_is_reported():
    snap = Snapshot([make_node("a"), make_node("b", gpus=0)])
    assert snap.changed_since(0) == ["b", "a"]  # newest first
    start = snap.generation
    steps = [
        lambda: snap.assume(PodRequest(key="p", gpus=1), Assignment(node="a", gpus=(0,))),
        lambda: snap.forget("p"),
        lambda: snap.assume_on(PodRequest(key="q", cpu_milli=100), "b"),
        lambda: snap.refresh("a"),
        lambda: snap.add_node(make_node("a", gpus=4)),  # replaced
    ]
    for step in steps:
        before = (snap.generation, snap.node_version("a"), snap.node_version("b"))
        mark = snap.generation
        step()
        after = (snap.generation, snap.node_version("a"), snap.node_version("b"))
        changed = snap.changed_since(mark)
        assert changed
        assert after[0] > before[0]
        for name in ("a", "b"):
            assert (name in changed) == (snap.node_version(name) > mark)
    assert snap.node_version("a") == snap.generation
    assert set(snap.changed_since(start) or ()) == {"a", "b"}
    assert snap.changed_since(snap.generation) == []


def test_removed_nodes_are_reported_until_too_many_are_forgotten():
    snap = Snapshot([make_node("keep", gpus=0)])
    mark = snap.generation
    snap.remove_node("keep")
    assert snap.changed_since(mark) == ["keep"]
    assert snap.node_version("keep") > mark
    assert snap.remove_node("keep") is None
    old = snap.generation
    for i in range(_REMOVED_KEPT + 1):
        snap.add_node(make_node(f"n{i}", gpus=0))
        snap.remove_node(f"n{i}")
    assert snap.changed_since(old) is None  # the oldest removal is forgotten: look again
    assert snap.changed_since(snap.generation - 1) == [f"n{_REMOVED_KEPT}"]


def test_idle_gpu_nodes_follow_gpu_pods_only():
    snap = Snapshot([make_node("a"), make_node("b", gpus=0), make_node("c", gpus=2)])
    assert (snap.idle_gpu_nodes, snap.gpu_nodes) == (2, 2)
    snap.assume(PodRequest(key="share", gpu_milli=300), Assignment(node="a", gpus=(1,)))
    snap.assume_on(PodRequest(key="daemon", cpu_milli=100), "c")  # no GPU: c stays idle
    assert snap.idle_gpu_nodes == 1
    snap.forget("share")
    assert snap.idle_gpu_nodes == 2
    snap.assume(PodRequest(key="gpu", gpus=2), Assignment(node="c", gpus=(0, 1)))
    assert snap.idle_gpu_nodes == 1
    snap.add_node(make_node("c", gpus=4))  # replaced: its pods come from the new state
    assert (snap.idle_gpu_nodes, snap.gpu_nodes) == (2, 2)
    snap.add_node(make_node("b", gpus=8))  # a cpu node replaced by a GPU node
    assert (snap.idle_gpu_nodes, snap.gpu_nodes) == (3, 3)
    snap.remove_node("a")
    snap.remove_node("missing")
    assert (snap.idle_gpu_nodes, snap.gpu_nodes) == (2, 2)
