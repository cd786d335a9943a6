"""A share pod's verdict in the memo (`VerdictMemo._verdict`: the filter's stages before the
devices, then the placement looked up once for the fit and the score, `ShareMemo.fit_scored`)
is `pick`'s: the same node, devices, score and, when nothing fits, the same reasons, on nodes
that reject it in every stage (taints, the shared resource, the GPU model, the shares' room,
measured use) and on `single-numa-node` nodes (the filter's own path)."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.gpu_load import GpuLoad
from scheduler.placement import (
    GPU_PRODUCT_LABEL,
    NodeState,
    Placer,
    PodRequest,
    Snapshot,
    Taint,
    TopologyPolicy,
    default_scoring,
)
from scheduler.placement.load import hold_measured_use, measured_use
from scheduler.placement.pick import pick
from scheduler.placement.request import Toleration
from tests.builders.placement import GIB, H100, bind_and_churn, share, shared_node
from tests.builders.placement import share_pod as build_share_pod

A100 = "NVIDIA-A100-SXM4-80GB"
NOW = 1_764_600_000.0
TAINT = Taint(key="team", value="a")


def varied_node(rng: random.Random, name: str) -> NodeState:
    """A shared node that a share pod may fail in any stage of the filter."""
    node = shared_node(
        name,
        shared=rng.randint(1, 4),
        whole=rng.choice((0, 0, 2)),
        slots=rng.choice((2, 4)),
        links_known=rng.random() > 0.1,  # else: no GPU shared as the pod's resource
    )
    changes: dict[str, object] = {}
    if rng.random() < 0.2:
        changes["taints"] = (TAINT,)
    if rng.random() < 0.2:
        changes["labels"] = {GPU_PRODUCT_LABEL: A100}
    if rng.random() < 0.25:
        changes["topology_policy"] = TopologyPolicy.SINGLE_NUMA_NODE
    if changes:
        node = replace(node, **changes)  # type: ignore[arg-type]
    if rng.random() < 0.3:  # measured use: the GPUs' order and a reason of its own
        readings = [
            GpuLoad(
                memory_used_mib=rng.choice((0, 30, 60, 75)) * 1024,
                sm_percent=rng.choice((0, 40, 90)),
                power_w=rng.choice((100, 300)),
                measured_at=NOW,
            )
            for _g in range(node.gpu_count)
        ]
        hold_measured_use(node, [measured_use(r, now=NOW, max_age_s=60) for r in readings])
    return node


def varied_share_pod(rng: random.Random, key: str) -> PodRequest:
    asks = tuple(
        share(
            f"c{i}",
            memory=rng.choice((None, 10 * GIB, 20 * GIB, 40 * GIB, 70 * GIB)),
            compute=rng.choice((None, 25, 50, 90)),
        )
        for i in range(rng.choice((1, 1, 1, 2)))
    )
    pod = build_share_pod(key, *asks, cpu_milli=rng.choice((1000, 8000, 40_000)))
    changes: dict[str, object] = {}
    if rng.random() < 0.3:
        changes["tolerations"] = (Toleration(key="team", value="a"),)
    if rng.random() < 0.2:
        changes["gpu_models"] = frozenset({rng.choice((H100, A100))})
    return replace(pod, **changes) if changes else pod  # type: ignore[arg-type]


def decide_as_pick(seed: int) -> Counter[str]:
    """Share pods decided by a Placer and by `pick`, with reasons; binds and forgets between.
    Returns what the decisions met (reasons by kind, placements on loaded nodes)."""
    rng = random.Random(seed)
    snapshot = Snapshot(varied_node(rng, f"n{i}") for i in range(rng.randint(4, 9)))
    scoring = default_scoring()
    placer = Placer(snapshot, scoring)
    met: Counter[str] = Counter()
    bound: list[str] = []
    for k in range(50):
        pod = varied_share_pod(rng, f"default/p{k}")
        expected = pick(pod, snapshot, scoring, explain=True)
        got = placer.decide(pod, explain=True)
        assert got.assignment == expected.assignment, pod
        assert got.score == expected.score, pod
        if got.assignment is None:  # (the memo counts reasons only when nothing fits)
            assert dict(got.reasons) == dict(expected.reasons), pod
            met["nothing fits"] += 1
        for reason in expected.reasons:
            met[reason.split(" ")[0] if "GPU " in reason[:4] else reason[:24]] += 1
        if got.assignment is not None:
            node = snapshot.nodes[got.assignment.node]
            met["placed on a node with readings" if node.gpu_load else "placed"] += 1
        bind_and_churn(bound, pod, got.assignment, k, rng, snapshot.assume, snapshot.forget)
    return met


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 100_000))
def test_share_pods_decide_as_pick_with_the_same_reasons(seed: int) -> None:
    met = decide_as_pick(seed)  # (each decision is checked against `pick` in there)
    assert met["placed"] + met["placed on a node with readings"] + met["nothing fits"] == 50


def test_the_seeds_reach_every_stage_of_the_filter() -> None:
    """Over a few fixed seeds the decisions meet each stage's rejection and both placements."""
    met: Counter[str] = Counter()
    for seed in range(12):
        met += decide_as_pick(seed)

    def meets(start: str) -> bool:
        return any(kind.startswith(start) for kind in met)

    assert meets("node(s) had untolerated")  # a taint
    assert meets("node(s) didn't match Pod")  # the GPU model
    assert meets("Insufficient nvidia.com/")  # the shared resource
    assert meets("no shared GPU had")  # the shares' room
    assert meets("node(s) had no NodeResou")  # no GPU known shared
    assert meets("GPU")  # measured use
    assert met["placed"]
    assert met["placed on a node with readings"]
