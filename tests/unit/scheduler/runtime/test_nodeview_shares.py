"""The per-GPU share view (DESIGN §12) is rebuilt from pods: structure from the NRT's shared GPU
zones, usage from each pod's `gputopo.io/gpus` annotation, replicas of pods another scheduler
placed as equal splits."""

from __future__ import annotations

from typing import Any

from agent.share_pods import PodShare
from scheduler.quota.capacity import nodes_capacity
from scheduler.runtime.cluster.cache import ClusterCache
from scheduler.runtime.cluster.queuebook import QUEUES
from tests.builders.nodes import node_obj
from tests.builders.nrt import make_nrt, make_shared_nrt
from tests.builders.pods import share_pod
from tests.builders.topology import dgx_h100, gpu_uuid

GIB = 1 << 30
SCHEDULER = "gputopo-scheduler"


def bound(body: dict[str, Any], node: str, scheduler: str = SCHEDULER) -> dict[str, Any]:
    name = body["metadata"]["name"]
    body["metadata"]["uid"] = f"uid-{name}"
    body["spec"].update(nodeName=node, schedulerName=scheduler)
    return body


def shared_cache(
    *pods: dict[str, Any],
    nrt_used: dict[int, int] | None = None,
    share_pods: dict[int, tuple[PodShare, ...]] | None = None,
) -> ClusterCache:
    cache = ClusterCache(SCHEDULER)
    cache.upsert_node(node_obj("n1", gpus=6, **{"nvidia.com/gpu.shared": "8"}))
    nrt = make_shared_nrt(
        "n1", dgx_h100(), shared=(0, 1), slots=4, memory_used=nrt_used, share_pods=share_pods
    )
    cache.upsert_nrt(nrt)
    for body in pods:
        cache.upsert_pod(body)
    return cache


def per_gpu(cache: ClusterCache) -> tuple[list[int], list[int], list[int], list[int]]:
    node = cache.snapshot.node("n1")
    return node.slots_free[:2], node.memory_free[:2], node.compute_free[:2], node.gpu_free[:2]


def test_the_nrt_says_which_gpus_are_shared_and_how():
    node = shared_cache().snapshot.node("n1")
    assert node.gpu_slots == (4, 4, 0, 0, 0, 0, 0, 0)
    assert node.share_resource == "nvidia.com/gpu.shared"
    assert node.gpu_memory[0] == dgx_h100().gpus[0].memory_mib << 20
    assert node.free_whole_gpus() == [2, 3, 4, 5, 6, 7]


def test_an_annotated_share_is_charged_on_its_gpu_as_it_asks():
    annotated = share_pod("a", memory="20Gi", compute=30, gpus={"main": gpu_uuid(1)})
    cache = shared_cache(bound(annotated, "n1"))
    slots, memory, compute, _milli = per_gpu(cache)
    assert slots == [4, 3]
    assert memory[1] == memory[0] - 20 * GIB
    assert compute == [100, 70]


def test_a_replica_another_scheduler_placed_counts_as_an_equal_split():
    foreign = bound(share_pod("f"), "n1", scheduler="default-scheduler")
    slots, memory, _compute, milli = per_gpu(shared_cache(foreign))
    assert sorted(slots) == [3, 4]
    assert sorted(milli) == [750, 1000]
    assert sorted(memory)[0] == sorted(memory)[1] * 3 // 4


