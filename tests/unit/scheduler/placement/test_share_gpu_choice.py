"""The GPU a share goes to (`share_gpu`, `place_shares`) against a plain scan of the rule: of the
shared GPUs with a replica, the memory and the compute the share needs, the fullest (least
milli-GPU free; with measured use the lowest `load_key`, memory in tenths), the lowest index
among equals."""

from __future__ import annotations

import random

import pytest

from agent.gpu_load import GpuLoad
from agent.shares import ContainerShare
from scheduler.placement.load import hold_measured_use, load_key, measured_use
from scheduler.placement.node import Assignment, NodeState
from scheduler.placement.shares import place_shares, share_gpu
from tests.builders.placement import GIB, share, share_pod, shared_node

NOW = 1_764_600_000.0


def scanned(ask: ContainerShare, node: NodeState) -> int | None:
    """The rule, GPU by GPU: a later GPU is taken only when strictly better."""
    best: int | None = None
    for g in node.shared_gpus:
        split = node.gpu_memory[g] // node.gpu_slots[g] * ask.replicas
        memory = split if ask.memory_bytes is None else ask.memory_bytes
        if (
            node.slots_free[g] < ask.replicas
            or node.memory_free[g] < memory
            or node.compute_free[g] < (ask.compute_percent or 0)
        ):
            continue
        if best is None or rank(node, g) < rank(node, best):
            best = g
    return best


def rank(node: NodeState, g: int) -> tuple[int, ...]:
    """Lower first: the milli-GPU free, or with measured use `load_key` (memory in tenths)."""
    if not node.gpu_load:
        return (node.gpu_free[g],)
    return load_key(node, g, node.gpu_free[g])


def random_ask(rng: random.Random) -> ContainerShare:
    return share(
        "main",
        memory=rng.choice((None, 5 * GIB, 10 * GIB, 20 * GIB, 40 * GIB)),
        compute=rng.choice((None, 10, 25, 50)),
        replicas=rng.choice((1, 1, 2)),
    )


def loaded_node(rng: random.Random, shared: int, *, measured: bool) -> NodeState:
    """A node with `shared` shared GPUs, some shares bound (and measured use held on some)."""
    node = shared_node("n", shared=shared, whole=rng.randint(0, 2), slots=rng.choice((2, 4, 8)))
    if measured:
        loads = [
            GpuLoad(
                memory_used_mib=rng.choice((0, 2048, 10240)),
                sm_percent=rng.choice((0, 30, 35, 90)),
                power_w=rng.choice((100, 300)),
                measured_at=NOW,
            )
            if rng.random() < 0.7
            else None
            for _ in range(shared)
        ]
        hold_measured_use(node, [measured_use(x, now=NOW, max_age_s=120.0) for x in loads])
    for k in range(rng.randint(0, 3 * shared)):
        pod = share_pod(f"d/b{k}", random_ask(rng))
        placed = place_shares(pod, node)
        if placed is not None:
            node.add_pod(pod, Assignment(node=node.name, shares=placed))
    return node


@pytest.mark.parametrize("measured", [False, True])
def test_a_share_goes_where_a_plain_scan_of_the_rule_sends_it(measured: bool) -> None:
    rng = random.Random(46)
    ties = 0
    for _ in range(400):
        node = loaded_node(rng, rng.randint(1, 6), measured=measured)
        for _ in range(6):
            ask = random_ask(rng)
            expected = scanned(ask, node)
            assert share_gpu((ask,), node) == expected
            placed = place_shares(share_pod("d/p", ask), node)
            assert (None if placed is None else placed[0].gpu) == expected
            fitting = [g for g in node.shared_gpus if scanned(ask, _only(node, g)) == g]
            keys = [rank(node, g) for g in fitting]
            ties += len(keys) != len(set(keys))
    assert ties > 50  # equal GPUs were met often: the lowest index had to win


def _only(node: NodeState, g: int) -> NodeState:
    """`node` with every shared GPU but `g` out of replicas (so the scan sees `g` alone)."""
    alone = node.clone()
    alone.slots_free = [free if i == g else 0 for i, free in enumerate(node.slots_free)]
    return alone
