"""Nominations and starvation holds (DESIGN §11): what is held, for whom, and for how long."""

from __future__ import annotations

from dataclasses import replace

from scheduler.placement import Placer, Snapshot, default_scoring
from scheduler.placement.gang import CLIQUE_LABEL
from scheduler.preemption import (
    Claimed,
    Nominations,
    PreemptionSettings,
    starvation_nodes,
    take_hold,
)
from tests.builders.placement import make_node, pod
from tests.builders.preemption import World, preemptor, world

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


def test_a_hold_asks_room_for_the_gpus_a_pods_claims_take() -> None:
    """U asks no GPU of placement, but its claims take 4: `a` (7 GPUs held by another
    scheduler's pods) is emptier, yet only `b` (8 of ours) would take it once our pods are
    gone."""
    w = world("a", "b")
    for i in range(7):
        w.snapshot.assume_on(pod(f"ns/theirs-{i}", gpus=1), "a")  # not in the index
    w.fill("b", 8, prefix="ours")
    claims = preemptor(gpus=0)
    assert take_hold(Nominations(), claims, w.placer, w.index, 0.0, SETTINGS) == {"ns/u-0": "a"}
    claimed = replace(claims, claimed=Claimed(gpus={"ns/u-0": 4}))
    book = Nominations()
    assert take_hold(book, claimed, w.placer, w.index, 0.0, SETTINGS) == {"ns/u-0": "b"}
    assert book.blocked(0, "x") == frozenset({"b"})


def _end(w: World, *units: str) -> None:
    """Units of one pod each (`fill`'s) finish."""
    for unit in units:
        w.snapshot.forget(f"ns/{unit}")
        w.index.remove(unit)


def _starved_on_a() -> tuple[World, Nominations]:
    """U (8 GPUs) holds `a` (3 GPUs in use, `b` 5) from 0 s; the hold has run out at 601 s."""
    w = world("a", "b")
    w.fill("a", 3, prefix="pa")
    w.fill("b", 5, prefix="pb")
    book = Nominations()
    assert take_hold(book, preemptor(gpus=8), w.placer, w.index, 0.0, SETTINGS) == {"ns/u-0": "a"}
    assert book.expire(601.0, SETTINGS) == ["u"]
    return w, book


def test_a_hold_whose_nodes_drained_is_renewed_on_them_though_others_are_emptier() -> None:
    """`a` drained (3 to 2 GPUs in use) during the hold, `b` more (5 to 1): U keeps `a` and holds
    it again at once, where the emptiest pick moved to `b` after a cooldown and gave what `a`
    had drained to the units behind U."""
    w, book = _starved_on_a()
    _end(w, "pa-0", "pb-0", "pb-1", "pb-2", "pb-3")
    assert take_hold(book, preemptor(gpus=8), w.placer, w.index, 601.0, SETTINGS) == {"ns/u-0": "a"}
    assert book.blocked(0, "x") == frozenset({"a"})


def test_a_renewed_hold_survives_one_window_without_an_end_but_not_two() -> None:
    """Pods that run longer than a hold end in lumps: `a` drained in the first hold (3 to 2 in
    use), nothing ended in the second, and the hold is renewed again (2 is still under the 3 in
    use when the hold it renewed began); a second window without an end lets it go. Measuring
    each window alone dropped it after the quiet one, and the units behind U refilled `a` in
    the cooldown (issue 27: the 2-GPU gangs' holds)."""
    w, book = _starved_on_a()
    _end(w, "pa-0")
    assert take_hold(book, preemptor(gpus=8), w.placer, w.index, 601.0, SETTINGS) == {"ns/u-0": "a"}
    assert book.expire(1202.0, SETTINGS) == ["u"]
    assert take_hold(book, preemptor(gpus=8), w.placer, w.index, 1202.0, SETTINGS) == {
        "ns/u-0": "a"
    }
    assert book.expire(1803.0, SETTINGS) == ["u"]
    assert take_hold(book, preemptor(gpus=8), w.placer, w.index, 1803.0, SETTINGS) is None
    assert book.blocked(0, "x") is None  # the others' turn


def test_a_hold_whose_nodes_did_not_drain_cools_down_then_moves_to_the_emptiest() -> None:
    w, book = _starved_on_a()
    _end(w, "pb-0", "pb-1", "pb-2", "pb-3")  # `a` still has 3 GPUs in use
    assert take_hold(book, preemptor(gpus=8), w.placer, w.index, 601.0, SETTINGS) is None
    assert book.blocked(0, "x") is None  # the others' turn
    assert take_hold(book, preemptor(gpus=8), w.placer, w.index, 1202.0, SETTINGS) == {
        "ns/u-0": "b"
    }


