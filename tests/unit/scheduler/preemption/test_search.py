"""The victim search, one rule at a time (DESIGN §11)."""

from __future__ import annotations

import pytest

from scheduler.placement import Snapshot, TopologyConstraint
from scheduler.preemption import (
    Budget,
    NoChoice,
    PreemptionSettings,
    VictimChoice,
    VictimReason,
    find_victims,
)
from scheduler.quota import QuotaTree
from tests.builders.placement import make_node, pod
from tests.builders.preemption import GPU, G, World, preemptor, queue, world


def chosen(result: VictimChoice | NoChoice) -> VictimChoice:
    assert isinstance(result, VictimChoice), result
    return result


def refused(result: VictimChoice | NoChoice) -> NoChoice:
    assert isinstance(result, NoChoice), result
    return result


def test_an_8_gpu_pod_takes_exactly_the_8_pods_of_one_node() -> None:
    w = world("a", "b")
    w.fill("a", 8, prefix="pa", priority=1)
    w.fill("b", 8, prefix="pb", priority=0)
    choice = chosen(w.find(preemptor(gpus=8)))
    assert sorted(e.unit for e in choice.evictions) == [f"pb-{i}" for i in range(8)]
    assert choice.nodes == {"ns/u-0": "b"}
    assert choice.gpus == 8
    assert {e.reason for e in choice.evictions} == {VictimReason.PREEMPT}


def test_a_1_gpu_pod_takes_the_youngest_lowest_priority_pod() -> None:
    w = world("a", "b")
    w.fill("a", 8, prefix="pa", priority=1, started=100)
    w.fill("b", 8, prefix="pb", priority=0, started=0)
    choice = chosen(w.find(preemptor(gpus=1)))
    assert [e.unit for e in choice.evictions] == ["pb-7"]
    assert choice.nodes == {"ns/u-0": "b"}


def test_the_live_snapshot_and_usage_are_untouched() -> None:
    w = world("a", "b")
    w.fill("a", 8, prefix="pa")
    w.fill("b", 8, prefix="pb")
    before = (w.snapshot.generation, {n: dict(s.pods) for n, s in w.snapshot.nodes.items()})
    version = w.usage.version
    chosen(w.find(preemptor(gpus=8)))
    after = (w.snapshot.generation, {n: dict(s.pods) for n, s in w.snapshot.nodes.items()})
    assert after == before
    assert w.usage.version == version


def test_never_evicts_nobody() -> None:
    w = world("a")
    w.fill("a", 8, prefix="pa")
    result = refused(w.find(preemptor(never=True)))
    assert result.reason == "preemption: the pod's preemptionPolicy is Never"


def test_equal_or_higher_priority_and_non_preemptible_pods_are_never_victims() -> None:
    w = world("a", "b", "c")
    w.fill("a", 8, prefix="pa", priority=10)
    w.fill("b", 8, prefix="pb", priority=50)
    w.fill("c", 8, prefix="pc", priority=5)
    settings = PreemptionSettings(non_preemptible_priority=5)
    result = refused(w.find(preemptor(gpus=1, priority=10), settings))
    assert result.reason.startswith("preemption: no eligible victims")
    assert result.nothing_eligible
    assert chosen(w.find(preemptor(gpus=1, priority=10))).evictions[0].unit.startswith("pc-")


def test_a_gang_victim_is_evicted_whole_on_every_node() -> None:
    w = world("a", "b")
    w.run(
        "gang",
        [("a", pod("ns/g-0", gpus=8)), ("b", pod("ns/g-1", gpus=8))],
        priority=0,
    )
    choice = chosen(w.find(preemptor(gpus=8)))
    assert [(e.unit, sorted(e.pods)) for e in choice.evictions] == [("gang", ["ns/g-0", "ns/g-1"])]
    assert choice.gpus == 16


