"""The memo's per-state share placements and scores (`ShareMemo`), shared between share pod
classes, give `pick`'s decisions: for classes that differ in cpu, memory, `gpu-memory` and
`gpu-compute`, across binds and unbinds and a learning score's refits."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.shares import SHARED_GPU_RESOURCE, ContainerShare
from scheduler.placement import Placer, PodRequest, Scoring, default_scoring, share_memo
from scheduler.placement.filters import filter_node, share_devices
from scheduler.placement.fragscores import FragmentationScore
from scheduler.placement.gpushare import GpuShare
from scheduler.placement.node import Assignment, NodeState
from scheduler.placement.pick import pick
from scheduler.placement.scores import (
    DEFAULT_WEIGHTS,
    SCORE_FACTORIES,
    SCORE_FUNCTIONS,
    WeightedScore,
    gpu_pod_node_reads,
    score_reads,
)
from scheduler.placement.share_memo import ShareMemo
from scheduler.sim.cluster import Cluster, NodeSpec
from tests.builders.placement import GIB, bind_and_churn, shared_node
from tests.builders.placement import share as buildshare
from tests.builders.placement import share_pod as buildsharepod


def share_pod(rng: random.Random, key: str) -> PodRequest:
    asks = tuple(
        ContainerShare(
            container=f"c{i}",
            init=False,
            resource=SHARED_GPU_RESOURCE,
            replicas=1,
            memory_bytes=rng.choice((10, 20, 40, 70)) * GIB,
            compute_percent=rng.choice((None, 25, 50, 90)),
        )
        for i in range(rng.choice((1, 1, 1, 2)))
    )
    return PodRequest(
        key=key,
        cpu_milli=rng.choice((1000, 4000, 60_000)),
        memory=rng.choice((4, 16)) * GIB,
        extended={SHARED_GPU_RESOURCE: len(asks)},
        shares=asks,
    )


def any_pod(rng: random.Random, key: str) -> PodRequest:
    if rng.random() < 0.6:
        return share_pod(rng, key)
    if rng.random() < 0.3:
        return PodRequest(key=key, cpu_milli=4000, memory=GIB)
    if rng.random() < 0.4:
        return PodRequest(key=key, cpu_milli=4000, gpu_milli=rng.choice((250, 500)))
    return PodRequest(key=key, cpu_milli=rng.choice((1000, 8000)), gpus=rng.choice((1, 2)))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000))
def test_share_classes_decide_as_pick_through_binds_and_refits(seed: int):
    assert decide_as_pick(seed) >= 2  # refitted while share scores were kept


def test_share_classes_decide_as_pick_when_the_memo_renumbers_often(
    monkeypatch: pytest.MonkeyPatch,
):
    """The memo's tables start afresh (numbers from 0 again) before nearly every pod."""
    monkeypatch.setattr(share_memo, "_RENUMBER", 4)
    for seed in range(3):
        assert decide_as_pick(seed) >= 2


def decide_as_pick(seed: int) -> int:
    """Share and other pods decided by a Placer as by `pick`, bound, some unbound; returns how
    often the fragmentation score refitted meanwhile."""
    rng = random.Random(seed)
    specs = [
        NodeSpec(
            name=f"n{i}", shares=rng.choice((0, 2, 4)), cpu_milli=rng.choice((64_000, 128_000))
        )
        for i in range(rng.randint(3, 6))
    ]
    cluster = Cluster.from_specs(specs)
    scoring = Scoring.from_weights(DEFAULT_WEIGHTS, prefer_used_nodes=False, candidate_limit=0)
    placer = Placer(cluster.snapshot, scoring)
    bound: list[str] = []
    for k in range(60):
        pod = any_pod(rng, f"default/p{k}")
        expected = pick(pod, cluster.snapshot, scoring, explain=False)
        got = placer.decide(pod, explain=False)
        assert (got.assignment, got.score) == (expected.assignment, expected.score)
        bind_and_churn(bound, pod, got.assignment, k, rng, cluster.bind, cluster.unbind, every=5)
    learner = next(s.fn for s in scoring.scores if isinstance(s.fn, FragmentationScore))
    return learner.version


def test_a_simulator_share_finds_a_fresh_shared_gpu_on_both_placer_paths():
    """`pick`'s candidate index offers a shared GPU with all its milli free to a `gpu_milli`
    pod, as `filter_node` (and so the memo) takes it there."""
    cluster = Cluster.from_specs([NodeSpec(name="n0", shares=4)])
    scoring = Scoring.from_weights(DEFAULT_WEIGHTS, prefer_used_nodes=False, candidate_limit=0)
    pod = PodRequest(key="default/p", cpu_milli=4000, gpu_milli=500)
    expected = pick(pod, cluster.snapshot, scoring, explain=False)
    assert expected.assignment is not None
    assert Placer(cluster.snapshot, scoring).decide(pod).assignment == expected.assignment


