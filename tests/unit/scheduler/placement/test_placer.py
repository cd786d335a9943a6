"""`Placer` makes the decisions of `pick` on both of its paths (the verdict memo when every node is
ranked, `pick` with kept verdicts under a candidate limit) and follows every change to its
snapshot by itself."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.model import NvlinkFabric
from scheduler.placement import (
    Assignment,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Operator,
    Placer,
    PodRequest,
    Scoring,
    WeightedScore,
)
from scheduler.placement.class_verdicts import Verdicts, pod_class
from scheduler.placement.fgd import FgdScore, Fragmentation, PodShape, TypicalPod
from scheduler.placement.fragscores import (
    FragmentationScore,
    bestfit_score,
    least_allocated_score,
)
from scheduler.placement.pick import pick
from scheduler.placement.scores import DEFAULT_WEIGHTS, Learner
from scheduler.placement.slot_records import Interner
from scheduler.placement.verdict_memo import VerdictMemo
from scheduler.sim.cluster import Cluster, NodeSpec

GIB = 1 << 30
TYPICAL = (
    TypicalPod(PodShape(4000, 500, 1), 0.4),
    TypicalPod(PodShape(8000, 1000, 1), 0.4),
    TypicalPod(PodShape(8000), 0.2),
)


def small_cluster(rng: random.Random) -> Cluster:
    specs = []
    for i in range(rng.randint(3, 7)):
        kind = rng.choice(("dgx", "pairs", "t4", "cpu"))
        gpus = {"dgx": 8, "pairs": 4, "t4": 2, "cpu": 0}[kind]
        fabric = NvlinkFabric.DIRECT if kind == "pairs" else NvlinkFabric.NVSWITCH
        model = "T4" if kind == "t4" else "H100"
        cpu = rng.choice((16_000, 32_000, 64_000))
        specs.append(NodeSpec(name=f"n{i}", gpus=gpus, model=model, cpu_milli=cpu, fabric=fabric))
    return Cluster.from_specs(specs)


def random_pod(rng: random.Random, key: str) -> PodRequest:
    cpu = rng.choice((1000, 4000, 8000))
    kind = rng.random()
    models = frozenset({"T4"}) if rng.random() < 0.15 else frozenset()
    if kind < 0.2:
        return PodRequest(key=key, cpu_milli=cpu, memory=GIB)
    if kind < 0.55:
        share = rng.choice((250, 500, 700))
        return PodRequest(key=key, cpu_milli=cpu, gpu_milli=share, gpu_models=models)
    gpus = rng.choice((1, 1, 2, 4))
    return PodRequest(key=key, cpu_milli=cpu, gpus=gpus, gpu_models=models)


def scorings() -> dict[str, Scoring]:
    def single(fn: object) -> Scoring:
        return Scoring(scores=(WeightedScore("s", 1.0, fn),), candidate_limit=0)  # type: ignore[arg-type]

    return {
        "shipped weights": Scoring.from_weights(DEFAULT_WEIGHTS, candidate_limit=0),
        "bestfit": single(bestfit_score),
        "spread": single(least_allocated_score),
        "fgd": single(FgdScore(Fragmentation(TYPICAL))),
    }


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.sampled_from(sorted(scorings())), st.booleans())
def test_same_decisions_as_pick(seed: int, name: str, memo: bool):
    """With or without the memo (`memo=False`: the victim search's short-lived snapshots)."""
    rng = random.Random(seed)
    cluster = small_cluster(rng)
    scoring = scorings()[name]
    placer = Placer(cluster.snapshot, scoring, memo=memo)
    for k in range(40):
        pod = random_pod(rng, f"default/p{k}")
        expected = pick(pod, cluster.snapshot, scoring, explain=False)
        got = placer.decide(pod, explain=False)
        assert (got.assignment, got.score) == (expected.assignment, expected.score)
        if expected.assignment is None:
            assert got.message() == expected.message()
        assert placer.best_assignment(pod) == expected.assignment
        if got.assignment is not None:
            cluster.bind(pod, got.assignment)
        if k % 7 == 6:
            cluster.unbind(f"default/p{k - 3}")


def test_a_learning_score_invalidates_the_cache():
    rng = random.Random(3)
    cluster = small_cluster(rng)
    learner = FragmentationScore()
    scoring = Scoring(scores=(WeightedScore("fragmentation", 1.0, learner),), candidate_limit=0)
    placer = Placer(cluster.snapshot, scoring)
    assert isinstance(learner, Learner)
    for k in range(60):
        pod = random_pod(rng, f"default/p{k}")
        got = placer.best_assignment(pod)
        expected = pick(pod, cluster.snapshot, scoring, explain=False)
        assert got == expected.assignment
        if got is not None:
            cluster.bind(pod, got)
    assert learner.version >= 1


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000))
def test_refits_keep_the_decisions_of_pick(seed: int):
    """The shipped scoring with its fragmentation score refitted every 4 pods from the 16th (no
    tolerance): through each refit the memo keeps its classes' rejections and fits and scores
    the fits again, GPU pods that differ only in memory share their verdicts, and every
    decision is still `pick`'s."""
    rng = random.Random(seed)
    cluster = small_cluster(rng)
    scoring = Scoring.from_weights(DEFAULT_WEIGHTS, candidate_limit=0)
    (learner,) = scoring.learners()
    assert isinstance(learner, FragmentationScore)
    learner.refit_tolerance, learner.max_refit = 0.0, 4
    placer = Placer(cluster.snapshot, scoring)
    for k in range(80):
        pod = replace(random_pod(rng, f"default/p{k}"), memory=rng.choice((GIB, 8 * GIB)))
        got = placer.decide(pod, explain=False)
        expected = pick(pod, cluster.snapshot, scoring, explain=False)
        assert (got.assignment, got.score) == (expected.assignment, expected.score)
        if got.assignment is not None:
            cluster.bind(pod, got.assignment)
        if k % 5 == 4:
            cluster.unbind(f"default/p{k - 2}")
    assert learner.version >= 5