def test_a_spare_member_is_taken_alone() -> None:
    w = world("a", "b", "c")
    members = [(n, pod(f"ns/g-{i}", gpus=8)) for i, n in enumerate("abc")]
    w.run("gang", members, priority=0, spare=1)
    choice = chosen(w.find(preemptor(gpus=8)))
    assert len(choice.evictions) == 1
    assert choice.evictions[0].unit == "gang"
    assert len(choice.evictions[0].pods) == 1
    assert choice.nodes["ns/u-0"] == w.snapshot.node_of(choice.evictions[0].pods[0])


def test_beyond_the_spares_the_whole_gang_goes() -> None:
    w = world("a", "b", "c")
    members = [(n, pod(f"ns/g-{i}", gpus=8)) for i, n in enumerate("abc")]
    w.run("gang", members, priority=0, spare=1)
    choice = chosen(w.find(preemptor(gpus=8, members=2)))
    assert [sorted(e.pods) for e in choice.evictions] == [["ns/g-0", "ns/g-1", "ns/g-2"]]


def test_a_gang_that_cannot_fit_after_every_eviction_chooses_nothing() -> None:
    w = world("a", "b")
    w.fill("a", 8, prefix="pa")
    w.fill("b", 8, prefix="pb")
    result = refused(w.find(preemptor(gpus=8, members=3)))
    assert result.reason == (
        "preemption: evicting every eligible victim would still not fit the pod group"
    )


def test_a_gang_preemptor_takes_two_nodes() -> None:
    w = world("a", "b", "c")
    w.fill("a", 8, prefix="pa", priority=2)
    w.fill("b", 8, prefix="pb", priority=0)
    w.fill("c", 8, prefix="pc", priority=1)
    choice = chosen(w.find(preemptor(gpus=8, members=2)))
    assert sorted(set(choice.nodes.values())) == ["b", "c"]
    assert len(choice.evictions) == 16


def budget_on(name: str, pods: list[str], allowed: int = 0) -> Budget:
    return Budget(name=name, allowed=allowed, pods=frozenset(pods))


def test_pdb_preferred_avoids_a_violation_even_at_a_higher_priority() -> None:
    w = world("a", "b")
    w.fill("a", 8, prefix="pa", priority=0)
    w.fill("b", 8, prefix="pb", priority=1)
    guard = budget_on("ns/guard", [f"ns/pa-{i}" for i in range(8)])
    choice = chosen(w.find(preemptor(gpus=1), budgets=[guard]))
    assert choice.evictions[0].unit.startswith("pb-")
    assert choice.violated == ()


def test_pdb_preferred_violates_when_nothing_else_fits() -> None:
    w = world("a")
    w.fill("a", 8, prefix="pa", priority=0)
    guard = budget_on("ns/guard", [f"ns/pa-{i}" for i in range(8)], allowed=1)
    choice = chosen(w.find(preemptor(gpus=2), budgets=[guard]))
    assert choice.violated == ("ns/guard",)
    assert len(choice.evictions) == 2


def test_pdb_required_refuses_with_the_budget_name() -> None:
    w = world("a")
    w.fill("a", 8, prefix="pa", priority=0)
    guard = budget_on("ns/guard", [f"ns/pa-{i}" for i in range(8)], allowed=1)
    settings = PreemptionSettings(pdb_required=True)
    assert chosen(w.find(preemptor(gpus=1), settings, budgets=[guard])).violated == ()
    result = refused(w.find(preemptor(gpus=2), settings, budgets=[guard]))
    assert result.budgets == ("ns/guard",)
    assert "PodDisruptionBudget ns/guard (pdb: required)" in result.reason


def teams() -> list[object]:
    return [
        queue("a", min={GPU: 8}, max={GPU: 16}),
        queue("b", min={GPU: 8}, max={GPU: 16}),
    ]


