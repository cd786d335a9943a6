"""The emulator's pod admission behaves as a real kubelet's where a device plugin can tell: batch
order, the PodResources `List` before and after each Allocate, init containers, one Allocate per
container, an init container's devices handed again to app containers, and re-allocation."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Sequence, Set

import pytest

from agent.inventory import load_inventory
from agent.model import NodeInventory
from deviceplugin.allocation import Allocator, ContainerAllocation
from deviceplugin.device_state import DeviceState
from deviceplugin.errors import DeviceUnavailableError
from deviceplugin.grpc_translation import GrpcTranslation
from deviceplugin.kubelet_registration import register
from deviceplugin.podresources import PodResourcesClient
from deviceplugin.resource_plugin import ResourcePlugin
from deviceplugin.resources import Resource, build_resources
from deviceplugin.settings import PluginSettings, SharedResource, TimeSlicing
from deviceplugin.testing.admission import (
    UNEXPECTED_ADMISSION_ERROR,
    ContainerAsk,
    EmulatedPod,
    PodAdmitter,
)
from deviceplugin.testing.kubelet import KubeletEmulator
from deviceplugin.testing.podresources_server import FakePodResourcesServer

GPU = "nvidia.com/gpu"


class ListingAllocator(Allocator):
    """Records, at each Allocate, its device IDs and what PodResources `List` shows right then."""

    def __init__(self, settings: PluginSettings, inventory: NodeInventory, socket) -> None:
        super().__init__(settings, inventory)
        self.client = PodResourcesClient(socket)
        self.calls: list[tuple[tuple[str, ...], ...]] = []
        self.listed: list[dict[str, dict[str, tuple[str, ...]]]] = []
        self.refuse: set[str] = set()

    def allocate(
        self, resource: Resource, unhealthy: Set[str], requests: Sequence[Sequence[str]]
    ) -> list[ContainerAllocation]:
        self.calls.append(tuple(tuple(r) for r in requests))
        pods = self.client.snapshot().pods
        self.listed.append(
            {
                f"{p.namespace}/{p.name}": {
                    c.name: tuple(i for d in c.devices for i in d.device_ids) for c in p.containers
                }
                for p in pods
            }
        )
        if any(i in self.refuse for r in requests for i in r):
            raise DeviceUnavailableError("refused by the test")
        return super().allocate(resource, unhealthy, requests)


@pytest.fixture
def node():
    kubelet = KubeletEmulator()
    podresources = FakePodResourcesServer()
    inventory = load_inventory("dgx-a100")
    sharing = TimeSlicing(resources=(SharedResource(name=GPU, replicas=2),))
    settings = PluginSettings(device_plugin_dir=kubelet.plugin_dir, time_slicing=sharing)
    allocator = ListingAllocator(settings, inventory, podresources.socket)
    stop = threading.Event()
    translation = GrpcTranslation(
        GPU, DeviceState(build_resources(inventory, settings)), allocator, stop=stop
    )
    plugin = ResourcePlugin(kubelet.plugin_dir, translation)
    kubelet.start()
    podresources.start()

    def serve() -> None:
        plugin.start()
        register(kubelet.socket, endpoint=plugin.socket_name, resource_name=GPU)
        assert kubelet.wait_for(lambda k: len(k.healthy(GPU)) == 16)

    serve()
    admitter = PodAdmitter(kubelet, podresources)
    admitter.serve = serve  # type: ignore[attr-defined]  # re-serve after a kubelet restart
    yield admitter, allocator
    stop.set()
    plugin.stop()
    allocator.client.close()
    podresources.stop()
    kubelet.stop()
    shutil.rmtree(kubelet.plugin_dir, ignore_errors=True)


def pod(name: str, created: float, *asks: ContainerAsk, init: Sequence[ContainerAsk] = ()):
    return EmulatedPod(
        namespace="default",
        name=name,
        uid=f"uid-{name}",
        created=created,
        init_containers=tuple(init),
        containers=asks,
    )


def gpus(name: str, count: int = 1) -> ContainerAsk:
    return ContainerAsk(name=name, devices={GPU: count})


def test_one_batch_is_admitted_oldest_first_and_batches_in_arrival_order(node):
    admitter, allocator = node
    first = admitter.admit(pod("young", 20.0, gpus("a")), pod("old", 10.0, gpus("a")))
    second = admitter.admit(pod("older-still", 5.0, gpus("a")))
    assert [a.pod.name for a in first + second] == ["old", "young", "older-still"]
    assert [list(listed) for listed in allocator.listed] == [
        ["default/old"],
        ["default/old", "default/young"],
        ["default/old", "default/young", "default/older-still"],
    ]


def test_the_pod_is_listed_without_devices_before_its_allocate_and_with_them_after(node):
    admitter, allocator = node
    (done,) = admitter.admit(pod("p", 1.0, gpus("first"), gpus("second")))
    assert allocator.listed == [
        {"default/p": {"first": (), "second": ()}},
        {"default/p": {"first": done.devices["first"][GPU], "second": ()}},
    ]
    listed = admitter.podresources
    with PodResourcesClient(listed.socket) as client:
        (grant,) = client.snapshot().pods
    assert {c.name: c.devices[0].device_ids for c in grant.containers} == {
        "first": done.devices["first"][GPU],
        "second": done.devices["second"][GPU],
    }


def test_init_containers_are_never_listed_and_their_devices_go_to_app_containers(node):
    admitter, allocator = node
    (done,) = admitter.admit(pod("p", 1.0, gpus("app-1"), gpus("app-2"), init=[gpus("init")]))
    assert allocator.calls == [
        (done.devices["init"][GPU],),
        (done.devices["app-1"][GPU],),
        (done.devices["app-2"][GPU],),
    ]  # one Allocate per container, one container each
    assert done.devices["app-1"][GPU] == done.devices["init"][GPU]
    assert done.devices["app-2"][GPU] != done.devices["init"][GPU]
    assert all("init" not in listed["default/p"] for listed in allocator.listed)


def test_a_failed_allocate_rejects_the_pod_and_frees_its_devices(node):
    admitter, allocator = node
    allocator.refuse = {i for i in admitter.kubelet.healthy(GPU) if i.endswith("::1")}
    busy = pod("busy", 1.0, gpus("a", 15))
    (rejected,) = admitter.admit(busy)
    assert rejected.error is not None
    assert rejected.error.startswith(f"{UNEXPECTED_ADMISSION_ERROR}: Allocate failed")
    assert admitter.kubelet.in_use.get(GPU, set()) == set()
    with PodResourcesClient(admitter.podresources.socket) as client:
        assert client.snapshot().pods == ()


def test_a_running_pod_is_allocated_again_with_its_checkpointed_devices(node):
    admitter, allocator = node
    running = pod("p", 1.0, gpus("a"), init=[gpus("i")])
    (done,) = admitter.admit(running)
    admitter.kubelet.restart()
    admitter.serve()
    del allocator.calls[:]
    again = admitter.reallocate(running)
    assert again.devices == done.devices
    assert allocator.calls == [(done.devices["i"][GPU],), (done.devices["a"][GPU],)]
    assert done.devices["a"][GPU] == done.devices["i"][GPU]
