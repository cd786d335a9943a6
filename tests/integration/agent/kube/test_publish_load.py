"""Measured GPU use in the NRT (issue 47): the real publisher, the real sampler over the real
NVML backend on the fake pynvml, and the real client against the fake API server. Telemetry
alone writes at most once per `load_interval_s`; a structural change still publishes at once."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from agent.gpu_load import parse_load
from agent.kube.client import KubeSink
from agent.kube.publisher import NodeState, Publisher, PublisherSettings
from agent.load_sampler import LoadSampler
from agent.nrt import GROUP, PLURAL, VERSION, decode
from agent.nvml.fixture import load_fixture
from agent.nvml.pynvml_backend import fake_backend
from tests.builders.agentnode import NODE, NodeStateSource
from tests.builders.clock import FakeClock
from tests.builders.topology import gpu_pod, gpu_uuid
from tests.fakeapi import FakeApiServer

NRT_PATH = f"/apis/{GROUP}/{VERSION}/{PLURAL}/{NODE}"
WALL = 1_764_600_000.0


@pytest.fixture
def sink(fake_api_with_crd: FakeApiServer) -> Iterator[KubeSink]:
    api_client = fake_api_with_crd.api_client()
    yield KubeSink(api_client, timeout_s=2.0)
    api_client.close()  # type: ignore[no-untyped-call]


class LoadedSource:
    """The node state of `NodeStateSource` (a DGX H100) with the sampler's measured use."""

    def __init__(self, sampler: LoadSampler) -> None:
        self.node = NodeStateSource()
        self._sampler = sampler

    def __call__(self) -> NodeState | None:
        state = self.node()
        return None if state is None else replace(state, load=self._sampler())


def applies(fake: FakeApiServer) -> int:
    return sum(1 for r in fake.requests if r.method == "PATCH" and r.path == NRT_PATH)


def stored_load(fake: FakeApiServer, gpu: int) -> Any:
    obj = fake.get_object("noderesourcetopologies", NODE)
    assert obj is not None
    return decode(obj).availability.gpus[gpu].load


def test_changing_telemetry_writes_once_per_interval_and_structure_at_once(
    sink, fake_api_with_crd
) -> None:
    fake, clock, wall = fake_api_with_crd, FakeClock(0.0), FakeClock(WALL)
    backend, nvml = fake_backend("dgx-h100", clock=clock, sleep=clock.sleep)
    source = NodeStateSource()
    assert source.state is not None
    inventory = load_fixture("dgx-h100").inventory  # the fake NVML's GPUs (UUIDs)
    sampler = LoadSampler(backend, lambda: inventory, clock=clock, wall=wall)
    loaded = LoadedSource(sampler)
    loaded.node = source
    settings = PublisherSettings(node_name=NODE, load_interval_s=25.0)  # resyncs at 60 s between
    publisher = Publisher(settings, sink, loaded, clock=clock)
    publisher.step()
    assert applies(fake) == 1
    assert stored_load(fake, 3).memory_used_mib == 0
    for tick in range(1, 241):  # 120 s of 0.5 s polls; GPU 3's use changes every poll
        nvml.set_telemetry(3, memory_used_mib=1000 * (tick % 70), utilization=tick % 100)
        clock.advance(0.5)
        wall.advance(0.5)
        publisher.step()
    assert applies(fake) == 1 + 4  # at 25, 50, 75, 100 s: one per interval, never more
    load = stored_load(fake, 3)
    assert load is not None
    assert load.memory_used_mib > 0
    assert load.measured_at >= WALL + 95
    source.allocate(gpu_pod("ml", "a", gpu_uuid(0)))  # structural: published at once
    clock.advance(0.5)
    publisher.step()
    assert applies(fake) == 6
    backend.close()


def test_measured_use_is_in_the_gpu_zone_attributes(sink, fake_api_with_crd) -> None:
    fake, clock = fake_api_with_crd, FakeClock(0.0)
    backend, nvml = fake_backend("dgx-h100", clock=clock, sleep=clock.sleep)
    nvml.set_telemetry(5, memory_used_mib=71_680, utilization=93, power_w=655.4)
    inventory = load_fixture("dgx-h100").inventory
    loaded = LoadedSource(LoadSampler(backend, lambda: inventory, clock=clock, wall=lambda: WALL))
    Publisher(PublisherSettings(node_name=NODE), sink, loaded, clock=clock).publish_once()
    obj = fake.get_object("noderesourcetopologies", NODE)
    assert obj is not None
    zone = next(z for z in obj["zones"] if z["name"] == "gpu-5")
    attrs = {a["name"]: a["value"] for a in zone["attributes"]}
    assert parse_load(attrs) is not None
    assert (attrs["memoryUsedMiB"], attrs["smPercent"], attrs["powerW"]) == ("71680", "93", "655")
    assert attrs["measuredAt"] == "2025-12-01T14:40:00Z"
    backend.close()
