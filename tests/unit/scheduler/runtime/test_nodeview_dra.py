"""A GPU the agent gives to its DRA driver (`--dra-gpus`) is never the device plugin's (DESIGN
§14): its NRT zone counts it under `gpu.gputopo.io/gpu` alone, so placement never offers it to a
device-plugin pod, whole or share, and one GPU is never filled both ways. A claim's share of it
is charged to its pod's queue, not to placement (`PodInfo.claim_shares`)."""

from __future__ import annotations

from scheduler.placement import Placer, default_scoring
from scheduler.runtime.cluster.cache import ClusterCache
from tests.builders.nodes import node_obj
from tests.builders.nrt import make_dra_nrt
from tests.builders.placement import pod
from tests.builders.topology import dgx_h100

SCHEDULER = "gputopo-scheduler"


def _cache() -> ClusterCache:
    cache = ClusterCache(SCHEDULER)
    cache.upsert_node(node_obj("n1", gpus=6))  # the device plugin advertises the other six
    problem = cache.upsert_nrt(make_dra_nrt("n1", dgx_h100(), dra=(6, 7)))
    assert problem is None
    return cache


def test_the_gpus_of_the_dra_driver_are_neither_free_nor_shared_for_placement():
    node = _cache().snapshot.node("n1")
    assert node.free_whole_gpus() == [0, 1, 2, 3, 4, 5]
    assert node.gpu_free[6:] == [0, 0]
    assert node.gpu_slots[6:] == (0, 0)  # no replica of them: no device-plugin share lands


def test_device_plugin_pods_fill_only_the_device_plugin_gpus():
    cache = _cache()
    placer = Placer(cache.snapshot, default_scoring())
    taken: list[int] = []
    for i in range(8):
        decision = placer.decide(pod(f"ns/p{i}", gpus=1))
        if decision.assignment is None:
            break
        taken += decision.assignment.gpus
        cache.snapshot.assume(pod(f"ns/p{i}", gpus=1), decision.assignment)
    assert sorted(taken) == [0, 1, 2, 3, 4, 5]
