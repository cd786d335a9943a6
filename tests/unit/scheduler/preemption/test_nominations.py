"""Nominations and starvation holds (DESIGN §11): what is held, for whom, and for how long."""

from __future__ import annotations

from scheduler.placement import Placer, default_scoring
from scheduler.preemption import Nominations, PreemptionSettings, starvation_nodes
from tests.builders.placement import pod
from tests.builders.preemption import preemptor, world

SETTINGS = PreemptionSettings(
    nomination_timeout=60, starvation_hold_seconds=600, max_starvation_holds=2
)


def test_nothing_held_costs_nothing() -> None:
    book = Nominations()
    assert book.blocked(0, "u") is None
    assert not book.terminating("u")
    assert book.nodes_of("u") is None
    assert book.held_gpu_seconds(10.0) == 0.0


def test_a_nomination_holds_its_nodes_for_equal_and_lower_priorities() -> None:
    book = Nominations()
    book.nominate("u", 5, {"ns/u-0": "a"}, ["ns/v1", "ns/v2"], now=0.0)
    assert book.terminating("u")
    assert book.blocked(5, "other") == frozenset({"a"})
    assert book.blocked(4, "other") == frozenset({"a"})
    assert book.blocked(6, "other") is None
    assert book.blocked(0, "u") is None  # never from itself
    assert book.nodes_of("u") == {"ns/u-0": "a"}


def test_victims_leaving_end_the_search_pause_then_the_timeout_ends_the_hold() -> None:
    book = Nominations()
    book.nominate("u", 5, {"ns/u-0": "a"}, ["ns/v1", "ns/v2"], now=0.0)
    assert book.victim_gone("ns/v1", 10.0) == "u"
    assert book.terminating("u")
    assert book.victim_gone("ns/v2", 20.0) == "u"
    assert not book.terminating("u")
    assert book.victim_gone("ns/other", 20.0) is None
    assert book.expire(80.0, SETTINGS) == []
    assert book.expire(80.5, SETTINGS) == ["u"]
    assert book.blocked(0, "x") is None


def test_release_frees_at_once() -> None:
    book = Nominations()
    book.nominate("u", 5, {"ns/u-0": "a"}, ["ns/v1"], now=0.0)
    book.release("u")
    assert book.blocked(0, "x") is None
    assert book.victim_gone("ns/v1", 1.0) is None


def test_holds_are_bounded_and_give_way() -> None:
    book = Nominations()
    assert book.hold("s1", 0, {"ns/s1-0": "a"}, 8, 0.0, SETTINGS)
    assert book.hold("s2", 0, {"ns/s2-0": "b"}, 8, 0.0, SETTINGS)
    assert not book.hold("s3", 0, {"ns/s3-0": "c"}, 8, 0.0, SETTINGS)  # max 2
    assert book.blocked(0, "x") == frozenset({"a", "b"})
    # a higher-priority nomination on a held node ends that hold; an equal one does not
    assert book.nominate("p", 0, {"ns/p-0": "b"}, [], 100.0) == []
    assert book.nominate("q", 3, {"ns/q-0": "a"}, [], 100.0) == ["s1"]
    assert book.nominate("r", 0, {"ns/r-0": "b"}, [], 100.0, reclaim=True) == ["s2"]
    assert book.nodes_of("s1") is None
    assert book.held_gpu_seconds(100.0) == 2 * 8 * 100.0


def test_a_hold_runs_out_and_cools_down() -> None:
    book = Nominations()
    assert book.hold("s", 0, {"ns/s-0": "a"}, 4, 0.0, SETTINGS)
    assert book.expire(600.0, SETTINGS) == []
    assert book.expire(601.0, SETTINGS) == ["s"]
    assert book.held_gpu_seconds(700.0) == 4 * 601.0
    assert not book.hold("s", 0, {"ns/s-0": "a"}, 4, 700.0, SETTINGS)  # others' turn
    assert book.hold("t", 0, {"ns/t-0": "a"}, 4, 700.0, SETTINGS)
    assert book.hold("s", 0, {"ns/s-0": "b"}, 4, 1202.0, SETTINGS)


def test_blocked_nodes_keep_placement_away() -> None:
    w = world("a", "b")
    book = Nominations()
    book.nominate("u", 5, {"ns/u-0": "a"}, [], now=0.0)
    placer = Placer(w.snapshot, default_scoring())
    decision = placer.decide(pod("ns/x", gpus=1, priority=1), excluded=book.blocked(1, "x"))
    assert decision.node == "b"


def test_starvation_nodes_pick_the_emptiest_node_that_would_fit() -> None:
    w = world("a", "b", "c")
    w.fill("a", 8, prefix="pa")
    w.fill("b", 3, prefix="pb")
    w.fill("c", 5, prefix="pc")
    assert starvation_nodes(preemptor(gpus=8), w.placer, w.index) == {"ns/u-0": "b"}
    gang = starvation_nodes(preemptor(gpus=8, members=2), w.placer, w.index)
    assert gang == {"ns/u-0": "b", "ns/u-1": "c"}


def test_starvation_nodes_skip_what_other_schedulers_hold() -> None:
    w = world("a", "b")
    w.fill("a", 2, prefix="ours")
    w.snapshot.assume_on(pod("ns/theirs", gpus=1), "b")  # not in the index: not ours
    assert starvation_nodes(preemptor(gpus=8), w.placer, w.index) == {"ns/u-0": "a"}
    assert starvation_nodes(preemptor(gpus=8), w.placer) == {"ns/u-0": "b"}
    assert starvation_nodes(preemptor(gpus=16), w.placer, w.index) is None
