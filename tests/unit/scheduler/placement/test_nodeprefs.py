"""Node preferences (`nodeprefs.node_preference_bonus`) and the decisions the `Placer` makes with
them: preferred node affinity by weight and `PreferNoSchedule` taints rank nodes as
kube-scheduler's `NodeAffinity` and `TaintToleration` scores do, on both of the Placer's paths."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.placement import (
    Effect,
    Placer,
    Scoring,
    Snapshot,
    Taint,
    Toleration,
    default_scoring,
)
from scheduler.placement.interpod import PREFERENCE_POINTS
from scheduler.placement.nodeprefs import node_preference_bonus
from scheduler.placement.pick import pick
from scheduler.placement.request import NodeSelectorRequirement, Operator, PreferredNodeTerm
from tests.builders.placement import make_node, pod

ZONE = "topology.kubernetes.io/zone"
SOFT = Taint(key="spot", value="true", effect=Effect.PREFER_NO_SCHEDULE)


def prefer(weight: int, key: str = ZONE, *values: str, field: bool = False) -> PreferredNodeTerm:
    requirement = NodeSelectorRequirement(key=key, operator=Operator.IN, values=values)
    if field:
        return PreferredNodeTerm(weight=weight, fields=(requirement,))
    return PreferredNodeTerm(weight=weight, expressions=(requirement,))


def zones(*values: str, taints: dict[int, tuple[Taint, ...]] | None = None) -> Snapshot:
    return Snapshot(
        make_node(f"n{i}", labels={ZONE: z}, taints=(taints or {}).get(i, ()))
        for i, z in enumerate(values)
    )


@pytest.fixture(params=("pick", "memo"))
def scoring(request: pytest.FixtureRequest) -> Scoring:
    """The Placer's two paths: `pick` (a candidate limit) and the verdict memo; no used-node
    tier (the shipped default), which would rank first (`test_the_used_node_tier_ranks_first`)."""
    return Scoring(prefer_used_nodes=False) if request.param == "pick" else default_scoring()


def test_a_preferred_zone_wins_over_packing(scoring):
    snap = zones("a", "b")
    snap.assume_on(pod("default/busy", gpus=4), "n0")  # binpacking alone picks n0
    assert Placer(snap, scoring).decide(pod("default/x", gpus=1)).node == "n0"
    incoming = pod("default/y", gpus=1, preferred_affinity=(prefer(50, ZONE, "b"),))
    assert Placer(snap, scoring).decide(incoming).node == "n1"


def test_the_used_node_tier_ranks_first():
    snap = zones("a", "b")
    snap.assume_on(pod("default/busy", gpus=4), "n0")
    incoming = pod("default/y", gpus=1, preferred_affinity=(prefer(50, ZONE, "b"),))
    assert Placer(snap, Scoring(prefer_used_nodes=True)).decide(incoming).node == "n0"


def test_weights_add_up_and_the_most_preferred_node_wins(scoring):
    snap = Snapshot(
        make_node(f"n{i}", labels={ZONE: z, "gpu": g})
        for i, (z, g) in enumerate([("a", "h100"), ("b", "h100"), ("b", "h200")])
    )
    terms = (prefer(30, ZONE, "b"), prefer(20, "gpu", "h200"))
    incoming = pod("default/x", gpus=1, preferred_affinity=terms)
    bonus = node_preference_bonus(incoming, snap)
    assert bonus is not None
    relative = {n: bonus.get(n, 0.0) - bonus.get("n0", 0.0) for n in ("n0", "n1", "n2")}
    assert relative == pytest.approx({"n0": 0.0, "n1": PREFERENCE_POINTS * 30 / 50, "n2": 1000})
    assert Placer(snap, scoring).decide(incoming).node == "n2"


def test_a_node_name_field_is_read(scoring):
    snap = zones("a", "a", "a")
    terms = (prefer(10, "metadata.name", "n2", field=True),)
    assert Placer(snap, scoring).decide(pod("default/x", preferred_affinity=terms)).node == "n2"


def test_prefer_no_schedule_taints_push_pods_away_unless_tolerated(scoring):
    snap = zones("a", "a", taints={0: (SOFT,)})
    assert Placer(snap, scoring).decide(pod("default/x", gpus=1)).node == "n1"
    tolerant = pod("default/y", gpus=1, tolerations=(Toleration(key="spot", operator="Exists"),))
    assert Placer(snap, scoring).decide(tolerant).node == "n0"  # the names decide a tie


def test_a_preference_never_places_where_a_filter_refuses(scoring):
    snap = zones("a", "b")
    snap.assume_on(pod("default/full", gpus=8), "n1")
    incoming = pod("default/x", gpus=1, preferred_affinity=(prefer(100, ZONE, "b"),))
    assert Placer(snap, scoring).decide(incoming).node == "n0"


def test_a_relabelled_node_is_read_again(scoring):
    snap = zones("a", "b")
    placer = Placer(snap, scoring)
    incoming = pod("default/x", gpus=1, preferred_affinity=(prefer(50, ZONE, "b"),))
    assert placer.decide(incoming).node == "n1"
    snap.add_node(make_node("n1", labels={ZONE: "a"}))
    snap.add_node(make_node("n0", labels={ZONE: "b"}))
    assert placer.decide(incoming).node == "n0"


def test_nothing_to_prefer_adds_nothing():
    snap = zones("a", "b")
    assert node_preference_bonus(pod("default/x"), snap) is None
    every = pod("default/y", preferred_affinity=(prefer(5, ZONE, "a", "b"),))
    assert node_preference_bonus(every, snap) is None  # every node alike


@st.composite
def terms(draw: st.DrawFn) -> PreferredNodeTerm:
    values = tuple(draw(st.sets(st.sampled_from("abc"), min_size=1)))
    operator = draw(st.sampled_from([Operator.IN, Operator.NOT_IN]))
    requirement = NodeSelectorRequirement(key=ZONE, operator=operator, values=values)
    return PreferredNodeTerm(weight=draw(st.integers(1, 100)), expressions=(requirement,))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), size=st.integers(4, 20))
def test_the_placer_decides_node_preferences_as_pick_ranking_every_node_does(data, size):
    """The memo's group-by-group path makes `pick`'s decision with the bonus on every node."""
    snap = Snapshot(
        make_node(
            f"n{i:02d}",
            gpus=data.draw(st.sampled_from((0, 4, 8))),
            labels={ZONE: data.draw(st.sampled_from("abc"))},
            taints=(SOFT,) if data.draw(st.booleans()) else (),
        )
        for i in range(size)
    )
    names = snap.names()
    for i in range(data.draw(st.integers(0, 10))):
        snap.assume_on(pod(f"default/r{i}", gpus=1), data.draw(st.sampled_from(names)))
    incoming = pod(
        "default/x",
        gpus=data.draw(st.integers(0, 2)),
        preferred_affinity=tuple(data.draw(st.lists(terms(), max_size=3))),
    )
    scoring = Scoring.from_weights(
        {"binpack": 1.0, "topology": 1.0}, prefer_used_nodes=False, candidate_limit=0
    )
    bonus = node_preference_bonus(incoming, snap)
    decided = Placer(snap, scoring).decide(incoming)  # the memo's path, group by group
    expected = pick(incoming, snap, scoring, bonus=bonus)
    assert decided.node == expected.node
    assert decided.score == pytest.approx(expected.score)
