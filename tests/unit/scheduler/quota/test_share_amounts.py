"""Queues charge GPU shares (DESIGN §12): never the replica resource; nvidia.com/gpu in the
share's milli and gputopo.io/gpu-memory in bytes."""

from __future__ import annotations

from scheduler.placement import GpuShare
from scheduler.quota import allocatable_amounts, request_amounts
from tests.builders.placement import GIB, share, share_pod


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
