"""Copies of one node state (`NodeState.copy_as`) share what was derived from it until they change:
the memo's verdicts follow every change to any one of them, and none leaks into another."""

from __future__ import annotations

from dataclasses import fields, replace

from scheduler.config import load_config
from scheduler.placement import Assignment, NodeState, Placer, PodRequest, Snapshot
from scheduler.placement.gpushare import GpuShare
from scheduler.placement.pick import pick
from scheduler.placement.request import CPU
from tests.builders.placement import make_node, pod


def _copies(count: int) -> tuple[Snapshot, Placer]:
    template = make_node("template", gpus=8, cpu_milli=8_000)
    snap = Snapshot(template.copy_as(f"n{i}", template.labels) for i in range(count))
    return snap, Placer(snap, load_config(None).scoring())  # the scheduler's scores


def _agree(placer: Placer, snap: Snapshot, request: PodRequest) -> Assignment | None:
    """The memo's decision, checked against `pick` on the same snapshot."""
    decided = placer.decide(request)
    assert decided.assignment == pick(request, snap, placer.scoring).assignment
    return decided.assignment


def test_a_charged_copy_is_decided_afresh_and_the_others_stay_free():
    snap, placer = _copies(3)
    full = pod("default/full", gpus=8)
    for key in ("default/a", "default/b"):
        placed = _agree(placer, snap, full)
        assert placed is not None
        snap.assume(PodRequest(key=key, gpus=8, cpu_milli=100), placed)
    assert [snap.node(n).free_whole_gpus() for n in ("n0", "n1")] == [[], []]
    assert snap.node("n2").free_whole_gpus() == list(range(8))
    last = _agree(placer, snap, full)
    assert last is not None
    assert last.node == "n2"
    snap.forget("default/a")
    assert _agree(placer, snap, full) is not None


def test_refresh_drops_what_was_derived_from_a_state_changed_in_place():
    snap, placer = _copies(2)
    cpu_pod = pod("default/cpu", cpu_milli=6_000)
    assert _agree(placer, snap, cpu_pod) is not None
    snap.node("n0").requested[CPU] = 7_000  # changed in place, then told (refresh)
    snap.refresh("n0")
    node = snap.node("n1")
    node.requested[CPU] = 7_000  # changed in place, then added again
    snap.add_node(node)
    assert _agree(placer, snap, cpu_pod) is None


def test_copies_and_clones_do_not_share_mutable_state():
    template = make_node("template", gpus=8)
    first, second = template.copy_as("a", {}), template.copy_as("b", {})
    same = [
        f.name for f in fields(NodeState) if getattr(second, f.name) == getattr(template, f.name)
    ]
    assert set(same) == {f.name for f in fields(NodeState)} - {"name", "labels"}
    first.add_pod(pod("default/p", gpus=2), Assignment(node="a", gpus=(0, 1)))
    assert first.derived is None
    assert second.derived is template.derived
    assert second.free_whole_gpus() == template.free_whole_gpus() == list(range(8))
    assert (second.requested, template.requested) == ({}, {})
    clone = first.clone()
    assert clone.derived is None
    assert clone.free_whole_gpus() == list(range(2, 8))
    clone.remove_pod("default/p")
    assert first.free_whole_gpus() == list(range(2, 8))


def test_an_assignment_moved_to_another_node_keeps_every_device():
    found = Assignment(
        node="a",
        gpus=(1, 2),
        shares=(GpuShare(gpu=3, milli=250, slots=1),),
        mig=((4, "1g.10gb"),),
        numa=1,
    )
    assert {f.name for f in fields(Assignment)} == {"node", "gpus", "shares", "mig", "numa"}
    moved = found.on("b")
    assert moved == replace(found, node="b")
    assert moved.node == "b"
    assert found.node == "a"