def test_classes_placing_the_same_shares_on_one_room_share_one_assignment():
    """`ShareMemo.fit` hands pods of other cpu that place the same shares the same assignment
    (`share_devices`' placement), on one state and on another state whose GPUs have as much
    free (a state of other cpu requested), and again where a GPU has less free but the pod
    still goes to that GPU; `scored` scores an assignment from elsewhere (a NUMA-aligned
    node's) as `Scoring.total` does."""
    scoring = Scoring.from_weights(DEFAULT_WEIGHTS, candidate_limit=0)
    memo = ShareMemo(scoring)
    node = shared_node("n0", shared=2)
    big = share_pod(random.Random(1), "default/b")
    wide = replace(big, key="default/c", cpu_milli=big.cpu_milli + 1000)
    first = memo.fit(7, 0, big, node, None)
    assert first is not None
    assert first == share_devices(big, node, None)
    assert memo.fit(7, 0, wide, node, None) is first
    assert memo.scored(7, 0, wide, node, first) == (first, scoring.total(wide, node, first))
    busier = shared_node("n0", shared=2)
    busier.add_pod(PodRequest(key="default/cpu", cpu_milli=1000), Assignment(node="n0"))
    assert memo.fit(8, 0, big, busier, None) is first  # as much free on every GPU
    assert memo.fit(10, 1, big, busier, None) is not first  # another static shape
    fuller = shared_node("n0", shared=2)
    fuller.add_pod(big, first)
    assert memo.fit(9, 0, big, fuller, None) == share_devices(big, fuller, None)
    assert memo.fit(9, 0, big, fuller, None) is first  # placed again, on the same GPU
    elsewhere = Assignment(
        node="n0", shares=tuple(GpuShare(gpu=1, milli=250, slots=1) for _ in big.shares), numa=0
    )
    assert memo.fit(7, 0, big, node, 0) is not first
    assert memo.scored(7, 0, wide, node, elsewhere) == (
        elsewhere,
        scoring.total(wide, node, elsewhere),
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000))
def test_one_container_shares_placed_on_nodes_of_one_shape_reuse_one_assignment(seed: int):
    """`ShareMemo.fit` on nodes of two static shapes (80 and 40 GiB GPUs, 4 and 2 replicas)
    loaded at random: every state gets `share_devices`' placement there (but the node name);
    a one-container pod gets the one assignment its shape and GPU were first given, a
    two-container pod one per room."""
    rng = random.Random(seed)
    memo = ShareMemo(Scoring.from_weights(DEFAULT_WEIGHTS, candidate_limit=0))
    shapes = {0: (80 * GIB, 4), 1: (40 * GIB, 2)}
    first: dict[tuple[int, tuple[ContainerShare, ...], int], Assignment] = {}
    for state in range(60):
        shape = rng.choice((0, 1))
        memory, slots = shapes[shape]
        node = shared_node("n0", shared=3, slots=slots, gpu_memory=memory)
        for k in range(rng.randint(0, 5)):
            load = share_pod(rng, f"default/load{k}")
            placed = share_devices(load, node, None)
            if placed is not None:
                node.add_pod(load, placed)
        pod = share_pod(rng, f"default/p{state}")
        expected = share_devices(pod, node, None)
        got = memo.fit(state, shape, pod, node, None)
        assert (got is None) == (expected is None)
        if got is None or expected is None:
            continue
        assert replace(got, node=node.name) == expected
        if len(pod.shares) == 1:
            kept = first.setdefault((shape, pod.shares, got.shares[0].gpu), got)
            assert got is kept


def every_score(names: Iterable[str]) -> Scoring:
    """Every shipped score function, weighted so each shows in the total."""
    return Scoring.from_weights({n: 10.0**i for i, n in enumerate(names)}, candidate_limit=0)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000))
