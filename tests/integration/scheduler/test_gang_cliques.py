"""Gangs and NVLink cliques (`nvidia.com/gpu.clique`, DESIGN §13) against the fake API server with
the real client and the real scheduler."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.config import load_config
from tests.builders.scheduler import (
    bound_pods,
    create_pod,
    create_podgroup,
    gpu_node,
    pod_body,
    podgroup,
    running,
    scheduled_condition,
    wait_for,
)

CLIQUE = "nvidia.com/gpu.clique"
UUID = "7f1c2b0e-0c52-4d8a-9b3e-5a1d2c3e4f50"
GANG_LABEL = "scheduling.x-k8s.io/pod-group"


def two_cliques(fake_api, gpus: int) -> None:
    """Cliques a and b of three nodes each (a1..a3, b1..b3)."""
    for clique in ("a", "b"):
        for i in (1, 2, 3):
            gpu_node(fake_api, f"{clique}{i}", gpus=gpus, labels={CLIQUE: f"{UUID}.{clique}"})


def start_gang(core_v1, custom_objects, annotations: dict[str, str]) -> list[str]:
    """A 12-GPU gang: three members of 4 GPUs."""
    create_podgroup(custom_objects, podgroup("train", 3, annotations=annotations))
    names = [f"train-{i}" for i in range(3)]
    for name in names:
        create_pod(core_v1, pod_body(name, gpus=4, labels={GANG_LABEL: "train"}))
    return names


def test_gang_lands_in_the_clique_it_leaves_best_packed(fake_api, core_v1, custom_objects):
    two_cliques(fake_api, gpus=8)  # 24 GPUs per clique
    create_pod(core_v1, pod_body("foreign", gpus=4, scheduler="default-scheduler", node="b1"))
    with running(fake_api):
        names = start_gang(core_v1, custom_objects, {})
        wait_for(lambda: set(names) <= set(bound_pods(fake_api)), 5, "the gang bound")
    bound = bound_pods(fake_api)
    assert {bound[n][0] for n in names} == {"b"}  # b has 20 free GPUs, a 24: b stays fuller


def test_required_gang_waits_naming_the_cliques(fake_api, core_v1, custom_objects):
    two_cliques(fake_api, gpus=4)  # 12 GPUs per clique, 2 taken in each: neither holds 12
    for node in ("a1", "b1"):
        create_pod(core_v1, pod_body(f"x-{node}", gpus=2, scheduler="default-scheduler", node=node))
    with running(fake_api):
        start_gang(core_v1, custom_objects, {"gputopo.io/topology-required": CLIQUE})
        want = (
            f"no {CLIQUE} domain holds the whole pod group (12 GPUs; the most free GPUs in one "
            f"is 10; considered: {UUID}.a, {UUID}.b)"
        )

        def waiting():
            found = scheduled_condition(fake_api, "train-0") or {}
            return found if found.get("message") == want else None

        assert wait_for(waiting, 5, "the waiting reason")["reason"] == "Unschedulable"
        assert not {"train-0", "train-1", "train-2"} & set(bound_pods(fake_api))


@pytest.mark.parametrize("annotations", [{}, {"gputopo.io/topology-preferred": CLIQUE}])
def test_gang_spans_the_cliques_unless_required(fake_api, core_v1, custom_objects, annotations):
    two_cliques(fake_api, gpus=4)
    for node in ("a1", "b1"):
        create_pod(core_v1, pod_body(f"x-{node}", gpus=2, scheduler="default-scheduler", node=node))
    with running(fake_api):
        names = start_gang(core_v1, custom_objects, annotations)
        wait_for(lambda: set(names) <= set(bound_pods(fake_api)), 5, "the gang bound")
    bound = bound_pods(fake_api)
    assert {bound[n][0] for n in names} == {"a", "b"}


@pytest.mark.parametrize("levels", [None, ("gputopo.io/rack",)], ids=["default", "no clique level"])
def test_the_clique_preference_follows_topology_levels(fake_api, core_v1, custom_objects, levels):
    """a1 has 1 free GPU, b1 3, the rest 4: clique a (9 free) is the tightest that holds a gang of
    2 × 3 GPUs; with no clique level the first member takes b1, the node it fills."""
    two_cliques(fake_api, gpus=4)
    for node, gpus in (("a1", 3), ("b1", 1)):
        create_pod(
            core_v1, pod_body(f"x-{node}", gpus=gpus, scheduler="default-scheduler", node=node)
        )
    config = load_config(None)
    if levels is not None:
        config = replace(config, topology_levels=levels)
    with running(fake_api, config=config):
        create_podgroup(custom_objects, podgroup("pair", 2))
        names = ["pair-0", "pair-1"]
        for name in names:
            create_pod(core_v1, pod_body(name, gpus=3, labels={GANG_LABEL: "pair"}))
        wait_for(lambda: set(names) <= set(bound_pods(fake_api)), 5, "the gang bound")
    nodes = {bound_pods(fake_api)[n] for n in names}
    if levels is None:
        assert nodes == {"a2", "a3"}
    else:
        assert "b1" in nodes