class CountingMemo(VerdictMemo):
    """The memo, counting its rescores after a refit (`_rescore_states`)."""

    rescores = 0

    def _rescore_states(self, pod: PodRequest, verdicts: Verdicts) -> None:
        self.rescores += 1
        super()._rescore_states(pod, verdicts)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000))
def test_refits_rescore_only_the_feasible_states_and_keep_the_decisions_of_pick(seed: int):
    """Refits every 4 pods on 40 nodes, a heap of the best 3 only: the classes that read no
    labels bring their changed slots up to date and score their feasible states again (one
    array spread over the slots); every decision and score is still `pick`'s and a new memo's
    on the same snapshot."""
    rng = random.Random(seed)
    cluster = Cluster.from_specs(
        NodeSpec(name=f"n{i:02d}", gpus=rng.choice((0, 4, 8)), cpu_milli=32_000) for i in range(40)
    )
    scoring = Scoring.from_weights(DEFAULT_WEIGHTS, candidate_limit=0)
    (learner,) = scoring.learners()
    assert isinstance(learner, FragmentationScore)
    learner.refit_tolerance, learner.max_refit = 0.0, 4
    memo = CountingMemo(cluster.snapshot, scoring, heap_top=3)
    bound: list[str] = []
    for k in range(120):
        pod = random_pod(rng, f"default/p{k}")
        got = memo.decide(pod, explain=False)
        expected = pick(pod, cluster.snapshot, scoring, explain=False)
        assert (got.assignment, got.score) == (expected.assignment, expected.score)
        fresh = VerdictMemo(cluster.snapshot, scoring, heap_top=3).decide(pod, explain=False)
        assert (fresh.assignment, fresh.score) == (got.assignment, got.score)
        if got.assignment is not None:
            cluster.bind(pod, got.assignment)
            bound.append(pod.key)
        if len(bound) > 12:
            cluster.unbind(bound.pop(rng.randrange(len(bound))))
    assert learner.version >= 5
    assert memo.rescores > 0


