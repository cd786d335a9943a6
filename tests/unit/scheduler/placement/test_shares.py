"""GPU shares in placement (DESIGN §12): which GPU a share gets, what it charges there, and the
reasons a share waits with."""

from __future__ import annotations

import dataclasses

from agent.resource_names import GPU_RESOURCE
from agent.shares import ContainerShare
from scheduler.placement import (
    Assignment,
    GpuShare,
    Placer,
    PodRequest,
    Snapshot,
    filter_node,
    place_gang,
)
from scheduler.placement.scores import default_scoring
from tests.builders.placement import GIB, make_node, pod, share, share_pod, shared_node


def gpus_of(assignment: Assignment | None) -> list[int]:
    assert assignment is not None
    return [s.gpu for s in assignment.shares]


def test_a_share_takes_the_fullest_gpu_that_fits_and_charges_memory_and_a_replica():
    node = shared_node(shared=2, slots=4)
    first = share_pod("default/a", share(memory=20 * GIB))
    fit = filter_node(first, node)
    assert fit.assignment is not None
    assert fit.assignment.shares == (
        GpuShare(gpu=0, milli=250, memory=20 * GIB, compute=0, slots=1, container="c"),
    )
    node.add_pod(first, fit.assignment)
    assert (node.slots_free, node.memory_free, node.gpu_free) == (
        [3, 4],
        [60 * GIB, 80 * GIB],
        [750, 1000],
    )
    second = filter_node(share_pod("default/b", share(memory=40 * GIB)), node)
    assert gpus_of(second.assignment) == [0]


def test_forgetting_a_share_gives_back_exactly_what_it_took():
    node = shared_node(shared=2)
    before = (
        list(node.slots_free),
        list(node.memory_free),
        list(node.compute_free),
        list(node.gpu_free),
    )
    request = share_pod("default/a", share(memory=30 * GIB, compute=40))
    fit = filter_node(request, node)
    assert fit.assignment is not None
    node.add_pod(request, fit.assignment)
    assert node.compute_free == [60, 100]
    assert node.gpu_free[0] == 600
    node.remove_pod(request.key)
    after = (node.slots_free, node.memory_free, node.compute_free, node.gpu_free)
    assert after == before
    assert node.used_milli == 0


def test_compute_steers_a_share_to_the_gpu_with_compute_left():
    node = shared_node(shared=2)
    hog = share_pod("default/hog", share(memory=GIB, compute=70))
    node.add_pod(hog, Assignment(node=node.name, shares=filter_node(hog, node).assignment.shares))  # type: ignore[union-attr]
    fit = filter_node(share_pod("default/b", share(memory=GIB, compute=50)), node)
    assert gpus_of(fit.assignment) == [1]


def test_an_equal_split_with_a_compute_limit_takes_that_compute():
    """A replica with `gpu-compute` and no `gpu-memory` is an equal split of the memory that
    also takes its compute (as the agent counts it): its milli is the larger of the two, and
    the next such share finds the compute gone."""
    node = shared_node(shared=2, slots=4)
    first = share_pod("default/a", share(compute=60))
    fit = filter_node(first, node)
    assert fit.assignment is not None
    assert fit.assignment.shares == (
        GpuShare(gpu=0, milli=600, memory=20 * GIB, compute=60, slots=1, container="c"),
    )
    node.add_pod(first, fit.assignment)
    assert (node.compute_free, node.gpu_free) == ([40, 100], [400, 1000])
    again = filter_node(share_pod("default/b", share(compute=60)), node)
    assert gpus_of(again.assignment) == [1]


def test_a_whole_gpu_pod_never_takes_a_shared_gpu():
    mixed = shared_node(shared=1, whole=1)
    fit = filter_node(pod("default/w", gpus=1), mixed)
    assert fit.assignment is not None
    assert fit.assignment.gpus == (1,)
    only_shared = shared_node(shared=2, whole=0)
    assert filter_node(pod("default/w", gpus=1), only_shared).reasons == (
        "Insufficient nvidia.com/gpu",
    )


def test_a_share_pod_never_takes_an_unshared_gpu_and_says_why():
    request = share_pod("default/s", share(memory=GIB, resource=GPU_RESOURCE))
    fit = filter_node(request, make_node(gpus=4))
    assert fit.reasons == ("node(s) had no GPU shared as nvidia.com/gpu",)


def test_without_a_topology_a_node_places_no_share_and_says_why():
    fit = filter_node(share_pod("default/s", share(memory=GIB)), shared_node(links_known=False))
    assert fit.reasons == ("node(s) had no NodeResourceTopology saying which GPUs are shared",)


def test_reasons_name_the_numbers():
    node = shared_node(shared=2, slots=4)
    too_big = filter_node(share_pod("default/big", share(memory=100 * GIB)), node)
    assert too_big.reasons == ("a share of 100Gi is more than any shared GPU's memory (80Gi)",)
    for i, gpu in enumerate((0, 1)):
        taker = share_pod(f"default/t{i}", share(memory=68 * GIB))
        node.add_pod(
            taker,
            Assignment(
                node=node.name, shares=(GpuShare(gpu=gpu, milli=850, memory=68 * GIB, slots=1),)
            ),
        )
    short = filter_node(share_pod("default/s", share(memory=20 * GIB)), node)
    assert short.reasons == ("no shared GPU had 20Gi free for a share (largest free 12Gi)",)
    node.add_pod(
        share_pod("default/c", share(memory=GIB, compute=90)),
        Assignment(
            node=node.name,
            shares=(
                GpuShare(gpu=0, milli=900, memory=GIB, compute=90, slots=1),
                GpuShare(gpu=1, milli=900, memory=GIB, compute=90, slots=1),
            ),
        ),
    )
    compute = filter_node(share_pod("default/k", share(memory=GIB, compute=20)), node)
    assert compute.reasons == ("no shared GPU had 20% compute free for a share (most free 10%)",)


