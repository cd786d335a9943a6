"""Queues charge GPU shares (DESIGN §12): never the replica resource; nvidia.com/gpu in the
share's milli and gputopo.io/gpu-memory in bytes."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.placement import GpuShare, PodRequest
from scheduler.placement.shares import place_shares
from scheduler.quota import allocatable_amounts, request_amounts
from tests.builders.placement import GIB, share, share_pod, shared_node


def test_a_placed_share_is_charged_its_milli_and_memory_never_its_replica():
    request = share_pod("default/s", share(memory=20 * GIB, compute=30))
    placed = (GpuShare(gpu=1, milli=300, memory=20 * GIB, compute=30, slots=1),)
    amounts = request_amounts(request, placed)
    assert amounts["nvidia.com/gpu"] == 300
    assert amounts["gputopo.io/gpu-memory"] == 20 * GIB
    assert "nvidia.com/gpu.shared" not in amounts


def test_a_pending_share_is_charged_what_it_asks_alone():
    amounts = request_amounts(share_pod("default/s", share(memory=8 * GIB, compute=25)))
    assert (amounts["nvidia.com/gpu"], amounts["gputopo.io/gpu-memory"]) == (250, 8 * GIB)
    equal_split = request_amounts(share_pod("default/e", share()))
    assert equal_split["nvidia.com/gpu"] == 1
    assert "gputopo.io/gpu-memory" not in equal_split


def test_the_shared_resource_is_never_capacity():
    amounts = allocatable_amounts({"nvidia.com/gpu.shared": 8, "nvidia.com/gpu": 2})
    assert amounts == {"nvidia.com/gpu": 2000}


def test_containers_that_take_one_replica_in_turn_are_charged_it_once():
    """An init container and the app container after it on its replica (`share_reuse`) ask
    one share: the most either asks, as placement charges the group."""
    init = share("init", memory=10 * GIB, compute=30, init=True)
    app = share("main", memory=20 * GIB, compute=20)
    request = replace(share_pod("default/r", init, app), share_reuse=(0, 0))
    amounts = request_amounts(request)
    assert (amounts["nvidia.com/gpu"], amounts["gputopo.io/gpu-memory"]) == (300, 20 * GIB)
    apart = request_amounts(share_pod("default/a", init, app))  # two replicas: both count
    assert (apart["nvidia.com/gpu"], apart["gputopo.io/gpu-memory"]) == (500, 30 * GIB)


@st.composite
def share_requests(draw: st.DrawFn) -> PodRequest:
    """A pod of 1-4 share containers, some running on an earlier one's replica."""
    count = draw(st.integers(1, 4))
    asks, reuse = [], []
    for i in range(count):
        memory = draw(st.sampled_from([None, 5 * GIB, 10 * GIB, 30 * GIB]))
        compute = draw(st.sampled_from([None, 10, 25, 60]))
        asks.append(share(f"c{i}", memory=memory, compute=compute, init=i < count - 1))
        holders = [j for j in range(i) if reuse[j] == j]
        reuse.append(draw(st.sampled_from([i, *holders])))
    return replace(share_pod("default/p", *asks), share_reuse=tuple(reuse))


@settings(max_examples=200, deadline=None)
@given(share_requests())
def test_a_pending_share_asks_no_more_than_it_is_charged_once_placed(request: PodRequest):
    placed = place_shares(request, shared_node("n", shared=4))
    assert placed is not None  # four empty 80 GiB GPUs hold any of these pods
    pending, charged = request_amounts(request), request_amounts(request, placed)
    for resource in ("nvidia.com/gpu", "gputopo.io/gpu-memory"):
        assert pending.get(resource, 0) <= charged.get(resource, 0)