@pytest.mark.parametrize("limit", [pytest.param(0, id="memo"), pytest.param(64, id="plain")])
def test_feasible_and_assignment_on(limit: int):
    cluster = Cluster.from_specs(
        [NodeSpec(name="b", gpus=2), NodeSpec(name="a", gpus=1), NodeSpec(name="c", gpus=2)]
    )
    placer = Placer(cluster.snapshot, Scoring(scores=(), candidate_limit=limit))
    two = PodRequest(key="x", gpus=2)
    assert placer.feasible(two) == ("b", "c")
    found = placer.assignment_on(two, "b")
    assert found is not None
    assert (found.node, found.gpus) == ("b", (0, 1))
    assert placer.assignment_on(two, "a") is None
    assert placer.best_assignment(PodRequest(key="y", gpus=3)) is None


@pytest.mark.parametrize("limit", [pytest.param(0, id="memo"), pytest.param(64, id="plain")])
def test_feasible_names_follow_every_change_and_an_unchanged_answer_is_the_same_tuple(
    limit: int,
):
    """The same class asked again: a node that fills up, a node removed and another added (in
    the slot it left): each answer is the nodes that fit then. With the memo, an answer that
    did not change is the very tuple given before (claims know their node list by it)."""
    cluster = Cluster.from_specs([NodeSpec(name=n, gpus=2) for n in ("a", "b", "c")])
    placer = Placer(cluster.snapshot, Scoring(scores=(), candidate_limit=limit))
    two = PodRequest(key="x", gpus=2)
    first = placer.feasible(two)
    assert first == ("a", "b", "c")
    assert (placer.feasible(two) is first) is (limit == 0)
    cluster.bind(PodRequest(key="full", gpus=2), Assignment(node="b", gpus=(0, 1)))
    assert placer.feasible(two) == ("a", "c")
    assert placer.feasible(two) is not first
    cluster.remove_node("a")
    cluster.add_spec(NodeSpec(name="d", gpus=2))
    assert placer.feasible(two) == ("c", "d")
    cluster.unbind("full")
    assert placer.feasible(two) == ("b", "c", "d")


def test_pod_class_ignores_only_the_key_and_pod_group():
    a = PodRequest(key="a", cpu_milli=1, gpus=1)
    assert pod_class(a) == pod_class(PodRequest(key="b", cpu_milli=1, gpus=1, pod_group="g"))
    assert pod_class(a) != pod_class(PodRequest(key="a", cpu_milli=2, gpus=1))


def test_the_memo_refuses_a_candidate_limit_and_the_placer_decides_as_pick_with_it():
    """With a limit the first feasible nodes in the snapshot's order decide (binpack order:
    used nodes first), which a memo could not reproduce; the Placer takes `pick`'s path."""

    def emptiest(limit: int) -> Scoring:  # binpack turned round: the emptiest node wins
        return Scoring.from_weights(
            {"binpack": -1.0}, prefer_used_nodes=False, candidate_limit=limit
        )

    cluster = Cluster.from_specs(NodeSpec(name=f"n{i}", gpus=8) for i in range(4))
    with pytest.raises(ValueError, match="candidate_limit == 0"):
        VerdictMemo(cluster.snapshot, emptiest(1))
    limited, ranked = Placer(cluster.snapshot, emptiest(1)), Placer(cluster.snapshot, emptiest(0))
    cluster.snapshot.assume_on(PodRequest(key="busy", gpus=1, cpu_milli=8000), "n0")
    one = PodRequest(key="one", gpus=1)
    assert limited.decide(one).node == "n0"  # the used node is visited first, and only it scored
    assert ranked.decide(one).node == "n1"  # every node ranked: an idle one
    assert limited.decide(one) == pick(one, cluster.snapshot, emptiest(1))


