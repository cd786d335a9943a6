"""`FastPicker` makes the decisions of `pick` (every node ranked), with memoised verdicts, and
follows every change to its snapshot by itself."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.model import NvlinkFabric
from scheduler.placement import PodRequest, Scoring, WeightedScore, pick
from scheduler.placement.fgd import FgdScore, Fragmentation, PodShape, TypicalPod
from scheduler.placement.fragscores import (
    FragmentationScore,
    bestfit_score,
    least_allocated_score,
)
from scheduler.placement.node_slots import Interner
from scheduler.placement.scores import DEFAULT_WEIGHTS
from scheduler.placement.verdict_memo import FastPicker, Learner, picker_for, pod_class
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
@given(st.integers(0, 10_000), st.sampled_from(sorted(scorings())))
def test_same_decisions_as_pick(seed: int, name: str):
    rng = random.Random(seed)
    cluster = small_cluster(rng)
    scoring = scorings()[name]
    fast = FastPicker(cluster.snapshot, scoring)
    for k in range(40):
        pod = random_pod(rng, f"default/p{k}")
        expected = pick(pod, cluster.snapshot, scoring, explain=False)
        got = fast.pick(pod)
        assert (got[0] if got else None) == expected.assignment
        if got is not None:
            cluster.bind(pod, got[0])
        if k % 7 == 6:
            cluster.unbind(f"default/p{k - 3}")


def test_a_learning_score_invalidates_the_cache():
    rng = random.Random(3)
    cluster = small_cluster(rng)
    learner = FragmentationScore()
    scoring = Scoring(scores=(WeightedScore("fragmentation", 1.0, learner),), candidate_limit=0)
    fast = FastPicker(cluster.snapshot, scoring)
    assert isinstance(learner, Learner)
    for k in range(60):
        pod = random_pod(rng, f"default/p{k}")
        got = fast.pick(pod)
        expected = pick(pod, cluster.snapshot, scoring, explain=False)
        assert (got[0] if got else None) == expected.assignment
        if got is not None:
            cluster.bind(pod, got[0])
    assert learner.version >= 1


def test_feasible_and_assignment_on():
    cluster = Cluster.from_specs(
        [NodeSpec(name="b", gpus=2), NodeSpec(name="a", gpus=1), NodeSpec(name="c", gpus=2)]
    )
    fast = FastPicker(cluster.snapshot, Scoring(scores=(), candidate_limit=0))
    two = PodRequest(key="x", gpus=2)
    assert fast.feasible(two) == ["b", "c"]
    found = fast.assignment_on(two, "b")
    assert found is not None
    assert (found.node, found.gpus) == ("b", (0, 1))
    assert fast.assignment_on(two, "a") is None
    assert fast.pick(PodRequest(key="y", gpus=3)) is None


def test_pod_class_ignores_only_the_key_and_pod_group():
    a = PodRequest(key="a", cpu_milli=1, gpus=1)
    assert pod_class(a) == pod_class(PodRequest(key="b", cpu_milli=1, gpus=1, pod_group="g"))
    assert pod_class(a) != pod_class(PodRequest(key="a", cpu_milli=2, gpus=1))


def test_candidate_limits_are_refused():
    cluster = Cluster.from_specs([NodeSpec(name="a")])
    assert not FastPicker.supports(Scoring(scores=(), candidate_limit=64))
    assert picker_for(cluster.snapshot, Scoring(scores=(), candidate_limit=64)) is None
    assert picker_for(cluster.snapshot, Scoring(scores=(), candidate_limit=0)) is not None
    with pytest.raises(ValueError, match="candidate_limit == 0"):
        FastPicker(cluster.snapshot, Scoring(scores=(), candidate_limit=64))


def test_changes_made_behind_its_back_are_seen():
    """Nodes added, removed and replaced and pods bound straight on the snapshot: no reporting."""
    cluster = Cluster.from_specs([NodeSpec(name="b", gpus=8), NodeSpec(name="c", gpus=8)])
    scoring = Scoring.from_weights({"binpack": 1.0}, candidate_limit=0)
    fast = FastPicker(cluster.snapshot, scoring)
    four = PodRequest(key="p", gpus=4)
    assert fast.decide(four).node == "b"
    cluster.bind(PodRequest(key="q", gpus=2), fast.decide(PodRequest(key="q", gpus=2)).assignment)  # type: ignore[arg-type]
    cluster.add_spec(NodeSpec(name="a", gpus=8))
    assert fast.feasible(four) == ["a", "b", "c"]  # in name order, whatever the slots
    assert fast.decide(four).node == "b"  # binpack: the used node
    cluster.remove_node("b")
    assert fast.decide(four).node == "a"  # ties: the lowest name
    cluster.add_spec(NodeSpec(name="a", gpus=2))  # replaced: too small now
    assert fast.decide(four).node == "c"
    cluster.remove_node("c")
    decision = fast.decide(four)
    assert decision.assignment is None
    assert decision.message() == pick(four, cluster.snapshot, scoring).message()


def test_long_runs_rebuild_the_heap_and_bulk_updates_stay_exact():
    """Many changes between two uses of a class (the vectorised update), a heap that keeps only
    the best 4 nodes, and a heap grown long enough to be compacted: still `pick`'s choices."""
    cluster = Cluster.from_specs(NodeSpec(name=f"n{i:02d}", gpus=4) for i in range(80))
    scoring = Scoring.from_weights({"binpack": 10.0, "topology": 5.0}, candidate_limit=0)
    fast = FastPicker(cluster.snapshot, scoring, heap_top=4)
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
