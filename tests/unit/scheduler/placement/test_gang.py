"""`place_gang`: all or nothing on one snapshot, topology domains, minResources; with a Placer on
its memo path and on its plain path."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from scheduler.placement import (
    CLIQUE_LABEL,
    Assignment,
    Placer,
    PodRequest,
    Snapshot,
    TopologyConstraint,
    default_scoring,
    excluding_outside,
    member_domains,
    place_gang,
    place_most_in_one_domain,
    placed_domain,
    topology_domains,
)
from tests.builders.placement import make_node, pod, snapshot

RACK = "gputopo.io/rack"
PlacerFor = Callable[[Snapshot], Placer]


@pytest.fixture(
    params=[pytest.param(0, id="memo"), pytest.param(1 << 30, id="plain, every node ranked")]
)
def placer_for(request: pytest.FixtureRequest) -> PlacerFor:
    """A Placer with the shipped scoring; a candidate limit above the node count takes the plain
    path and still ranks every node."""
    limit: int = request.param
    return lambda snap: Placer(snap, replace(default_scoring(), candidate_limit=limit))


def state(snap: Snapshot) -> dict[str, object]:
    """Everything a placement can change, for before/after comparisons."""
    return {
        name: (dict(n.requested), list(n.gpu_free), [dict(m) for m in n.mig_free], dict(n.pods))
        for name, n in snap.nodes.items()
    }


def members(name: str, count: int, **kwargs: object) -> list[PodRequest]:
    return [pod(f"default/{name}-{i}", pod_group=name, **kwargs) for i in range(count)]


def test_gang_fits_and_leaves_the_snapshot_unchanged(placer_for: PlacerFor):
    snap = snapshot(make_node("node-a"), make_node("node-b"))
    before = state(snap)
    result = place_gang(members("train", 4, gpus=4), placer_for(snap))
    assert result.ok
    assert state(snap) == before
    used = [(a.node, g) for a in result.assignments.values() for g in a.gpus]
    assert len(used) == len(set(used)) == 16


def test_gang_that_does_not_fit_places_nothing(placer_for: PlacerFor):
    snap = snapshot(make_node("node-a"), make_node("node-b"))
    snap.assume(pod("default/other", gpus=3), Assignment(node="node-a", gpus=(0, 1, 2)))
    before = state(snap)
    result = place_gang(members("train", 4, gpus=4), placer_for(snap))
    assert not result.ok
    assert result.assignments == {}
    assert state(snap) == before
    assert result.failed is not None
    assert result.reason == result.failed.message()
    assert "Insufficient nvidia.com/gpu" in result.reason


def test_deadlock_scenario_gang_holds_nothing_while_waiting(placer_for: PlacerFor):
    """16 GPUs, 6 taken; a gang of eight 1-GPU pods and a 5-GPU pod. The stock scheduler binds 5
    members and the 5-GPU pod and deadlocks; here the gang is placed whole or not at all."""
    snap = snapshot(make_node("node-a"), make_node("node-b"))
    snap.assume(pod("default/old", gpus=6), Assignment(node="node-a", gpus=tuple(range(6))))
    gang = members("train", 8, gpus=1)
    placer = placer_for(snap)
    # Gang complete first: all eight fit, then the 5-GPU pod waits with a clear reason.
    first = place_gang(gang, placer)
    assert first.ok
    for p in gang:
        snap.assume(p, first.assignments[p.key])
    late = placer.decide(pod("default/five", gpus=5))
    assert late.assignment is None
    for p in gang:
        snap.forget(p.key)
    # 5-GPU pod first: the gang then fits nowhere and holds no GPU while it waits.
    five = placer.decide(pod("default/five", gpus=5))
    assert five.assignment is not None
    snap.assume(pod("default/five", gpus=5), five.assignment)
    before = state(snap)
    assert not place_gang(gang, placer).ok
    assert state(snap) == before


def racked_cluster() -> Snapshot:
    nodes = [make_node(f"a{i}", labels={RACK: "rack-a"}) for i in range(3)]
    nodes += [make_node(f"b{i}", labels={RACK: "rack-b"}) for i in range(2)]
    nodes.append(make_node("loose"))
    return snapshot(*nodes)


def test_required_domain_keeps_the_gang_in_one_rack_tightest_first(placer_for: PlacerFor):
    snap = racked_cluster()
    result = place_gang(
        members("train", 4, gpus=4),
        placer_for(snap),
        topology=TopologyConstraint(label=RACK),
    )
    assert result.ok
    assert result.domain == "rack-b"  # 16 free GPUs: the tightest rack that fits 16
    assert {a.node for a in result.assignments.values()} == {"b0", "b1"}


def test_required_domain_moves_to_a_bigger_rack_when_the_tight_one_is_short(placer_for: PlacerFor):
    snap = racked_cluster()
    snap.assume(pod("default/x", gpus=1), Assignment(node="b0", gpus=(0,)))
    result = place_gang(
        members("train", 4, gpus=4),
        placer_for(snap),
        topology=TopologyConstraint(label=RACK),
    )
    assert result.ok
    assert result.domain == "rack-a"
    assert {a.node for a in result.assignments.values()} <= {"a0", "a1", "a2"}


def test_required_domain_that_nothing_fits_fails(placer_for: PlacerFor):
    snap = racked_cluster()
    before = state(snap)
    result = place_gang(
        members("train", 4, gpus=8),
        placer_for(snap),
        topology=TopologyConstraint(label=RACK),
    )
    assert not result.ok
    assert result.reason == (
        f"no {RACK} domain holds the whole pod group (32 GPUs; the most free GPUs in one is 24; "
        "considered: rack-a, rack-b)"
    )
    assert state(snap) == before


def test_preferred_domain_falls_back_to_the_whole_cluster(placer_for: PlacerFor):
    snap = racked_cluster()
    result = place_gang(
        members("train", 4, gpus=8),
        placer_for(snap),
        topology=TopologyConstraint(label=RACK, required=False),
    )
    assert result.ok
    assert result.domain is None
    assert len({a.node for a in result.assignments.values()}) == 4


def test_unknown_label_required(placer_for: PlacerFor):
    snap = racked_cluster()
    result = place_gang(
        members("t", 1, gpus=1), placer_for(snap), topology=TopologyConstraint(label="nope")
    )
    assert not result.ok
    assert result.reason == "no node has the topology label nope"


def test_topology_domains_lists_label_values():
    snap = racked_cluster()
    assert topology_domains(snap, RACK) == {
        "rack-a": frozenset({"a0", "a1", "a2"}),
        "rack-b": frozenset({"b0", "b1"}),
    }
    assert snap.domains(RACK)["rack-b"].free_milli == 16_000
    snap.assume(pod("default/x", gpus=2), Assignment(node="b1", gpus=(0, 1)))
    assert snap.domains(RACK)["rack-b"].free_milli == 14_000
    snap.forget("default/x")
    assert snap.domains(RACK)["rack-b"].free_milli == 16_000


def test_min_resources_must_be_free_in_the_cluster(placer_for: PlacerFor):
    snap = snapshot(make_node("node-a"))
    result = place_gang(
        members("t", 1, gpus=1), placer_for(snap), min_resources={"nvidia.com/gpu": 9}
    )
    assert not result.ok
    assert result.reason == "Insufficient nvidia.com/gpu for the pod group's minResources"
    ok = place_gang(members("t", 1, gpus=1), placer_for(snap), min_resources={"cpu": 1000})
    assert ok.ok


def test_members_already_assumed_are_replaced_and_restored(placer_for: PlacerFor):
    snap = snapshot(make_node("node-a"), make_node("node-b"))
    gang = members("t", 2, gpus=4)
    snap.assume(gang[0], Assignment(node="node-b", gpus=(4, 5, 6, 7)))
    before = state(snap)
    result = place_gang(gang, placer_for(snap))
    assert result.ok
    assert state(snap) == before
    assert snap.node_of(gang[0].key) == "node-b"


def test_largest_members_are_placed_first(placer_for: PlacerFor):
    # 8 + 4 + 4 GPUs on 8 + 8: the 8-GPU member must go first or the gang fails.
    snap = snapshot(make_node("node-a"), make_node("node-b"))
    gang = [
        pod("default/g-small-0", gpus=4),
        pod("default/g-small-1", gpus=4),
        pod("default/g-big", gpus=8),
    ]
    result = place_gang(gang, placer_for(snap))
    assert result.ok
    assert result.assignments["default/g-big"].gpus == tuple(range(8))


def clique_cluster(per_clique: int = 3) -> Snapshot:
    """Two cliques of `per_clique` 8-GPU nodes, c1 and c2."""
    nodes = [
        make_node(f"{c}-{i}", labels={CLIQUE_LABEL: f"uuid.{c}"})
        for c in ("c1", "c2")
        for i in range(per_clique)
    ]
    return snapshot(*nodes)


def test_gpu_gang_prefers_one_clique_without_a_constraint(placer_for: PlacerFor):
    snap = clique_cluster()
    snap.assume(pod("default/x", gpus=2), Assignment(node="c2-0", gpus=(0, 1)))
    gang = members("train", 3, gpus=4)
    assert place_gang(gang, placer_for(snap)).domain is None  # only when asked
    result = place_gang(gang, placer_for(snap), prefer_clique=True)
    assert result.ok
    assert result.domain == "uuid.c2"  # 22 free GPUs: the clique it leaves best packed
    assert {a.node for a in result.assignments.values()} <= {"c2-0", "c2-1", "c2-2"}


def test_gpu_gang_spans_cliques_when_none_holds_it(placer_for: PlacerFor):
    snap = clique_cluster()
    result = place_gang(members("train", 4, gpus=8), placer_for(snap), prefer_clique=True)
    assert result.ok
    assert result.domain is None
    assert {a.node.split("-")[0] for a in result.assignments.values()} == {"c1", "c2"}


def test_cpu_gang_has_no_clique_preference(placer_for: PlacerFor):
    snap = clique_cluster()
    result = place_gang(
        members("web", 2, gpus=0, cpu_milli=100), placer_for(snap), prefer_clique=True
    )
    assert result.ok
    assert result.domain is None


def test_equally_tight_cliques_the_name_then_fewest_nodes_touched_decide(placer_for: PlacerFor):
    snap = clique_cluster()
    snap.assume(pod("default/x", gpus=4), Assignment(node="c1-0", gpus=(0, 1, 2, 3)))
    snap.assume(pod("default/y", gpus=4), Assignment(node="c2-2", gpus=(0, 1, 2, 3)))
    # 20 free GPUs in each, 4 + 8 + 8: an 8 + 8 gang touches two nodes in either; the name decides.
    gang = members("train", 2, gpus=8)
    assert place_gang(gang, placer_for(snap), prefer_clique=True).domain == "uuid.c1"
    # c1 of five 4-GPU nodes (20 free) against c2's 8 + 8 + 4: four 4-GPU pods touch 4 nodes in
    # c1 and 3 in c2.
    small = [make_node(f"c1-{i}", gpus=4, labels={CLIQUE_LABEL: "uuid.c1"}) for i in range(5)]
    snap = snapshot(*small, *(n for n in clique_cluster().nodes.values() if n.name[:2] == "c2"))
    snap.assume(pod("default/y", gpus=4), Assignment(node="c2-2", gpus=(0, 1, 2, 3)))
    result = place_gang(members("t", 4, gpus=4), placer_for(snap), prefer_clique=True)
    assert result.domain == "uuid.c2"
    assert len({a.node for a in result.assignments.values()}) == 3


def test_required_clique_that_none_holds_names_them(placer_for: PlacerFor):
    snap = clique_cluster()
    snap.assume(pod("default/x", gpus=6), Assignment(node="c1-0", gpus=tuple(range(6))))
    before = state(snap)
    result = place_gang(
        members("train", 7, gpus=4),
        placer_for(snap),
        topology=TopologyConstraint(label=CLIQUE_LABEL),
    )
    assert not result.ok
    assert result.reason == (
        f"no {CLIQUE_LABEL} domain holds the whole pod group (28 GPUs; the most free GPUs in one "
        "is 24; considered: uuid.c2, uuid.c1)"
    )
    assert state(snap) == before


def test_placed_domain_names_the_one_domain_of_the_members_nodes():
    snap = snapshot(
        make_node("a1", labels={RACK: "r1"}),
        make_node("a2", labels={RACK: "r1"}),
        make_node("b1", labels={RACK: "r2"}),
        make_node("loose"),
    )
    assert placed_domain(snap, RACK, ["a1", "a2", "loose", "gone"]) == ("r1", "")
    assert placed_domain(snap, RACK, ["loose", "gone"]) == (None, "")
    assert placed_domain(snap, RACK, []) == (None, "")
    value, why = placed_domain(snap, RACK, ["a1", "b1"])
    assert value is None
    assert why == f"its placed members are in 2 {RACK} domains (r1, r2), not one"


def test_most_in_one_domain_takes_the_longest_prefix_one_domain_holds(placer_for: PlacerFor):
    snap = snapshot(
        make_node("a1", gpus=4, labels={RACK: "r1"}),
        make_node("b1", gpus=8, labels={RACK: "r2"}),
        make_node("b2", gpus=4, labels={RACK: "r2"}),
    )
    before = state(snap)
    required = TopologyConstraint(label=RACK, required=True)
    group = members("b", 5, gpus=4)  # 20 GPUs: r2 holds three, r1 one
    result = place_most_in_one_domain(group, placer_for(snap), required)
    assert state(snap) == before
    assert result.ok
    assert result.domain == "r2"
    assert set(result.assignments) == {p.key for p in group[:3]}
    assert {a.node for a in result.assignments.values()} <= {"b1", "b2"}
    whole = place_most_in_one_domain(group[:1], placer_for(snap), required)
    assert whole.ok
    assert whole.domain == "r1"  # the tightest domain that holds it all
    assert place_most_in_one_domain(group, placer_for(snap), required, least=3).ok
    too_many = place_most_in_one_domain(group, placer_for(snap), required, least=4)
    assert not too_many.ok  # a gang's minimum of 4 fits no rack
    assert too_many.assignments == {}
    assert state(snap) == before


def test_most_in_one_domain_is_not_ok_when_not_even_the_first_fits(placer_for: PlacerFor):
    snap = snapshot(make_node("a1", gpus=4, labels={RACK: "r1"}))
    required = TopologyConstraint(label=RACK, required=True)
    result = place_most_in_one_domain(members("b", 2, gpus=8), placer_for(snap), required)
    assert not result.ok
    assert result.assignments == {}
    assert result.reason.startswith(f"no {RACK} domain holds the whole pod group")


def test_member_domains_confine_later_members_to_the_placed_ones_domain():
    snap = snapshot(
        make_node("a1", labels={RACK: "r1"}),
        make_node("a2", labels={RACK: "r1"}),
        make_node("b1", labels={RACK: "r2"}),
    )
    required = TopologyConstraint(label=RACK)
    preferred = TopologyConstraint(label=RACK, required=False)
    r1 = frozenset({"a1", "a2"})
    assert member_domains(snap, None, ["a1"]) == [None]
    assert member_domains(snap, required, []) == [None]  # the first members choose
    assert member_domains(snap, required, ["a2"]) == [r1]
    assert member_domains(snap, preferred, ["a2"]) == [r1, None]  # there first, then anywhere
    assert member_domains(snap, preferred, ["a1", "b1"]) == [None]
    spread = member_domains(snap, required, ["a1", "b1"])
    assert spread == f"its placed members are in 2 {RACK} domains (r1, r2), not one"
    assert excluding_outside(snap, None, r1) == {"b1"}
    assert excluding_outside(snap, {"a1"}, r1) == {"a1", "b1"}
    assert excluding_outside(snap, {"a1"}, None) == {"a1"}