@pytest.mark.parametrize("limit", [pytest.param(0, id="memo"), pytest.param(64, id="plain")])
def test_match_fields_pin_a_pod_to_a_node_by_name_among_alike_ones(limit: int):
    """Three nodes alike but for their names (one state for the memo): a required term's
    `matchFields` on `metadata.name` picks by name, as the DaemonSet controller pins its pods."""
    cluster = Cluster.from_specs([NodeSpec(name=n) for n in ("a", "b", "c")])
    placer = Placer(cluster.snapshot, Scoring(scores=(), candidate_limit=limit))

    def pinned(key: str, operator: Operator, *names: str) -> PodRequest:
        named = NodeSelectorRequirement(key="metadata.name", operator=operator, values=names)
        return PodRequest(key=key, gpus=1, affinity=(NodeSelectorTerm(match_fields=(named,)),))

    assert placer.decide(pinned("x", Operator.IN, "b")).node == "b"
    assert placer.decide(pinned("y", Operator.NOT_IN, "a")).node == "b"
    assert placer.best_assignment(pinned("z", Operator.IN, "c")) == Assignment(node="c", gpus=(0,))
    refused = placer.decide(pinned("w", Operator.IN, "elsewhere"))
    assert refused.assignment is None
    assert refused.message() == (
        "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
    )


@pytest.mark.parametrize("limit", [pytest.param(0, id="memo"), pytest.param(64, id="plain")])
def test_changes_made_behind_its_back_are_seen(limit: int):
    """Nodes added, removed and replaced and pods bound straight on the snapshot: no reporting."""
    cluster = Cluster.from_specs([NodeSpec(name="b", gpus=8), NodeSpec(name="c", gpus=8)])
    scoring = Scoring.from_weights({"binpack": 1.0}, candidate_limit=limit)
    placer = Placer(cluster.snapshot, scoring)
    four = PodRequest(key="p", gpus=4)
    assert placer.decide(four).node == "b"
    two = PodRequest(key="q", gpus=2)
    cluster.bind(two, cast("Assignment", placer.decide(two).assignment))
    cluster.add_spec(NodeSpec(name="a", gpus=8))
    assert placer.feasible(four) == ("a", "b", "c")  # in name order, whatever the slots
    assert placer.decide(four).node == "b"  # binpack: the used node
    cluster.remove_node("b")
    assert placer.decide(four).node == "a"  # ties: the lowest name
    cluster.add_spec(NodeSpec(name="a", gpus=2))  # replaced: too small now
    assert placer.decide(four).node == "c"
    cluster.remove_node("c")
    decision = placer.decide(four)
    assert decision.assignment is None
    assert decision.message() == pick(four, cluster.snapshot, scoring).message()


def test_a_refusal_lasts_while_the_snapshot_stands_and_across_a_trial_undone():
    """`best_assignment` remembers a class that fits nowhere (but held nodes) until the snapshot
    changes; a trial whose changes are all undone (a gang's members tried) leaves it standing,
    and one that begins after an unseen change brings nothing stale back."""
    cluster = Cluster.from_specs([NodeSpec(name="a", gpus=1), NodeSpec(name="b", gpus=1)])
    snapshot = cluster.snapshot
    placer = Placer(snapshot, Scoring.from_weights({"binpack": 1.0}, candidate_limit=0))
    snapshot.assume_on(PodRequest(key="x", gpus=1), "a")
    one = PodRequest(key="one", gpus=1)
    assert placer.best_assignment(one, excluded={"b"}) is None  # refused: b is held
    assert placer.best_assignment(PodRequest(key="two", gpus=1), excluded={"b"}) is None
    found = cast("Assignment", placer.best_assignment(one))  # not held: the class fits on b
    assert found.node == "b"
    with placer.trial():  # a member tried on b and taken off again
        snapshot.assume(PodRequest(key="m", gpus=1), found)
        assert placer.best_assignment(one) is None
        snapshot.forget("m")
    assert placer.best_assignment(one, excluded={"b"}) is None
    assert cast("Assignment", placer.best_assignment(one)).node == "b"
    snapshot.forget("x")  # nothing decided since
    with placer.trial():
        snapshot.assume(PodRequest(key="m", gpus=1), found)
        snapshot.forget("m")
    assert cast("Assignment", placer.best_assignment(one, excluded={"b"})).node == "a"  # free


