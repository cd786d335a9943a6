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


def _walks(snap: Snapshot) -> list[list[str]]:
    """The candidate walk of a few pods (whole GPUs, a share, cpu only)."""
    probes = [
        PodRequest(key="one", gpus=1),
        PodRequest(key="four", gpus=4),
        PodRequest(key="share", gpu_milli=300),
        PodRequest(key="cpu", cpu_milli=100),
    ]
    return [[n.name for n in snap.candidates(probe)] for probe in probes]


def test_the_index_read_after_many_changes_is_the_one_a_fresh_snapshot_builds():
    snap = Snapshot([make_node(f"n{i}", gpus=8 if i % 3 else 4) for i in range(6)])
    first = _walks(snap)
    snap.assume(PodRequest(key="p", gpus=2), Assignment(node="n1", gpus=(0, 1)))
    snap.assume(PodRequest(key="q", gpus=4), Assignment(node="n2", gpus=(0, 1, 2, 3)))
    snap.assume(PodRequest(key="s", gpu_milli=500), Assignment(node="n4", gpus=(7,)))
    snap.forget("q")
    snap.assume(PodRequest(key="q", gpus=1), Assignment(node="n1", gpus=(2,)))  # n1 twice
    snap.remove_node("n5")
    snap.add_node(make_node("n3", gpus=2))  # replaced
    snap.add_node(make_node("n6", gpus=8))
    changed = _walks(snap)
    fresh = Snapshot(node.clone() for node in snap.nodes.values())
    assert changed == _walks(fresh)
    assert changed != first
    assert changed[0][:2] == ["n1", "n4"]  # used nodes first, fewest idle GPUs first
    assert "n5" not in changed[3]