def test_another_schedulers_pod_is_charged_an_equal_split_whatever_its_annotation_says():
    """A pod bound around gputopo-scheduler is given an equal split on its replica's GPU; a
    `gputopo.io/gpus` its author wrote (naming GPU 1, asking 60Gi) moves nothing."""
    forged = bound(
        share_pod("forged", memory="60Gi", gpus={"main": gpu_uuid(1)}), "n1", "default-scheduler"
    )
    _slots, memory, _compute, _milli = per_gpu(shared_cache(forged))
    total = dgx_h100().gpus[0].memory_mib << 20
    assert sorted(memory) == [total - total // 4, total]


def test_each_shared_gpu_is_charged_at_least_what_the_nrt_says_its_shares_use():
    """The NRT counts what the agent gave (its own record): 50Gi on GPU 0 that no pod's
    annotation explains (edited or deleted by its author) stays charged there."""
    total = dgx_h100().gpus[0].memory_mib << 20
    moved = bound(share_pod("moved", memory="50Gi", gpus={"main": gpu_uuid(1)}), "n1")
    _slots, memory, _compute, milli = per_gpu(shared_cache(moved, nrt_used={0: 50 * GIB}))
    assert memory == [total - 50 * GIB, total - 50 * GIB]  # the larger count on each GPU
    assert milli[0] < 1000


def test_a_running_share_is_charged_where_and_as_the_nrt_counts_it_by_uid():
    """`sharePods` (the agent's count from its own record) says pod `moved` uses 50Gi of GPU 0;
    its annotation, edited by its author, says GPU 1: GPU 0 carries the 50Gi. An entry for an
    earlier pod of the same name (another UID) is not this pod's."""
    total = dgx_h100().gpus[0].memory_mib << 20
    moved = bound(share_pod("moved", memory="50Gi", gpus={"main": gpu_uuid(1)}), "n1")
    counted = PodShare(
        pod="default/moved", uid="uid-moved", container="main", memory_bytes=50 * GIB
    )
    slots, memory, _compute, _milli = per_gpu(shared_cache(moved, share_pods={0: (counted,)}))
    assert (slots, memory) == ([3, 4], [total - 50 * GIB, total])
    earlier = PodShare(pod="default/moved", uid="uid-old", container="main", memory_bytes=GIB)
    _slots, memory, _compute, _milli = per_gpu(shared_cache(moved, share_pods={0: (earlier,)}))
    assert memory == [total, total - 50 * GIB]  # by its annotation (and nothing on GPU 0)


def test_a_restart_rebuilds_the_same_view_from_pods():
    pods = [
        bound(share_pod("a", memory="30Gi", gpus={"main": gpu_uuid(0)}), "n1"),
        bound(share_pod("b", memory="10Gi", gpus={"main": gpu_uuid(1)}), "n1"),
        bound(share_pod("f"), "n1", scheduler="default-scheduler"),
    ]
    first = per_gpu(shared_cache(*pods))
    again = per_gpu(shared_cache(*reversed(pods)))
    assert first == again
    assert first[0] == [2, 3]  # the foreign replica joins the fuller GPU (30Gi used on GPU 0)


def test_an_annotation_naming_an_unknown_gpu_still_counts_the_replica():
    stray = bound(share_pod("s", memory="8Gi", gpus={"main": "GPU-gone"}), "n1")
    slots, _memory, _compute, _milli = per_gpu(shared_cache(stray))
    assert sum(slots) == 7


def test_an_unshared_node_keeps_whole_gpus():
    cache = ClusterCache(SCHEDULER)
    cache.upsert_node(node_obj("n1"))
    cache.upsert_nrt(make_nrt("n1", dgx_h100()))
    node = cache.snapshot.node("n1")
    assert node.gpu_slots == (0,) * 8
    assert node.share_resource is None


def queue_capacity(cache: ClusterCache) -> int:
    """The queues' root capacity in milli-GPU (one queue with a GPU max makes the GPU managed),
    which with no other scheduler's pods is what the simulator counts of the same nodes."""
    team = {"metadata": {"name": "team"}, "spec": {"max": {"nvidia.com/gpu": "100"}}}
    cache.queues.apply(QUEUES, "ADDED", team)
    kept = cache.queues.capacity()["nvidia.com/gpu"]
    assert kept == nodes_capacity(cache.snapshot.nodes.values()).get("nvidia.com/gpu", 0)
    return kept


def test_queue_capacity_counts_each_shared_gpu_once_under_a_renamed_resource():
    assert queue_capacity(shared_cache()) == 8000  # 6 whole GPUs and 2 shared ones


def test_queue_capacity_counts_physical_gpus_not_replicas_under_plain_time_slicing():
    cache = ClusterCache(SCHEDULER)
    cache.upsert_node(node_obj("n1", gpus=6 + 2 * 4))  # the kubelet counts the replicas
    nrt = make_shared_nrt("n1", dgx_h100(), shared=(0, 1), slots=4, resource="nvidia.com/gpu")
    cache.upsert_nrt(nrt)
    assert queue_capacity(cache) == 8000
    cache.upsert_nrt(make_nrt("n1", dgx_h100()))  # sharing switched off: 14 whole GPUs again
    assert queue_capacity(cache) == 14000
    cache.delete_node("n1")
    assert queue_capacity(cache) == 0
