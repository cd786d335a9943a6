"""Score functions (each 0..100) and the weighted, pluggable `Scoring`."""

from __future__ import annotations

import pytest

from scheduler.placement import (
    Assignment,
    GpuShare,
    NodeState,
    Scoring,
    WeightedScore,
    default_scoring,
)
from scheduler.placement.pick import pick
from scheduler.placement.scores import (
    binpack_score,
    gpu_avoidance_score,
    spread_score,
    topology_score,
)
from tests.builders.placement import GIB, make_node, pod, snapshot


def busy(node: NodeState, gpus: tuple[int, ...]) -> NodeState:
    node.add_pod(pod("default/busy", gpus=len(gpus)), Assignment(node=node.name, gpus=tuple(gpus)))
    return node


@pytest.mark.parametrize(
    ("used", "request_gpus", "expected"),
    [
        pytest.param((), 1, 12.5, id="idle node, 1 of 8"),
        pytest.param((0, 1, 2), 1, 50.0, id="3 used + 1"),
        pytest.param((0, 1, 2, 3, 4, 5, 6), 1, 100.0, id="fills the node"),
        pytest.param((), 8, 100.0, id="whole node"),
    ],
)
def test_binpack_is_the_share_in_use_after_placement(used, request_gpus, expected):
    node = busy(make_node(), used) if used else make_node()
    score = binpack_score(pod(gpus=request_gpus), node, Assignment(node=node.name))
    assert score == pytest.approx(expected)


def test_binpack_counts_gpu_shares_and_mig_slices():
    node = make_node(gpus=2, mig={1: {"1g.10gb": 7}})
    node.add_pod(
        pod("default/m", mig={"1g.10gb": 7}),
        Assignment(node=node.name, mig=tuple((1, "1g.10gb") for _ in range(7))),
    )
    score = binpack_score(
        pod(gpu_milli=500), node, Assignment(node=node.name, shares=(GpuShare(gpu=0, milli=500),))
    )
    assert score == pytest.approx(100 * 1500 / 2000)


@pytest.mark.parametrize(
    ("preset", "gpus", "expected"),
    [
        pytest.param("pairs", (0, 1), 100.0, id="the NVLink pair"),
        pytest.param("pairs", (1, 2), 100 - 60 - 30 * 4 / 5, id="PCIe NODE pair, NVLink lost"),
        pytest.param("pcie", (0, 1), 100.0, id="PIX pair is best on PCIe"),
        pytest.param("pcie", (0, 4), 100 - 30 * 4 / 5 - 10, id="SYS pair over two NUMA nodes"),
        pytest.param("nvswitch", (3,), 100.0, id="one GPU"),
    ],
)
def test_topology_score(preset, gpus, expected):
    node = make_node(preset=preset)
    score = topology_score(pod(gpus=len(gpus)), node, Assignment(node=node.name, gpus=gpus))
    assert score == pytest.approx(expected)


def test_topology_score_is_zero_without_gpus():
    node = make_node()
    assert topology_score(pod(), node, Assignment(node=node.name)) == 0.0


@pytest.mark.parametrize(
    ("cpu", "mem", "expected"),
    [
        pytest.param(0, 0, 100.0, id="empty node"),
        pytest.param(32_000, 256 * GIB, 50.0, id="half"),
        pytest.param(64_000, 0, 50.0, id="cpu full, memory empty"),
    ],
)
def test_spread_is_least_allocated(cpu, mem, expected):
    node = make_node()
    score = spread_score(pod(cpu_milli=cpu, memory=mem), node, Assignment(node=node.name))
    assert score == pytest.approx(expected)


def test_spread_and_avoidance_ignore_gpu_pods():
    node = make_node()
    gpu_pod = pod(gpus=1)
    assert spread_score(gpu_pod, node, Assignment(node=node.name)) == 0.0
    assert gpu_avoidance_score(gpu_pod, node, Assignment(node=node.name)) == 0.0
    assert gpu_avoidance_score(pod(), make_node(gpus=0), Assignment(node="x")) == 100.0


def test_scoring_from_weights_rejects_unknown_names():
    with pytest.raises(KeyError, match="unknown score 'nope'"):
        Scoring.from_weights({"nope": 1})


def test_scoring_is_pluggable():
    def prefer_b(_pod, node, _assignment):
        return 100.0 if node.name == "node-b" else 0.0

    scoring = Scoring(scores=(WeightedScore("custom", 1.0, prefer_b),), prefer_used_nodes=False)
    decision = pick(pod(gpus=1), snapshot(make_node("node-a"), make_node("node-b")), scoring)
    assert decision.node == "node-b"
    assert decision.score == 100.0


def test_default_scoring_weights():
    names = {s.name: s.weight for s in default_scoring().scores}
    assert names == {
        "fragmentation": 10.0,
        "topology": 5.0,
        "spreadOnCpuNodes": 1.0,
        "gpuAvoidance": 1.0,
    }