def test_reclaim_takes_the_youngest_borrowing_units_and_never_below_min() -> None:
    w = world("n1", "n2", queues=teams())
    w.fill("n1", 8, prefix="b-old", leaf="b", priority=5, started=0)
    w.fill("n2", 8, prefix="b-new", leaf="b", priority=5, started=100)
    choice = chosen(w.find(preemptor(gpus=8, leaf="a", priority=0)))
    assert sorted(e.unit for e in choice.evictions) == [f"b-new-{i}" for i in range(8)]
    assert {e.reason for e in choice.evictions} == {VictimReason.RECLAIM}
    # b uses 12 of its min 8: only 4 may go, and no node frees 8 with 4 of b's
    w2 = world("n1", "n2", queues=[*teams(), queue("c")])
    w2.fill("n1", 8, prefix="b-x", leaf="b", priority=5)
    w2.fill("n2", 4, prefix="b-y", leaf="b", priority=5)
    w2.fill("n2", 4, prefix="c-x", leaf="c", priority=100)
    settings = PreemptionSettings(non_preemptible_priority=100)
    result = refused(w2.find(preemptor(gpus=8, leaf="a", priority=0), settings))
    assert "would still not fit" in result.reason
    choice = chosen(w2.find(preemptor(gpus=4, leaf="a", priority=0), settings))
    assert len(choice.evictions) == 4


def test_reclaim_needs_the_preemptor_within_its_guarantee() -> None:
    w = world("n1", "n2", "n3", queues=teams())
    w.fill("n1", 8, prefix="a-x", leaf="a", priority=5)
    w.fill("n2", 8, prefix="b-x", leaf="b", priority=0)
    w.fill("n3", 8, prefix="b-y", leaf="b", priority=0)
    result = refused(w.find(preemptor(gpus=8, leaf="a", priority=2)))
    assert "queue a is not within its guarantee" in result.reason
    off = PreemptionSettings(reclaim=False)
    w2 = world("n1", "n2", queues=teams())
    w2.fill("n1", 8, prefix="b-x", leaf="b")
    w2.fill("n2", 8, prefix="b-y", leaf="b")
    assert isinstance(w2.find(preemptor(gpus=8, leaf="a"), off), NoChoice)


def test_a_quota_max_breach_is_resolved_by_preempting_in_the_own_leaf() -> None:
    w = world("n1", "n2", "n3", queues=[queue("a", max={GPU: 8})])
    w.fill("n1", 8, prefix="a-low", leaf="a", priority=0)
    choice = chosen(w.find(preemptor(gpus=2, leaf="a", priority=5)))
    assert len(choice.evictions) == 2
    assert all(e.unit.startswith("a-low") for e in choice.evictions)
    assert choice.nodes["ns/u-0"] in {"n1", "n2", "n3"}


def test_a_quota_breach_that_no_victim_lowers_names_the_queue() -> None:
    w = world("n1", "n2", queues=[queue("a", max={GPU: 8})])
    w.fill("n1", 8, prefix="a-high", leaf="a", priority=9)
    result = refused(w.find(preemptor(gpus=2, leaf="a", priority=5)))
    assert result.reason.startswith("preemption: no eligible victims")
    assert result.nothing_eligible


@pytest.mark.parametrize(
    ("enabled", "expected"),
    [
        pytest.param(True, 1, id="preempt on"),
        pytest.param(False, 0, id="preempt off"),
    ],
)
def test_preemption_can_be_switched_off(enabled: bool, expected: int) -> None:
    w = world("a")
    w.fill("a", 8, prefix="pa")
    result = w.find(preemptor(gpus=1), PreemptionSettings(enabled=enabled))
    found = len(result.evictions) if isinstance(result, VictimChoice) else 0
    assert found == expected


def test_reclaim_to_fair_share_takes_from_a_queue_above_its_share() -> None:
    w = world("n1", "n2", queues=[queue("a", max={GPU: 16}), queue("b", max={GPU: 16})])
    w.fill("n1", 8, prefix="b-x", leaf="b", priority=5)
    w.fill("n2", 8, prefix="b-y", leaf="b", priority=5, started=50)
    u = preemptor(gpus=8, leaf="a", priority=0)
    assert isinstance(w.find(u), NoChoice)  # no min anywhere: not within guarantee
    fair = PreemptionSettings(reclaim_to_fair_share=True)
    choice = chosen(w.find(u, fair))
    assert sorted(e.unit for e in choice.evictions) == [f"b-y-{i}" for i in range(8)]
    assert {e.reason for e in choice.evictions} == {VictimReason.RECLAIM}
    too_much = preemptor(gpus=8, members=2, leaf="a", priority=0)  # past a's fair share of 8
    assert isinstance(w.find(too_much, fair), NoChoice)