def test_requests_alike_in_what_scores_read_score_alike(seed: int):
    """`score_reads` lists all a shipped score reads of a pod: a twin that differs elsewhere
    (memory of a GPU pod, priority, key, selector) gets every score the pod gets, on loaded
    nodes with and without shared GPUs; cpu-only twins that differ in memory need not."""
    rng = random.Random(seed)
    specs = [NodeSpec(name=f"n{i}", shares=rng.choice((0, 2, 4))) for i in range(3)]
    cluster = Cluster.from_specs([*specs, NodeSpec(name="cpu", gpus=0)])
    for k in range(12):  # load some nodes
        cluster.place(any_pod(rng, f"default/load-{k}"), default_scoring())
    names = [*SCORE_FUNCTIONS, *SCORE_FACTORIES]
    for k in range(8):
        pod = any_pod(rng, f"default/p{k}")
        twin = replace(
            pod,
            key=f"default/twin{k}",
            memory=pod.memory + (GIB if pod.wants_gpu else 0),
            priority=pod.priority + 1,
            node_selector={} if pod.node_selector else {"unread": "label"},
        )
        assert score_reads(twin) == score_reads(pod)
        for node in cluster.snapshot.nodes.values():
            found = filter_node(pod, node).assignment
            if found is None:
                continue
            for name in names:
                scoring = every_score([name])  # a fresh learner per score: each sees both pods
                assert scoring.total(pod, node, found) == scoring.total(twin, node, found), name
    cpu_only = PodRequest(key="default/c", cpu_milli=1000, memory=GIB)
    bigger = replace(cpu_only, memory=64 * GIB)
    assert score_reads(cpu_only) != score_reads(bigger)


def test_a_score_that_is_not_shipped_keeps_the_whole_class_in_the_score_key():
    """`score_reads` speaks for the shipped scores only: with another score function the memo
    keys share scores by the pod class, so one reading a GPU pod's memory is still exact."""
    assert default_scoring().shipped
    by_memory = WeightedScore("memory", 1.0, lambda pod, _node, _assignment: pod.memory / GIB)
    scoring = Scoring(scores=(by_memory,), prefer_used_nodes=False, candidate_limit=0)
    assert not scoring.shipped
    memo = ShareMemo(scoring)
    node = shared_node("n0", shared=2)
    small = share_pod(random.Random(1), "default/s")
    large = replace(small, key="default/l", memory=small.memory + GIB)
    found = memo.fit(7, 0, small, node, None)
    assert found is not None
    assert memo.fit(7, 0, large, node, None) is found
    assert memo.scored(7, 0, large, node, found)[1] == memo.scored(7, 0, small, node, found)[1] + 1


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000))
def test_classes_that_differ_only_in_memory_decide_as_pick(seed: int):
    """GPU pod classes that differ only in memory share one verdict table (`_share_table`);
    on nodes whose memory fits some of them and not others, through binds and unbinds, each
    decides as `pick`, with `pick`'s reasons when nothing fits."""
    rng = random.Random(seed)
    specs = [
        NodeSpec(name=f"n{i}", shares=rng.choice((0, 4)), memory=rng.choice((24, 48, 96)) * GIB)
        for i in range(rng.randint(2, 5))
    ]
    cpu_nodes = [NodeSpec(name=f"cpu{i}", gpus=0, memory=(64 + 32 * i) * GIB) for i in range(2)]
    cluster = Cluster.from_specs([*specs, *cpu_nodes])  # (cpu-only pods' scores read memory)
    scoring = Scoring.from_weights(DEFAULT_WEIGHTS, prefer_used_nodes=False, candidate_limit=0)
    placer = Placer(cluster.snapshot, scoring)
    bound: list[str] = []
    nothing_fits = 0
    for k in range(50):
        base = any_pod(rng, f"default/p{k}")
        pod = replace(base, memory=rng.choice((0, 8, 16, 40, 80)) * GIB)
        expected = pick(pod, cluster.snapshot, scoring, explain=True)
        got = placer.decide(pod, explain=True)
        assert (got.assignment, got.score) == (expected.assignment, expected.score)
        if got.assignment is None:  # (the memo counts no reasons when a node fits)
            nothing_fits += 1
            assert got.reasons == expected.reasons
        bind_and_churn(bound, pod, got.assignment, k, rng, cluster.bind, cluster.unbind)
    assert nothing_fits


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000))
def test_nodes_alike_in_what_scores_read_score_a_gpu_pod_alike(seed: int):
    """`gpu_pod_node_reads` lists all the shipped scores read of a node's load for a GPU pod:
    two shared nodes whose shares take the same milli-GPU and cpu, but by memory on one and by
    compute on the other (with different host memory), give every GPU pod every score alike;
    a node with less cpu free does not read alike."""
    rng = random.Random(seed)
    by_memory, by_compute = shared_node("a", shared=2, whole=2), shared_node("b", shared=2, whole=2)
    for k in range(rng.randint(1, 4)):
        quarters = rng.choice((1, 2))  # of the GPU: 20 GiB or 25 % compute, milli 250 each
        cpu = rng.choice((100, 2000))
        asks = (
            buildshare(memory=quarters * 20 * GIB),
            buildshare(memory=5 * GIB, compute=quarters * 25),
        )
        for node, ask in zip((by_memory, by_compute), asks, strict=True):
            pod = replace(buildsharepod(f"default/s{k}", ask, cpu_milli=cpu), memory=k * GIB)
            found = filter_node(pod, node).assignment
            assert found is not None
            node.add_pod(pod, found)
    assert gpu_pod_node_reads(by_memory) == gpu_pod_node_reads(by_compute)
    assert by_memory.memory_free != by_compute.memory_free
    for k in range(6):
        pod = any_pod(rng, f"default/p{k}")
        if not pod.wants_gpu:
            continue
        found = filter_node(pod, by_memory).assignment
        if found is None or found != filter_node(pod, by_compute).assignment:
            continue
        for name in [*SCORE_FUNCTIONS, *SCORE_FACTORIES]:
            scoring = every_score([name])
            assert scoring.total(pod, by_memory, found) == scoring.total(pod, by_compute, found)
    busier = shared_node("c", shared=2, whole=2)
    busier.add_pod(PodRequest(key="default/cpu", cpu_milli=1000), Assignment(node="c"))
    assert gpu_pod_node_reads(busier) != gpu_pod_node_reads(shared_node("d", shared=2, whole=2))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000))