def test_no_free_replica_is_a_reason():
    node = shared_node(shared=1, slots=2)
    for i in range(2):
        p = share_pod(f"default/p{i}", share(memory=GIB))
        node.add_pod(p, filter_node(p, node).assignment)  # type: ignore[arg-type]
    node.allocatable = {**node.allocatable, "nvidia.com/gpu.shared": 10}  # only the GPU is full
    assert filter_node(share_pod("default/x", share(memory=GIB)), node).reasons == (
        "node(s) had no shared GPU with a free replica",
    )


def test_a_plain_gpu_request_is_equal_splits_where_nvidia_gpu_is_shared():
    node = shared_node(shared=2, slots=4, resource=GPU_RESOURCE)
    split = (ContainerShare(container="c", init=False, resource=GPU_RESOURCE, replicas=2),)
    request = pod("default/p", gpus=2, split=split)
    fit = filter_node(request, node)
    assert fit.assignment is not None
    assert fit.assignment.gpus == ()
    assert fit.assignment.shares == (
        GpuShare(gpu=0, milli=500, memory=40 * GIB, compute=0, slots=2, container="c"),
    )


def test_several_share_containers_each_get_a_gpu_seeing_each_other():
    node = shared_node(shared=2, slots=4)
    request = share_pod(
        "default/p", share("init", memory=50 * GIB, init=True), share("app", memory=50 * GIB)
    )
    fit = filter_node(request, node)
    assert sorted(gpus_of(fit.assignment)) == [0, 1]


def test_the_memoised_placer_agrees_and_keeps_share_classes_apart():
    snap = Snapshot(
        [shared_node("a", shared=2), shared_node("b", shared=2), make_node("c", gpus=2)]
    )
    placer = Placer(snap, default_scoring())
    for i, size in enumerate((40, 20, 40, 20, 40, 40, 40, 40, 20, 20)):
        request = share_pod(f"default/p{i}", share(memory=size * GIB))
        decision = placer.decide(request)
        assert decision.assignment is not None
        assert decision.assignment.node in {"a", "b"}
        snap.assume(request, decision.assignment)
    for node in (snap.node("a"), snap.node("b")):
        assert all(m >= 0 for m in node.memory_free)
        assert node.memory_free == [0, 0]  # packed: every GPU full, none left half used
    decision = placer.decide(share_pod("default/last", share(memory=10 * GIB)), explain=True)
    assert decision.assignment is None
    assert decision.message() == (
        "0/3 nodes are available: 1 Insufficient nvidia.com/gpu.shared, "
        "2 no shared GPU had 10Gi free for a share (largest free 0)."
    )


def test_a_share_pod_is_not_a_whole_gpu_pod():
    request = share_pod("default/s", share(memory=GIB))
    assert request.wants_gpu
    assert request.gpus == 0
    assert request.gpu_milli_total == 0
    assert dict(request.vector)["nvidia.com/gpu.shared"] == 1
    assert PodRequest(key="x", gpus=1).vector == (("pods", 1), ("nvidia.com/gpu", 1))


def test_a_gang_of_shares_is_placed_all_or_nothing_within_every_gpus_memory():
    snap = Snapshot([shared_node("a", shared=2, slots=4), shared_node("b", shared=1, slots=4)])
    placer = Placer(snap, default_scoring())
    gang = [share_pod(f"default/g{i}", share(memory=30 * GIB)) for i in range(6)]
    result = place_gang(gang, placer)
    assert result.ok
    used: dict[tuple[str, int], int] = {}
    for assignment in result.assignments.values():
        for placed in assignment.shares:
            key = (assignment.node, placed.gpu)
            used[key] = used.get(key, 0) + placed.memory
    assert all(total <= 80 * GIB for total in used.values())
    assert len(used) == 3  # two 30Gi shares on each of the three shared GPUs
    too_many = [share_pod(f"default/h{i}", share(memory=30 * GIB)) for i in range(7)]
    refused = place_gang(too_many, placer)
    assert not refused.ok
    assert snap.node("a").memory_free == [80 * GIB, 80 * GIB]  # the snapshot is unchanged


def test_an_init_container_and_the_app_container_reusing_its_replica_share_one_gpu():
    node = shared_node(shared=2, slots=4)
    asks = (share("init", memory=30 * GIB, init=True), share("app", memory=10 * GIB, compute=20))
    request = dataclasses.replace(share_pod("default/p", *asks), share_reuse=(0, 0))
    fit = filter_node(request, node)
    assert fit.assignment is not None
    first, second = fit.assignment.shares
    assert (first.container, second.container) == ("init", "app")
    assert first.gpu == second.gpu
    assert (first.memory, first.compute, first.slots) == (30 * GIB, 20, 1)  # the most of either
    assert (second.memory, second.compute, second.slots, second.milli) == (0, 0, 0, 0)
    node.add_pod(request, fit.assignment)
    assert sorted(node.slots_free) == [3, 4]
