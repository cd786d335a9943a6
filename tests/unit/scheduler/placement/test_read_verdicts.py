"""`ReadVerdicts`: verdicts that fit, kept by what filters and scores read of a node; the memo
decides as `pick` with them, across node states that differ in what no filter or score reads."""

from __future__ import annotations

import random

import pytest

from agent.shares import SHARED_GPU_RESOURCE
from scheduler.placement import PodRequest, TopologyPolicy, default_scoring
from scheduler.placement.node import Assignment, NodeState
from scheduler.placement.pick import pick
from scheduler.placement.read_verdicts import ReadVerdicts
from scheduler.sim.cluster import Cluster, NodeSpec
from tests.builders.placement import GIB, make_node, pod, shared_node
from tests.builders.placement import share as buildshare

FIT: tuple[bool, bool, float, Assignment | None, tuple[str, ...]] = (
    True,
    False,
    1.0,
    Assignment(node="a"),
    (),
)


def charged(node: NodeState, request: PodRequest, assignment: Assignment) -> NodeState:
    node.add_pod(request, assignment)
    return node


def test_states_that_differ_in_memory_alone_share_a_key_and_cpu_tells_them_apart():
    reads = ReadVerdicts(memory_blind=True)
    gpu_pod = pod(gpus=1, memory=4 * GIB)
    idle = make_node("a")
    more_memory = charged(
        make_node("b"), pod("m", cpu_milli=0, memory=64 * GIB), Assignment(node="b")
    )
    more_cpu = charged(make_node("c"), pod("c", cpu_milli=8000), Assignment(node="c"))
    first = reads.key(gpu_pod, 1, 0, idle)
    assert first is not None
    assert reads.key(gpu_pod, 2, 0, more_memory) == first
    assert reads.key(gpu_pod, 3, 0, more_cpu) not in (None, first)
    # a class that differs only in the memory it asks reads the same
    assert reads.key(pod(gpus=1, memory=16 * GIB), 2, 0, more_memory) == first
    reads.keep(first, FIT)
    assert reads.get(first) is FIT
    reads.clear()
    assert reads.get(first) is None


def test_an_extended_resource_the_pod_asks_is_read_from_the_node():
    reads = ReadVerdicts(memory_blind=True)
    asks = pod(gpus=1, extended={"example.com/nic": 1})
    node = make_node("a", extended={"example.com/nic": 2})
    busy = charged(
        make_node("b", extended={"example.com/nic": 2}),
        pod("n", cpu_milli=0, memory=0, extended={"example.com/nic": 1}),
        Assignment(node="b"),
    )
    assert reads.key(asks, 1, 0, node) != reads.key(asks, 2, 0, busy)
    assert reads.key(pod(gpus=1), 1, 0, node) == reads.key(pod(gpus=1), 2, 0, busy)


def test_a_milli_pod_reads_whether_a_shared_gpu_has_its_memory_and_a_whole_gpu_pod_does_not():
    reads = ReadVerdicts(memory_blind=True)
    node = shared_node("s", shared=2, whole=2)  # 80 GiB GPUs: a 250 milli share takes 20 GiB
    less = shared_node("t", shared=2, whole=2)
    less.memory_free[0] -= 50 * GIB  # 30 GiB left: the share still fits there
    short = shared_node("u", shared=2, whole=2)
    short.memory_free[0] -= 70 * GIB  # 10 GiB left: it does not
    milli = pod(gpu_milli=250)
    assert reads.key(milli, 1, 0, node) == reads.key(milli, 2, 0, less)
    assert reads.key(milli, 3, 0, short) != reads.key(milli, 1, 0, node)
    assert reads.key(pod(gpu_milli=500), 2, 0, less) != reads.key(pod(gpu_milli=500), 1, 0, node)
    whole = pod(gpus=1)
    assert reads.key(whole, 1, 0, node) == reads.key(whole, 3, 0, short)


@pytest.mark.parametrize(
    ("request_", "node", "blind"),
    [
        pytest.param(pod(gpus=1), make_node(policy=TopologyPolicy.SINGLE_NUMA_NODE), True,
                     id="single-numa-node reads NUMA zones"),
        pytest.param(pod(gpus=1), make_node(gpus=2, mig={0: {"1g.10gb": 7}}), True,
                     id="MIG GPUs: free devices"),
        pytest.param(pod(gpus=1), shared_node(resource="nvidia.com/gpu"), True,
                     id="whole GPUs as replicas"),
        pytest.param(pod(mig={"1g.10gb": 1}), make_node(), True, id="a MIG pod"),
        pytest.param(PodRequest(key="s", shares=(buildshare(),),
                                extended={SHARED_GPU_RESOURCE: 1}), shared_node(), True,
                     id="a share pod"),
        pytest.param(pod(), make_node(gpus=0), True, id="a pod without GPUs on a cpu node"),
        pytest.param(pod(), make_node(), False, id="a pod without GPUs, scores read memory"),
    ],
)  # fmt: skip
def test_what_more_is_read_keeps_no_verdict_here(request_, node, blind):
    assert ReadVerdicts(memory_blind=blind).key(request_, 1, 0, node) is None


def mixed_pod(rng: random.Random, key: str) -> PodRequest:
    cpu, memory = rng.choice((1000, 4000)), rng.choice((4, 16, 64)) * GIB
    kind = rng.random()
    if kind < 0.2:
        return PodRequest(key=key, cpu_milli=cpu, memory=memory)
    if kind < 0.4:
        return PodRequest(key=key, cpu_milli=cpu, memory=memory, gpu_milli=rng.choice((250, 500)))
    if kind < 0.55:
        share = buildshare(memory=rng.choice((10, 20, 70)) * GIB)
        extended = {SHARED_GPU_RESOURCE: 1}
        return PodRequest(key=key, cpu_milli=cpu, memory=memory, shares=(share,), extended=extended)
    return PodRequest(key=key, cpu_milli=cpu, memory=memory, gpus=rng.choice((1, 2, 4)))


@pytest.mark.parametrize("seed", range(10))
def test_the_memo_decides_as_pick_with_verdicts_kept_by_reads(seed: int):
    rng = random.Random(seed)
    specs = [
        NodeSpec(
            name=f"n{i}",
            shares=rng.choice((0, 0, 4)),
            cpu_milli=rng.choice((64_000, 128_000)),
            memory=rng.choice((256, 1024)) * GIB,
            topology_policy=rng.choice((TopologyPolicy.NONE, TopologyPolicy.SINGLE_NUMA_NODE)),
        )
        for i in range(rng.randint(4, 8))
    ]
    scoring = default_scoring()  # shipped: fragmentation learns, refits as pods come
    cluster = Cluster.from_specs(specs)
    placer = cluster.placer(scoring)
    running: list[str] = []
    binds = 0
    for k in range(120):
        request = mixed_pod(rng, f"default/p{k}")
        oracle = pick(request, cluster.snapshot, scoring)
        decision = placer.decide(request)
        assert decision.assignment == oracle.assignment
        assert decision.score == oracle.score
        if decision.assignment is None:  # nothing fits: every node's reason, as pick's
            assert decision.reasons == oracle.reasons
            continue
        cluster.bind(request, decision.assignment)
        running.append(request.key)
        binds += 1
        if binds % 3 == 0:  # a pod ends: its node goes back to an earlier load
            cluster.unbind(running.pop(rng.randrange(len(running))))
    assert binds >= 20