def test_a_refused_class_is_explained_once_while_the_snapshot_stands():
    """`decide`: a second pod of a refused class gets the first one's reasons under its own key,
    and with `explain` False the candidates' alone, as `pick` says; after a change, afresh."""
    cluster = Cluster.from_specs([NodeSpec(name="a", gpus=1), NodeSpec(name="c", gpus=0)])
    snapshot = cluster.snapshot
    scoring = Scoring.from_weights({"binpack": 1.0}, candidate_limit=0)
    placer = Placer(snapshot, scoring)
    snapshot.assume_on(PodRequest(key="x", gpus=1), "a")
    for key in ("one", "two"):
        for explain in (True, False):
            pod = PodRequest(key=key, gpus=1)
            decision = placer.decide(pod, explain=explain)
            assert decision == pick(pod, snapshot, scoring, explain=explain)
            assert decision.pod == key
            # without explain only the candidates count: nodes with a GPU free, none here
            assert sum(decision.reasons.values()) == (2 if explain else 0)
    snapshot.forget("x")
    assert placer.decide(PodRequest(key="three", gpus=1)).node == "a"


def test_long_runs_rebuild_the_heap_and_bulk_updates_stay_exact():
    """Many changes between two uses of a class (the vectorised update), a heap that keeps only
    the best 4 nodes, and a heap grown long enough to be compacted: still `pick`'s choices (the
    memo itself, with a heap smaller than the Placer's)."""
    cluster = Cluster.from_specs(NodeSpec(name=f"n{i:02d}", gpus=4) for i in range(80))
    scoring = Scoring.from_weights({"binpack": 10.0, "topology": 5.0}, candidate_limit=0)
    fast = VerdictMemo(cluster.snapshot, scoring, heap_top=4)
    rng = random.Random(7)
    rare = PodRequest(key="rare", gpus=3, cpu_milli=1000)
    bound: list[str] = []
    for k in range(1500):
        pod = PodRequest(key=f"p{k}", gpu_milli=rng.choice((250, 500)), cpu_milli=100)
        got = fast.decide(pod)
        if k % 25 == 0:
            assert got.assignment == pick(pod, cluster.snapshot, scoring).assignment
        if k % 100 == 50:
            assert fast.decide(rare).assignment == pick(rare, cluster.snapshot, scoring).assignment
        if got.assignment is not None:
            cluster.bind(pod, got.assignment)
            bound.append(pod.key)
        if len(bound) > 150:
            cluster.unbind(bound.pop(rng.randrange(len(bound))))
    assert len(bound) == 150


def test_interner_keeps_ids_of_states_left_for_a_while_and_never_reuses_one():
    interner: Interner[str] = Interner(idle=2)
    a = interner.take("a", None)
    assert interner.take("a", None) == a  # two slots in state a
    b = interner.take("b", "a")  # one moves on to b
    assert interner.take("a", "b") == a  # and back: the same id
    interner.take(None, "a")
    interner.take(None, "a")  # nobody in a now: its id is kept while few states are idle
    assert interner.take("a", None) == a
    interner.take(None, "a")
    for key in ("c", "d", "e"):  # three more states, each left at once: a and b are evicted
        interner.take(key, None)
        interner.take(None, key)
    fresh = interner.take("a", None)
    assert fresh not in {a, b}
    assert len(interner) == 3  # a (in use), d and e (idle)