def test_reclaim_to_fair_share_divides_the_capacity_it_is_given() -> None:
    """Fair shares divide the root's capacity as the caller counts it (each shared GPU once,
    `nodes_capacity`), not what the kubelet advertises: had the 8 GPUs of one node been
    time-sliced under a renamed resource, which no allocatable `nvidia.com/gpu` counts, a's
    share of the 8 left would have been 4 and its 8 past it."""
    w = world("n1", "n2", queues=[queue("a", max={GPU: 16}), queue("b", max={GPU: 16})])
    w.fill("n1", 8, prefix="b-x", leaf="b", priority=5)
    w.fill("n2", 8, prefix="b-y", leaf="b", priority=5, started=50)
    fair = PreemptionSettings(reclaim_to_fair_share=True)
    u = preemptor(gpus=8, leaf="a", priority=0)
    assert {e.reason for e in chosen(w.find(u, fair)).evictions} == {VictimReason.RECLAIM}
    assert isinstance(w.find(u, fair, capacity={GPU: 8 * G}), NoChoice)


def test_a_unit_that_fits_needs_no_victim() -> None:
    w = world("a", "b")
    w.fill("a", 8, prefix="pa")
    choice = chosen(w.find(preemptor(gpus=8)))
    assert choice.evictions == ()
    assert choice.nodes == {"ns/u-0": "b"}


def test_min_resources_count_the_cluster_with_the_victims_gone() -> None:
    w = world("a", "b")
    w.fill("a", 8, prefix="pa")
    w.fill("b", 8, prefix="pb")
    u = preemptor(gpus=8, min_resources={GPU: 9})
    assert isinstance(w.find(u), NoChoice)
    assert len(chosen(w.find(preemptor(gpus=8, min_resources={GPU: 8}))).evictions) == 8


def test_pods_a_budget_protects_are_given_back_first() -> None:
    w = world("a")
    w.fill("a", 8, prefix="pa")  # started 0..7: the oldest are given back first otherwise
    guard = budget_on("ns/guard", [f"ns/pa-{i}" for i in range(4, 8)])
    choice = chosen(w.find(preemptor(gpus=4), budgets=[guard]))
    assert sorted(e.unit for e in choice.evictions) == [f"pa-{i}" for i in range(4)]
    assert choice.violated == ()
    plain = chosen(w.find(preemptor(gpus=4)))
    assert sorted(e.unit for e in plain.evictions) == [f"pa-{i}" for i in range(4, 8)]


def test_the_index_must_read_the_placers_snapshot() -> None:
    w = world("a")
    other = world("a")
    settings = PreemptionSettings()
    with pytest.raises(ValueError, match="different snapshots"):
        find_victims(preemptor(), other.placer, w.index, w.tree, w.usage, (), settings, {})


def test_a_gang_that_must_stay_in_one_rack_takes_its_victims_there() -> None:
    rack = "gputopo.io/rack"
    nodes = [make_node(n, labels={rack: r}) for n, r in (("a", "r1"), ("b", "r2"), ("c", "r2"))]
    w = World(Snapshot(nodes), QuotaTree.build([]))
    w.fill("a", 8, prefix="pa", priority=0)  # the cheapest victims, alone in r1
    w.fill("b", 8, prefix="pb", priority=1)
    w.fill("c", 8, prefix="pc", priority=1)
    u = preemptor(gpus=8, members=2, topology=TopologyConstraint(label=rack))
    choice = chosen(w.find(u))
    assert set(choice.nodes.values()) == {"b", "c"}
    assert {e.unit[:2] for e in choice.evictions} == {"pb", "pc"}
    free = preemptor(gpus=8, members=2)  # anywhere: the lowest priorities are a and b or c
    assert "a" in set(chosen(w.find(free)).nodes.values())
