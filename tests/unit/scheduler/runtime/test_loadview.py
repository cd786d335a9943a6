"""The runtime's side of load-aware placement (issue 47): the cache builds a node with its fresh
measured use held, judges age by its own (injected) wall clock, and rebuilds the node judged by
requests alone once the reading goes stale; `loadAware.shares: false` ignores readings."""

from __future__ import annotations

from agent.gpu_load import GpuLoad, load_attributes
from scheduler.placement.load import LoadAware
from scheduler.runtime.cluster.cache import ClusterCache
from scheduler.runtime.cluster.loadview import LoadClock
from tests.builders.clock import FakeClock
from tests.builders.nodes import node_obj
from tests.builders.nrt import make_shared_nrt
from tests.builders.topology import dgx_h100

WALL = 1_764_600_000.0
GIB = 1 << 30
SHARED = "nvidia.com/gpu.shared"


def _cache(wall: FakeClock, settings: LoadAware) -> ClusterCache:
    cache = ClusterCache("gputopo-scheduler", load=LoadClock(settings, wall))
    cache.upsert_node(node_obj("n1", gpus=7, **{SHARED: "4"}))
    body = make_shared_nrt("n1", dgx_h100(), shared=(0,), slots=4)
    load = GpuLoad(memory_used_mib=70 * 1024, sm_percent=90, power_w=500, measured_at=WALL)
    zone = next(z for z in body["zones"] if z["name"] == "gpu-0")
    zone["attributes"] += [{"name": k, "value": v} for k, v in load_attributes(load)]
    assert cache.upsert_nrt(body) is None
    return cache


def test_a_fresh_reading_is_held_and_a_stale_one_released_at_the_next_cycle() -> None:
    wall = FakeClock(WALL + 10)
    cache = _cache(wall, LoadAware(max_age_s=120))
    state = cache.snapshot.node("n1")
    assert state.gpu_memory[0] - state.memory_free[0] == 70 * GIB
    assert state.gpu_load[0] is not None
    wall.advance(100)  # 110 s old: still fresh
    cache.expire_load()
    assert cache.snapshot.node("n1").memory_free[0] == state.memory_free[0]
    wall.advance(20)  # 130 s old: stale
    cache.expire_load()
    after = cache.snapshot.node("n1")
    assert after.memory_free[0] == after.gpu_memory[0]
    assert after.gpu_load[0] is None


def test_switched_off_readings_are_ignored() -> None:
    cache = _cache(FakeClock(WALL), LoadAware(shares=False))
    state = cache.snapshot.node("n1")
    assert state.memory_free[0] == state.gpu_memory[0]
    assert state.gpu_load == ()