def test_a_hold_is_not_renewed_when_another_unit_was_refused_one() -> None:
    w = world("a", "b", "c")
    w.fill("a", 3, prefix="pa")
    w.fill("b", 5, prefix="pb")
    w.fill("c", 8, prefix="pc")
    book = Nominations()
    assert take_hold(book, preemptor(gpus=8), w.placer, w.index, 0.0, SETTINGS)
    assert book.hold("s1", 0, {"ns/s1-0": "b"}, 8, 100.0, SETTINGS)
    assert not book.hold("s2", 0, {"ns/s2-0": "c"}, 8, 150.0, SETTINGS)  # both holds taken
    assert book.expire(601.0, SETTINGS) == ["u"]
    _end(w, "pa-0")  # `a` drained, but `s2` waits for a hold: its turn comes first
    assert take_hold(book, preemptor(gpus=8), w.placer, w.index, 601.0, SETTINGS) is None
    assert book.hold("s2", 0, {"ns/s2-0": "c"}, 8, 601.0, SETTINGS)


def test_a_renewed_hold_moves_when_its_nodes_no_longer_serve_the_unit() -> None:
    """Drained, but U now asks more than `a` has: the emptiest nodes that serve it."""
    w, book = _starved_on_a()
    _end(w, "pa-0")
    previous = book.previous("u")
    assert previous is not None
    gang = preemptor(gpus=8, members=2)
    assert starvation_nodes(gang, w.placer, w.index, previous.nodes) == {
        "ns/u-0": "a",
        "ns/u-1": "b",
    }


def test_what_ends_for_a_unit_that_still_waits_keeps_its_cooldown_and_last_hold() -> None:
    """The scheduler releases a hold that ran out while its unit still waits (`waits=True`):
    the cooldown and the last hold stay (a plain release, the unit bound, forgets both)."""
    book = Nominations()
    assert book.hold("s", 0, {"ns/s-0": "a"}, 4, 0.0, SETTINGS, used=3000)
    assert book.expire(601.0, SETTINGS) == ["s"]
    book.release("s", 601.0, waits=True)
    assert not book.hold("s", 0, {"ns/s-0": "b"}, 4, 700.0, SETTINGS)  # still cooling down
    last = book.previous("s")
    assert last is not None
    assert (dict(last.nodes), last.used, last.since) == ({"ns/s-0": "a"}, 3000, 0.0)
    book.release("s", 700.0)
    assert book.previous("s") is None
    assert book.hold("s", 0, {"ns/s-0": "b"}, 4, 700.0, SETTINGS)


def test_a_hold_avoids_the_nodes_held_for_another_unit_it_must_not_overtake() -> None:
    """`v` holds `a`, the emptiest node; U of `v`'s priority holds `b`, where it may
    be placed (on `a` each would keep the other off, and neither could start there). U of a
    higher priority, whom `v`'s hold does not keep off, takes `a`."""
    w = world("a", "b")
    w.fill("a", 2, prefix="pa")
    w.fill("b", 5, prefix="pb")
    book = Nominations()
    assert take_hold(book, preemptor(gpus=8, key="v"), w.placer, w.index, 0.0, SETTINGS)
    assert take_hold(book, preemptor(gpus=8), w.placer, w.index, 0.0, SETTINGS) == {"ns/u-0": "b"}
    book.release("u")
    high = preemptor(gpus=8, priority=20)
    assert take_hold(book, high, w.placer, w.index, 0.0, SETTINGS) == {"ns/u-0": "a"}


def test_a_gang_that_prefers_cliques_keeps_its_held_nodes_in_one() -> None:
    """The guard's trial placement places as the scheduler does (DESIGN §13): on a last hold's
    nodes of two cliques, a gang that prefers cliques stays in one; one that does not spreads."""
    nodes = Snapshot(
        make_node(name, gpus=4, labels={CLIQUE_LABEL: clique})
        for name, clique in (("n1", "c1"), ("n2", "c2"), ("n3", "c1"))
    )
    placer = Placer(nodes, default_scoring())
    last = {"ns/u-0": "n1", "ns/u-1": "n2", "ns/u-2": "n3"}
    prefers = preemptor(gpus=4, members=2, prefer_clique=True)
    assert starvation_nodes(prefers, placer, None, last) == {"ns/u-0": "n1", "ns/u-1": "n3"}
    assert starvation_nodes(preemptor(gpus=4, members=2), placer, None, last) == {
        "ns/u-0": "n1",
        "ns/u-1": "n2",
    }
