"""`excluded` nodes (held for other pods, DESIGN §11): never chosen, counted as held, the same
decision as `allowed` = every other node, on both of the Placer's paths and in `place_gang`."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.placement import Placer, Scoring, Snapshot, default_scoring, place_gang
from scheduler.placement.pick import REASON_HELD
from tests.builders.placement import make_node, pod

PLAIN = Scoring.from_weights({"binpack": 10.0, "topology": 5.0}, candidate_limit=4)


def cluster(used: list[int]) -> Snapshot:
    snapshot = Snapshot(make_node(f"n{i}", gpus=8) for i in range(len(used)))
    for i, gpus in enumerate(used):
        if gpus:
            snapshot.assume_on(pod(f"ns/busy-{i}", gpus=gpus), f"n{i}")
    return snapshot


@pytest.mark.parametrize("scoring", [default_scoring(), PLAIN], ids=["memo", "pick"])
@settings(max_examples=40, deadline=None)
@given(
    used=st.lists(st.integers(0, 8), min_size=1, max_size=6),
    held=st.sets(st.integers(0, 5)),
    gpus=st.sampled_from([1, 2, 4, 8]),
)
def test_excluded_is_allowed_complement(
    scoring: Scoring, used: list[int], held: set[int], gpus: int
) -> None:
    snapshot = cluster(used)
    placer = Placer(snapshot, scoring)
    excluded = frozenset(f"n{i}" for i in held if i < len(used))
    others = frozenset(snapshot.names()) - excluded
    u = pod("ns/u", gpus=gpus)
    got = placer.decide(u, excluded=excluded)
    want = placer.decide(u, allowed=others)
    assert got.assignment == want.assignment
    assert got.node not in excluded
    if got.assignment is None and excluded:
        assert got.reasons.get(REASON_HELD) == len(excluded)


def test_a_gang_avoids_held_nodes() -> None:
    snapshot = cluster([0, 0, 0])
    placer = Placer(snapshot, default_scoring())
    members = [pod(f"ns/g-{i}", gpus=8) for i in range(2)]
    placed = place_gang(members, placer, excluded=frozenset({"n0"}))
    assert placed.ok
    assert {a.node for a in placed.assignments.values()} == {"n1", "n2"}
    assert not place_gang(members, placer, excluded=frozenset({"n0", "n1"})).ok
