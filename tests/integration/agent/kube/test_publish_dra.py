"""GPUs prepared for DRA claims are used in the published NodeResourceTopology (DESIGN §14): the
kubelet's PodResources `List` (its `dynamic_resources`, served by the fake kubelet on a real
socket) read by `StateReader`, published by the `Publisher` to the fake API server, decoded."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from agent.availability import ClaimDevice, ClaimGrant, ContainerGrant, PodGrant
from agent.cli.publish_service import StateReader
from agent.dra import DRIVER
from agent.dra.devices import dra_devices, nrt_devices
from agent.kube.client import KubeSink
from agent.kube.publisher import Publisher, PublisherSettings
from agent.nrt import decode
from agent.nrt.wire import ATTR_GPUS_FREE
from agent.resource_names import DRA_GPU_RESOURCE, GPU_RESOURCE
from deviceplugin.podresources import PodResourcesClient
from deviceplugin.testing.podresources_server import FakePodResourcesServer
from tests.builders.agentnode import NODE
from tests.builders.clock import FakeClock
from tests.builders.topology import allocatable_of, dgx_h100, gpu_pod, gpu_uuid
from tests.fakeapi import FakeApiServer

INVENTORY = dgx_h100()
DRA_GPUS = frozenset({6, 7})
DEVICES = nrt_devices(NODE, dra_devices(INVENTORY, DRA_GPUS))


def claim_pod(name: str, device: str) -> PodGrant:
    claim = ClaimGrant(
        claim_namespace="ml",
        claim_name=f"{name}-gpu",
        devices=(
            ClaimDevice(
                driver=DRIVER,
                pool=NODE,
                device=device,
                cdi_devices=(f"k8s.gputopo.io/claim=uid-{name}-{device}",),
            ),
        ),
    )
    return PodGrant(
        namespace="ml", name=name, containers=(ContainerGrant(name="main", claims=(claim,)),)
    )


@pytest.fixture
def kubelet() -> Iterator[FakePodResourcesServer]:
    """The device plugin's GPUs only: the kubelet's allocatable never lists a DRA GPU."""
    dra_uuids = {str(gpu_uuid(i)) for i in DRA_GPUS}
    allocatable = allocatable_of(INVENTORY)
    devices = tuple(d for d in allocatable.devices if not set(d.device_ids) & dra_uuids)
    with FakePodResourcesServer() as fake:
        fake.set_allocatable(replace(allocatable, devices=devices))
        yield fake


@pytest.fixture
def publish(kubelet, fake_api_with_crd: FakeApiServer) -> Iterator[object]:
    api_client = fake_api_with_crd.api_client()
    with PodResourcesClient(kubelet.socket, timeout_s=2.0) as client:
        reader = StateReader(
            client, inventory=lambda: INVENTORY, unhealthy=frozenset, dynamic=lambda: DEVICES
        )
        publisher = Publisher(
            PublisherSettings(node_name=NODE),
            KubeSink(api_client, timeout_s=2.0),
            reader,
            clock=FakeClock(),
        )

        def once():
            publisher.publish_once()
            obj = fake_api_with_crd.get_object("noderesourcetopologies", NODE)
            assert obj is not None
            return decode(obj)

        yield once
    api_client.close()  # type: ignore[no-untyped-call]


def zone(nrt, index: int) -> dict[str, tuple[int, int, int]]:
    return {n: (r.capacity, r.allocatable, r.available) for n, r in nrt.gpu_counts(index).items()}


def test_a_gpu_prepared_for_a_claim_is_used_until_its_pod_is_gone(kubelet, publish) -> None:
    assert [d.name for d in DEVICES] == [f"gpu-{INVENTORY.gpus[i].minor}" for i in (6, 7)]
    nrt = publish()
    assert zone(nrt, 6) == {DRA_GPU_RESOURCE: (1, 1, 1)}
    assert zone(nrt, 7) == {DRA_GPU_RESOURCE: (1, 1, 1)}
    assert nrt.attributes[ATTR_GPUS_FREE] == "6"  # as nvidia.com/gpu: the DRA GPUs are not
    kubelet.set_pod(claim_pod("train", DEVICES[1].name))
    kubelet.set_pod(gpu_pod("ml", "plain", str(gpu_uuid(0))))
    nrt = publish()
    assert zone(nrt, 6) == {DRA_GPU_RESOURCE: (1, 1, 1)}
    assert zone(nrt, 7) == {DRA_GPU_RESOURCE: (1, 1, 0)}
    assert zone(nrt, 0) == {GPU_RESOURCE: (1, 1, 0)}
    assert nrt.attributes[ATTR_GPUS_FREE] == "5"
    numa = nrt.numa_counts(INVENTORY.gpus[7].numa_node or 0)
    assert (numa[DRA_GPU_RESOURCE].available, numa[GPU_RESOURCE].capacity) == (1, 2)
    kubelet.remove_pod("ml", "train")
    assert zone(publish(), 7) == {DRA_GPU_RESOURCE: (1, 1, 1)}