def test_whole_gpu_scores_kept_by_what_scores_read_are_scoring_totals(seed: int):
    """`ShareMemo.whole_score` for GPU pods without share containers (whole GPUs, `gpu_milli`)
    on nodes loaded at random, many of them alike in free cpu and GPUs but not in memory (so
    kept scores are handed out again): always `Scoring.total`, with every shipped score, the
    learning one's refits included (after which the memo's caller drops the scores)."""
    rng = random.Random(seed)
    scoring = every_score(DEFAULT_WEIGHTS)
    memo = ShareMemo(scoring)
    for pod, node, found, at, shape in fits_on_loaded_nodes(rng, scoring, memo, whole_gpu_pod):
        expected = scoring.total(pod, node, found)
        assert memo.whole_score(at, shape, pod, node, found) == expected


def whole_gpu_pod(rng: random.Random, key: str) -> PodRequest:
    """Whole GPUs or a `gpu_milli` share."""
    pod = PodRequest(
        key=key,
        cpu_milli=rng.choice((1000, 4000)),
        memory=rng.choice((GIB, 8 * GIB)),
        gpus=rng.choice((0, 1, 2)),
    )
    return pod if pod.gpus else replace(pod, gpu_milli=rng.choice((250, 500)))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000))
def test_cpu_pod_scores_kept_without_memory_are_scoring_totals(seed: int):
    """`ShareMemo.cpu_pod_score` for pods without GPUs on nodes with GPUs, under a scoring
    that is `memory_blind_on_gpu_nodes` (every shipped score but `spread`): on nodes loaded at
    random (their memory too), a pod and its twin asking other memory both get
    `Scoring.total`, the learning score's refits included; the twin's is the pod's, kept."""
    rng = random.Random(seed)
    scoring = every_score(n for n in (*SCORE_FUNCTIONS, *SCORE_FACTORIES) if n != "spread")
    assert scoring.memory_blind_on_gpu_nodes
    memo = ShareMemo(scoring)
    for pod, node, found, at, shape in fits_on_loaded_nodes(rng, scoring, memo, cpu_pod):
        twin = replace(pod, memory=pod.memory + GIB)  # (one key: the learner counts it once)
        expected = scoring.total(pod, node, found)
        assert memo.cpu_pod_score(at, shape, pod, node, found) == expected
        assert memo.cpu_pod_score(at, shape, twin, node, found) == expected


def cpu_pod(rng: random.Random, key: str) -> PodRequest:
    return PodRequest(
        key=key, cpu_milli=rng.choice((1000, 4000)), memory=rng.choice((GIB, 8 * GIB, 64 * GIB))
    )


def test_only_spread_reads_the_memory_of_a_cpu_pod_on_a_gpu_node():
    """`memory_blind_on_gpu_nodes`: the shipped weights are; a weighted `spread`, which scores
    two cpu-only pods that differ only in memory apart on a node with GPUs, is not."""
    assert default_scoring().memory_blind_on_gpu_nodes
    with_spread = Scoring.from_weights({**DEFAULT_WEIGHTS, "spread": 1.0}, candidate_limit=0)
    assert not with_spread.memory_blind_on_gpu_nodes
    unweighted = Scoring.from_weights({**DEFAULT_WEIGHTS, "spread": 0.0}, candidate_limit=0)
    assert unweighted.memory_blind_on_gpu_nodes
    node = Cluster.from_specs([NodeSpec(name="n0")]).snapshot.nodes["n0"]
    small = PodRequest(key="default/small", cpu_milli=1000, memory=GIB)
    big = replace(small, memory=64 * GIB)
    here = Assignment(node="n0")
    assert with_spread.total(small, node, here) != with_spread.total(big, node, here)
    assert default_scoring().total(small, node, here) == default_scoring().total(big, node, here)


