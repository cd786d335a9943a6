"""The memo's per-state share placements and scores (`ShareMemo`), shared between share pod
classes, give `pick`'s decisions: for classes that differ in cpu, memory, `gpu-memory` and
`gpu-compute`, across binds and unbinds and a learning score's refits."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.shares import SHARED_GPU_RESOURCE, ContainerShare
from scheduler.placement import Placer, PodRequest, Scoring, share_memo
from scheduler.placement.filters import share_devices
from scheduler.placement.fragscores import FragmentationScore
from scheduler.placement.gpushare import GpuShare
from scheduler.placement.node import Assignment
from scheduler.placement.pick import pick
from scheduler.placement.scores import DEFAULT_WEIGHTS
from scheduler.placement.share_memo import ShareMemo
from scheduler.sim.cluster import Cluster, NodeSpec
from tests.builders.placement import shared_node

GIB = 1 << 30


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
        if got.assignment is not None:
            cluster.bind(pod, got.assignment)
            bound.append(pod.key)
        if k % 5 == 4 and bound:
            cluster.unbind(bound.pop(rng.randrange(len(bound))))
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


def test_classes_placing_the_same_shares_on_one_state_share_one_assignment():
    """`ShareMemo.fit` hands pods of other cpu that place the same shares on one state the
    same assignment (`share_devices`' placement), another state its own; `scored` scores an
    assignment from elsewhere (a NUMA-aligned node's) as `Scoring.total` does."""
    scoring = Scoring.from_weights(DEFAULT_WEIGHTS, candidate_limit=0)
    memo = ShareMemo(scoring)
    node = shared_node("n0", shared=2)
    big = share_pod(random.Random(1), "default/b")
    wide = PodRequest(
        key="default/c",
        cpu_milli=big.cpu_milli + 1000,
        memory=big.memory,
        extended=dict(big.extended),
        shares=big.shares,
    )
    first = memo.fit(7, big, node, None)
    assert first is not None
    assert first == share_devices(big, node, None)
    assert memo.fit(7, wide, node, None) is first
    assert memo.scored(7, wide, node, first) == (first, scoring.total(wide, node, first))
    other_state = memo.fit(8, big, node, None)
    assert other_state == first
    assert other_state is not first
    elsewhere = Assignment(
        node="n0", shares=tuple(GpuShare(gpu=1, milli=250, slots=1) for _ in big.shares), numa=0
    )
    assert memo.fit(7, big, node, 0) is not first
    assert memo.scored(7, wide, node, elsewhere) == (
        elsewhere,
        scoring.total(wide, node, elsewhere),
    )
