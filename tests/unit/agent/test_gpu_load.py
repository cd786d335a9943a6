"""Measured GPU use (issue 47): the moving window, the NRT attribute codec, the fixture's scripted
load through the fake pynvml and the real backend, and the sampler over both."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.cli.config import load
from agent.errors import FixtureError
from agent.gpu_load import GpuLoad, LoadSample, LoadWindow, load_attributes, parse_load
from agent.load_sampler import LoadSampler
from agent.nvml.fixture import Fixture, load_fixture, parse_fixture, to_document
from agent.nvml.pynvml_backend import fake_backend
from tests.builders.clock import FakeClock

WALL = 1_764_600_000.0  # 2025-12-01T14:40:00Z


def sample(memory: int | None, sm: int | None = 0, power: float | None = 100.0) -> LoadSample:
    return LoadSample(memory_used_mib=memory, sm_percent=sm, power_w=power)


def test_window_averages_the_last_seconds_and_stamps_the_latest_sample() -> None:
    window = LoadWindow(60)
    window.add(0, sample(10_000, 90, 300), now=0, wall=WALL)
    window.add(0, sample(30_000, 10, 100), now=30, wall=WALL + 30)
    assert window.averages() == {
        0: GpuLoad(memory_used_mib=20_000, sm_percent=50, power_w=200, measured_at=WALL + 30)
    }
    window.add(0, sample(40_000, 30, 100), now=61, wall=WALL + 61)  # the first one leaves
    assert window.averages()[0].memory_used_mib == 35_000


def test_a_gpu_without_memory_readings_has_no_load_and_expired_gpus_are_dropped() -> None:
    window = LoadWindow(10)
    window.add(0, sample(None, 50, None), now=0, wall=WALL)
    window.add(1, sample(1_000, None, None), now=0, wall=WALL)
    assert window.averages() == {
        1: GpuLoad(memory_used_mib=1_000, sm_percent=0, power_w=0, measured_at=WALL)
    }
    window.expire(11)
    assert window.averages() == {}


def test_attributes_round_trip_and_malformed_ones_are_no_reading() -> None:
    load = GpuLoad(memory_used_mib=71_680, sm_percent=83, power_w=412, measured_at=WALL)
    attrs = dict(load_attributes(load))
    assert attrs == {
        "memoryUsedMiB": "71680",
        "smPercent": "83",
        "powerW": "412",
        "measuredAt": "2025-12-01T14:40:00Z",
    }
    assert parse_load(attrs) == load
    assert parse_load({**attrs, "measuredAt": "yesterday"}) is None
    assert parse_load({**attrs, "smPercent": "-1"}) is None
    assert parse_load({k: v for k, v in attrs.items() if k != "powerW"}) is None


def scripted_fixture() -> Fixture:
    doc = to_document(load_fixture("pcie-4x-nvlink-pairs").inventory)
    doc["load"] = [
        {"afterSeconds": 0, "gpu": 1, "memoryUsedMiB": 20_000, "smPercent": 40, "powerW": 150},
        {"afterSeconds": 30, "gpu": 1, "memoryUsedMiB": 40_000, "smPercent": 80},
    ]
    return parse_fixture(doc, "scripted.yaml")


def test_scripted_load_reaches_nvml_when_due_and_the_sampler_averages_it() -> None:
    clock = FakeClock(0.0)
    backend, _fake = fake_backend(scripted_fixture(), clock=clock, sleep=clock.sleep)
    wall = FakeClock(WALL)
    inventory = load_fixture("pcie-4x-nvlink-pairs").inventory
    sampler = LoadSampler(backend, lambda: inventory, window_s=60, clock=clock, wall=wall)
    first = sampler()
    assert first[1] == GpuLoad(memory_used_mib=20_000, sm_percent=40, power_w=150, measured_at=WALL)
    assert first[0].memory_used_mib == 0
    clock.advance(30)
    wall.advance(30)
    later = sampler()[1]
    assert (later.memory_used_mib, later.sm_percent, later.power_w) == (30_000, 60, 150)
    assert later.measured_at == WALL + 30
    backend.close()


def test_nvml_errors_leave_a_gpu_without_samples() -> None:
    clock = FakeClock(0.0)
    backend, fake = fake_backend("pcie-4x-nvlink-pairs", clock=clock, sleep=clock.sleep)
    fake.set_lost(2)
    inventory = load_fixture("pcie-4x-nvlink-pairs").inventory
    sampler = LoadSampler(backend, lambda: inventory, window_s=60, clock=clock)
    assert sorted(sampler()) == [0, 1, 3]
    backend.close()


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        pytest.param({"afterSeconds": 0, "gpu": 9}, "load[0].gpu: no GPU with index 9", id="gpu"),
        pytest.param(
            {"afterSeconds": 0, "gpu": 0, "memoryUsedMiB": 10**7},
            "load[0].memoryUsedMiB: above the GPU's",
            id="memory above the GPU's",
        ),
        pytest.param({"afterSeconds": 0, "gpu": 0, "sm": 5}, "load[0]", id="unknown key"),
    ],
)
def test_malformed_scripted_load_names_the_key(entry: dict[str, object], reason: str) -> None:
    doc = to_document(load_fixture("pcie-4x-nvlink-pairs").inventory)
    doc["load"] = [entry]
    with pytest.raises(FixtureError, match=re.escape(reason)):
        parse_fixture(doc, "bad.yaml")


def test_the_agent_config_sets_the_window_and_the_interval() -> None:
    base = ["--node-name=n1", "--oneshot"]
    default = load(base, {})
    assert (default.load_window_s, default.load_publish_interval_s) == (60.0, 30.0)
    set_ = load([*base, "--load-window=120", "--load-publish-interval=10"], {})
    assert (set_.load_window_s, set_.load_publish_interval_s) == (120.0, 10.0)
    assert load([*base, "--no-load"], {}).load_window_s == 0.0


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0, 5), st.integers(0, 81_559), st.integers(0, 100)),
        min_size=1,
        max_size=40,
    )
)
def test_the_average_lies_within_the_window_samples(steps: list[tuple[float, int, int]]) -> None:
    window, now, kept = LoadWindow(30), 0.0, []
    for gap, memory, sm in steps:
        now += gap
        window.add(0, sample(memory, sm), now=now, wall=WALL + now)
        kept = [(t, m, s) for t, m, s in [*kept, (now, memory, sm)] if t >= now - 30]
    load = window.averages()[0]
    assert min(m for _, m, _ in kept) <= load.memory_used_mib <= max(m for _, m, _ in kept)
    assert min(s for _, _, s in kept) <= load.sm_percent <= max(s for _, _, s in kept)
    assert load.measured_at == WALL + now
