"""`pick`: one pod, one decision, with the stock scheduler's aggregated reasons."""

from __future__ import annotations

import pytest

from agent.resource_names import GPU_RESOURCE
from scheduler.placement import (
    Assignment,
    Decision,
    Effect,
    PodRequest,
    Scoring,
    Snapshot,
    Taint,
    default_scoring,
    format_reasons,
)
from scheduler.placement.pick import pick
from tests.builders.placement import make_node, pod, shared_node, snapshot


def _share(assignment: Assignment) -> tuple[int, int] | None:
    return (assignment.shares[0].gpu, assignment.shares[0].milli) if assignment.shares else None


NOT_READY = Taint(key="node.kubernetes.io/not-ready", effect=Effect.NO_SCHEDULE)


def place_all(
    snap: Snapshot, pods: list[PodRequest], scoring: Scoring | None = None
) -> list[Decision]:
    scoring = scoring or default_scoring()
    out = []
    for p in pods:
        decision = pick(p, snap, scoring)
        if decision.assignment is not None:
            snap.assume(p, decision.assignment)
        out.append(decision)
    return out


def test_fragmentation_binpack_keeps_a_node_whole():
    """Eight 1-GPU pods then an 8-GPU pod on 2×8 GPUs: the stock scheduler spreads 4+4 and the
    8-GPU pod stays Pending; binpack puts the eight on one node and the 8-GPU pod fits."""
    snap = snapshot(make_node("node-a"), make_node("node-b"))
    small = place_all(snap, [pod(f"default/s{i}", gpus=1) for i in range(8)])
    assert {d.node for d in small} == {"node-a"}
    assert sorted(g for d in small if d.assignment for g in d.assignment.gpus) == list(range(8))
    big = pick(pod("default/big", gpus=8), snap, default_scoring())
    assert big.node == "node-b"
    assert big.assignment is not None
    assert big.assignment.gpus == tuple(range(8))


def test_reasons_are_aggregated_in_stock_words():
    nodes = [make_node(f"ready-{i:02d}") for i in range(8)]
    nodes += [make_node(f"new-{i:02d}", taints=(NOT_READY,)) for i in range(4)]
    snap = snapshot(*nodes)
    for node in nodes[:8]:
        snap.assume(
            pod(f"default/fill-{node.name}", gpus=8),
            Assignment(node=node.name, gpus=tuple(range(8))),
        )
    decision = pick(pod("default/want", gpus=1), snap, default_scoring())
    assert decision.assignment is None
    assert decision.reasons == {
        "Insufficient nvidia.com/gpu": 8,
        "node(s) had untolerated taint {node.kubernetes.io/not-ready: }": 4,
    }
    assert decision.message() == (
        "0/12 nodes are available: 4 node(s) had untolerated taint "
        "{node.kubernetes.io/not-ready: }, 8 Insufficient nvidia.com/gpu."
    )


def test_format_reasons_sorts_like_the_stock_scheduler():
    text = format_reasons(3, {"Insufficient memory": 1, "Insufficient cpu": 2})
    assert text == "0/3 nodes are available: 1 Insufficient memory, 2 Insufficient cpu."


def test_used_node_wins_even_with_worse_topology():
    # node-a: GPUs 0 and 1 (an NVLink pair) taken; node-b idle with perfect pairs.
    used = make_node("node-a", preset="pairs")
    used.add_pod(pod("default/x", gpus=2), Assignment(node="node-a", gpus=(0, 1)))
    snap = snapshot(used, make_node("node-b", preset="pairs"))
    assert pick(pod(gpus=2), snap, default_scoring()).node == "node-a"
    idle_first = Scoring.from_weights({"topology": 1.0}, prefer_used_nodes=False)
    assert pick(pod(gpus=2), snap, idle_first).node == "node-a"  # still an NVLink pair (2,3)


def test_topology_prefers_the_node_whose_free_gpus_are_linked():
    a = make_node("node-a", preset="pairs")
    a.add_pod(pod("default/x", gpus=4), Assignment(node="node-a", gpus=(0, 2, 4, 6)))
    b = make_node("node-b", preset="pairs")
    b.add_pod(pod("default/y", gpus=4), Assignment(node="node-b", gpus=(0, 1, 2, 3)))
    snap = snapshot(a, b)
    decision = pick(pod(gpus=2), snap, default_scoring())
    assert decision.node == "node-b"
    assert decision.assignment is not None
    assert decision.assignment.gpus == (4, 5)