def fits_on_loaded_nodes(
    rng: random.Random,
    scoring: Scoring,
    memo: ShareMemo,
    make: Callable[[random.Random, str], PodRequest],
) -> Iterator[tuple[PodRequest, NodeState, Assignment, int, int]]:
    """On nodes n0..n3 (some shared) loaded one pod at a time, 40 pods from `make`, each
    learnt as the memo's caller does (the memo's scores dropped at a refit), with every node
    it fits: (pod, node, its assignment there, the node's state id, its static shape id)."""
    cluster = Cluster.from_specs(
        NodeSpec(name=f"n{i}", shares=rng.choice((0, 0, 4))) for i in range(4)
    )
    learner = next(s.fn for s in scoring.scores if isinstance(s.fn, FragmentationScore))
    version = learner.version
    for k in range(40):
        name = f"n{rng.randrange(4)}"
        load = PodRequest(
            key=f"default/load{k}",
            cpu_milli=rng.choice((0, 1000)),
            memory=rng.choice((GIB, 2 * GIB)),
            gpus=rng.choice((0, 1)),
        )
        placed = filter_node(load, cluster.snapshot.nodes[name]).assignment
        if placed is not None:
            cluster.bind(load, placed)
        pod = make(rng, f"default/p{k}")
        scoring.observe(pod, cluster.snapshot)  # as the memo's caller: learn, then score
        if learner.version != version:
            version = learner.version
            memo.forget_scores()
        for node in cluster.snapshot.nodes.values():
            found = filter_node(pod, node).assignment
            if found is not None:  # a bind makes a new state: ids are never reused
                shape = 0 if node.share_resource is None else 1
                yield pod, node, found, (k + 1) * 8 + int(node.name[1:]), shape


@pytest.mark.parametrize("spread", [0.0, 1.0], ids=["memory-blind scoring", "spread weighted"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000))
def test_cpu_pods_that_differ_only_in_memory_decide_as_pick(spread: float, seed: int):
    """Classes of pods without GPUs that differ only in memory share their verdicts on nodes
    with GPUs when the scoring reads no memory there (`VerdictMemo._sibling_key`): on GPU
    nodes whose memory fits some of them and not others, and on cpu-only nodes (whose scores
    read memory), through binds, unbinds and refits, each decides as `pick`, with `pick`'s
    reasons when nothing fits; the same with `spread` weighted (no sharing)."""
    rng = random.Random(seed)
    specs = [
        NodeSpec(name=f"n{i}", shares=rng.choice((0, 4)), memory=rng.choice((24, 48, 96)) * GIB)
        for i in range(rng.randint(2, 5))
    ]
    cpu_nodes = [NodeSpec(name=f"cpu{i}", gpus=0, memory=(32 + 32 * i) * GIB) for i in range(2)]
    cluster = Cluster.from_specs([*specs, *cpu_nodes])
    weights = {**DEFAULT_WEIGHTS, "spread": spread}
    scoring = Scoring.from_weights(weights, prefer_used_nodes=False, candidate_limit=0)
    assert scoring.memory_blind_on_gpu_nodes == (spread == 0.0)
    placer = Placer(cluster.snapshot, scoring)
    bound: list[str] = []
    nothing_fits = 0
    for k in range(60):
        cpu = rng.choice((1000, 8000, 60_000))
        pod = PodRequest(key=f"default/p{k}", cpu_milli=cpu, memory=rng.choice((8, 40, 80)) * GIB)
        if rng.random() < 0.3:
            pod = any_pod(rng, f"default/p{k}")
        expected = pick(pod, cluster.snapshot, scoring, explain=True)
        got = placer.decide(pod, explain=True)
        assert (got.assignment, got.score) == (expected.assignment, expected.score)
        if got.assignment is None:
            nothing_fits += 1
            assert got.reasons == expected.reasons
        bind_and_churn(bound, pod, got.assignment, k, rng, cluster.bind, cluster.unbind, every=3)
    learner = next(s.fn for s in scoring.scores if isinstance(s.fn, FragmentationScore))
    assert learner.version >= 1
    assert nothing_fits
