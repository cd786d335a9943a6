"""Hypothesis: the victim search over random clusters, queues, priorities, gangs and budgets.

Whatever it chooses: no gang is cut beyond its spares; all of U is placeable and admitted once
the victims are gone; reclaim never takes a queue below its min; no victim could be given back
with U still placeable and admitted on its nodes (greedy, then reprieve); the live snapshot and
the usage are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.placement import Placer, Scoring, Snapshot, default_scoring, place_gang
from scheduler.preemption import (
    Budget,
    PreemptionSettings,
    Preemptor,
    VictimChoice,
    VictimReason,
)
from scheduler.preemption.eligibility import demand_of
from scheduler.quota import ROOT, Usage, admission_problem, within_guarantee
from tests.builders.placement import pod
from tests.builders.preemption import GPU, World, queue, world

LIMITED = Scoring.from_weights({"binpack": 10.0, "topology": 5.0}, candidate_limit=2)
"""A scoring with a candidate limit: the Placer decides with `pick` itself."""

TREES = {
    "trivial": [],
    "two": [queue("a", min={GPU: 8}, max={GPU: 24}), queue("b", min={GPU: 2})],
    "nested": [
        queue("org", min={GPU: 12}, max={GPU: 24}),
        queue("a", parent="org", min={GPU: 8}),
        queue("b", parent="org", min={GPU: 2}, max={GPU: 12}),
        queue("c", min={GPU: 4}),
    ],
}


@dataclass
class Case:
    world: World
    preemptor: Preemptor
    budgets: tuple[Budget, ...]
    settings: PreemptionSettings


@st.composite
def cases(draw: st.DrawFn) -> Case:
    shape = draw(st.sampled_from(sorted(TREES)))
    leaves = (
        ["default"] if shape == "trivial" else [q.name for q in TREES[shape] if q.name != "org"]
    )
    names = [f"n{i}" for i in range(draw(st.integers(1, 4)))]
    scoring = draw(st.sampled_from([default_scoring(), LIMITED]))
    w = world(*names, gpus=draw(st.sampled_from([4, 8])), queues=TREES[shape], scoring=scoring)
    pods = draw(running(w, leaves))
    budgets = (
        tuple(
            Budget(name=f"ns/pdb{i}", allowed=draw(st.integers(0, 2)), pods=frozenset(chosen))
            for i, chosen in enumerate(draw(st.lists(st.sets(st.sampled_from(pods)), max_size=2)))
        )
        if pods
        else ()
    )
    u = Preemptor(
        key="u",
        pods=tuple(
            pod(f"ns/p-{i}", gpus=draw(st.sampled_from([1, 2, 4, 8])))
            for i in range(draw(st.integers(1, 2)))
        ),
        leaf=draw(st.sampled_from(leaves)),
        priority=draw(st.integers(1, 5)),
    )
    config = PreemptionSettings(
        pdb_required=draw(st.booleans()),
        reclaim=draw(st.sampled_from([True, True, False])),
        candidate_limit=draw(st.sampled_from([1, 3, 100])),
    )
    return Case(world=w, preemptor=u, budgets=budgets, settings=config)


@st.composite
def running(draw: st.DrawFn, w: World, leaves: list[str]) -> list[str]:
    """Start up to 12 units (gangs of 1-3 members) where they fit; their pod keys."""
    pods: list[str] = []
    for u in range(draw(st.integers(0, 12))):
        members = draw(st.integers(1, 3))
        gpus = draw(st.sampled_from([1, 1, 2, 4]))
        placed = _place(w, [pod(f"ns/u{u}-{m}", gpus=gpus) for m in range(members)])
        if placed is None:
            continue
        w.run(
            f"u{u}",
            placed,
            leaf=draw(st.sampled_from(leaves)),
            priority=draw(st.integers(0, 3)),
            started=draw(st.integers(0, 100)),
            spare=draw(st.integers(0, members - 1)),
        )
        pods += [p.key for _n, p in placed]
    return pods


def _place(w: World, pods: list) -> list | None:  # type: ignore[type-arg]
    """Each pod on the first node where it fits (tried on a copy); None when one does not."""
    trial = w.snapshot.copy()
    placer = Placer(trial, w.scoring)
    out = []
    for p in pods:
        decision = placer.decide(p, explain=False)
        if decision.assignment is None:
            return None
        trial.assume(p, decision.assignment)
        out.append((decision.assignment.node, p))
    return out


def usage_without(w: World, victims: set[str]) -> Usage:
    after = Usage(w.tree)
    for unit in w.index:
        for key in unit.pods:
            charge = w.usage.charged(key)
            if key not in victims and charge is not None:
                after.charge(key, charge)
    return after


def placeable(w: World, u: Preemptor, victims: set[str], nodes: set[str] | None) -> bool:
    """Does all of U fit (on `nodes` only, when given) without `victims`?"""
    copy = w.snapshot.copy()
    for key in victims:
        copy.forget(key)
    if nodes is not None:
        copy = Snapshot(copy.node(n).clone() for n in sorted(nodes))
    return place_gang(u.pods, Placer(copy, w.scoring), topology=u.topology).ok


def admitted(w: World, u: Preemptor, victims: set[str]) -> bool:
    if u.leaf not in w.tree.paths:
        return True
    return admission_problem(w.tree, usage_without(w, victims), u.leaf, demand_of(u)) is None


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_every_choice_keeps_the_rules(case: Case) -> None:
    w, u = case.world, case.preemptor
    before = (w.snapshot.generation, {n: dict(s.pods) for n, s in w.snapshot.nodes.items()})
    usage_version = w.usage.version
    guaranteed = within_guarantee(w.tree, w.usage, u.leaf, demand_of(u))
    result = w.find(u, case.settings, case.budgets)
    assert (w.snapshot.generation, {n: dict(s.pods) for n, s in w.snapshot.nodes.items()}) == before
    assert w.usage.version == usage_version
    if not isinstance(result, VictimChoice):
        assert result.reason.startswith("preemption: ")
        return
    victims = set(result.pods)
    for eviction in result.evictions:
        unit = w.index.get(eviction.unit)
        assert unit is not None
        assert set(eviction.pods) == set(unit.pods) or len(eviction.pods) <= unit.spare
        if eviction.reason is VictimReason.PREEMPT:
            assert unit.leaf == u.leaf
            assert unit.priority < u.priority
        else:
            assert guaranteed
            assert unit.leaf != u.leaf
    assert placeable(w, u, victims, None)
    assert admitted(w, u, victims)
    assert not (case.settings.pdb_required and result.violated)
    _check_floors(w, u, result, victims)
    _check_reprieve(w, u, result, victims)


def _check_floors(w: World, u: Preemptor, result: VictimChoice, victims: set[str]) -> None:
    after = usage_without(w, victims)
    ours = {*w.tree.paths.get(u.leaf, ()), ROOT}
    for eviction in result.evictions:
        unit = w.index.get(eviction.unit)
        if eviction.reason is not VictimReason.RECLAIM or unit is None:
            continue
        for q in w.tree.paths[unit.leaf]:
            if q in ours:
                break
            for r, low in w.tree.specs[q].min.items():
                now, was = after.used(q).get(r, 0), w.usage.used(q).get(r, 0)
                assert now >= low or now == was, (q, r, now, low)


def _check_reprieve(w: World, u: Preemptor, result: VictimChoice, victims: set[str]) -> None:
    """No eviction (a whole unit, or one spare member) could be given back."""
    nodes = set(result.nodes.values())
    for eviction in result.evictions:
        unit = w.index.get(eviction.unit)
        assert unit is not None
        whole = set(eviction.pods) == set(unit.pods)
        groups = [set(eviction.pods)] if whole else [{p} for p in eviction.pods]
        for back in groups:
            rest = victims - back
            assert not (placeable(w, u, rest, nodes) and admitted(w, u, rest)), back