def test_pods_without_gpus_spread_and_avoid_gpu_nodes():
    snap = snapshot(make_node("gpu-a"), make_node("cpu-a", gpus=0), make_node("cpu-b", gpus=0))
    decisions = place_all(snap, [pod(f"default/web-{i}", cpu_milli=8_000) for i in range(4)])
    nodes = [d.node for d in decisions]
    assert set(nodes) == {"cpu-a", "cpu-b"}
    assert nodes.count("cpu-a") == nodes.count("cpu-b") == 2


def test_shares_pack_onto_a_partly_used_gpu():
    snap = snapshot(make_node("node-a"), make_node("node-b"))
    decisions = place_all(snap, [pod(f"default/s{i}", gpu_milli=250) for i in range(4)])
    assert {(d.node, d.assignment and _share(d.assignment)) for d in decisions} == {
        ("node-a", (0, 250))
    }


def test_mig_request_lands_on_a_node_with_that_profile():
    snap = snapshot(
        make_node("plain"),
        make_node("migged", gpus=2, mig={0: {"1g.10gb": 7}}),
    )
    decision = pick(pod(mig={"1g.10gb": 2}), snap, default_scoring())
    assert decision.node == "migged"
    assert decision.assignment is not None
    assert decision.assignment.mig == ((0, "1g.10gb"), (0, "1g.10gb"))


def test_allowed_restricts_and_explains_the_rest():
    snap = snapshot(make_node("node-a"), make_node("node-b"))
    decision = pick(pod(gpus=1), snap, default_scoring(), allowed=frozenset({"node-b"}))
    assert decision.node == "node-b"
    miss = pick(pod(gpus=9), snap, default_scoring(), allowed=frozenset({"node-b"}))
    assert miss.reasons == {
        "Insufficient nvidia.com/gpu": 1,
        "node(s) outside the pod group's topology domain": 1,
    }


def test_candidate_limit_stops_after_enough_feasible_nodes():
    nodes = [make_node(f"n{i:02d}") for i in range(10)]
    snap = snapshot(*nodes)
    limited = Scoring.from_weights({"binpack": 1.0}, candidate_limit=2)
    assert pick(pod(gpus=1), snap, limited).node == "n00"
    # With a score preferring the last node, only a full scan (limit 0) finds it.
    scoring = Scoring.from_weights({"binpack": 1.0}, candidate_limit=0)
    nodes[9].add_pod(pod("default/z", gpus=1), Assignment(node="n09", gpus=(0,)))
    snap.refresh("n09")
    assert pick(pod(gpus=1), snap, scoring).node == "n09"


def test_no_explain_reports_only_candidates():
    snap = snapshot(make_node("node-a"), make_node("node-b", taints=(NOT_READY,)))
    quick = pick(pod(gpus=9), snap, default_scoring(), explain=False)
    assert quick.assignment is None
    assert sum(quick.reasons.values()) < 2


@pytest.mark.parametrize("seed_order", [0, 1])
def test_pick_is_deterministic_whatever_the_node_insertion_order(seed_order):
    names = [f"n{i}" for i in range(6)]
    if seed_order:
        names.reverse()
    snap = snapshot(*(make_node(n) for n in names))
    decisions = place_all(snap, [pod(f"default/p{i}", gpus=3) for i in range(5)])
    assert [d.node for d in decisions] == ["n0", "n0", "n1", "n1", "n2"]


def test_a_node_with_whole_gpus_and_shared_gpu_replicas_is_a_candidate_for_whole_gpus():
    """Its whole-GPU key counts idle GPUs and free `nvidia.com/gpu` replicas together (6 here,
    more than its 4 GPUs and more than its 4 replicas): the index walk reaches that key."""
    node = shared_node("mixed", shared=2, whole=2, slots=2, resource=GPU_RESOURCE)
    decision = pick(pod("default/one", gpus=1), snapshot(node), default_scoring())
    assert decision.node == "mixed"
