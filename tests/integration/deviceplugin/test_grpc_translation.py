"""The gRPC translation: response fields per strategy, replicas, unexpected errors, the observer."""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
from pathlib import Path

import grpc
import pytest

from agent.inventory import load_inventory
from deviceplugin._pb import deviceplugin_pb2 as pb
from deviceplugin._pb import deviceplugin_pb2_grpc as pb_grpc
from deviceplugin.allocation import Allocator
from deviceplugin.device_state import DeviceState
from deviceplugin.grpc_translation import GrpcTranslation
from deviceplugin.resource_plugin import ResourcePlugin
from deviceplugin.resources import build_resources
from deviceplugin.settings import (
    DeviceListStrategy,
    PluginSettings,
    SharedResource,
    TimeSlicing,
)
from tests.builders.kubelet import running_node


def test_volume_mounts_and_device_specs_cross_the_wire():
    strategies = (DeviceListStrategy.ENVVAR, DeviceListStrategy.VOLUME_MOUNTS)
    with running_node(
        "dgx-a100", device_list_strategies=strategies, pass_device_specs=True
    ) as node:
        response = node.kubelet.allocate("nvidia.com/gpu", [node.uuid(5)])
        (container,) = response.container_responses
        assert dict(container.envs) == {
            "NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"
        }
        assert [(m.host_path, m.container_path, m.read_only) for m in container.mounts] == [
            ("/dev/null", f"/var/run/nvidia-container-devices/{node.uuid(5)}", False)
        ]
        minor = node.inventory.gpus[5].minor
        assert [d.host_path for d in container.devices][-1] == f"/dev/nvidia{minor}"
        assert {d.permissions for d in container.devices} == {"rw"}


def test_replicas_are_admitted_on_distinct_gpus():
    sharing = TimeSlicing(resources=(SharedResource(name="nvidia.com/gpu", replicas=4),))
    with running_node("pcie-4x-nvlink-pairs", time_slicing=sharing) as node:
        assert len(node.kubelet.devices("nvidia.com/gpu")) == 16
        chosen, response = node.kubelet.admit("nvidia.com/gpu", 3)
        gpus = {i.split("::")[0] for i in chosen}
        assert len(gpus) == 3
        assert set(response.envs["NVIDIA_VISIBLE_DEVICES"].split(",")) == gpus


class ExplodingAllocator(Allocator):
    """Fails the way a bug would: an exception that is not one of ours."""

    def allocate(self, resource, unhealthy, requests):
        raise RuntimeError("boom")


@pytest.fixture
def socket_dir():
    path = Path(tempfile.mkdtemp(prefix="dp-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_unexpected_errors_are_internal_logged_once_and_observed(socket_dir, caplog):
    inventory = load_inventory("single-t4")
    settings = PluginSettings(device_plugin_dir=socket_dir)
    device_state = DeviceState(build_resources(inventory, settings))
    calls: list[tuple[str, str, str]] = []
    translation = GrpcTranslation(
        "nvidia.com/gpu",
        device_state,
        ExplodingAllocator(settings, inventory),
        stop=threading.Event(),
        observer=lambda method, resource, seconds, code: calls.append((method, resource, code)),
    )
    plugin = ResourcePlugin(socket_dir, translation)
    plugin.start()
    try:
        with grpc.insecure_channel(f"unix://{plugin.socket_path}") as channel:
            stub = pb_grpc.DevicePluginStub(channel)  # type: ignore[no-untyped-call]
            request = pb.AllocateRequest(
                container_requests=[
                    pb.ContainerAllocateRequest(devices_ids=[inventory.gpus[0].uuid])
                ]
            )
            with caplog.at_level(logging.ERROR), pytest.raises(grpc.RpcError) as info:
                stub.Allocate(request, timeout=5)
            preferred = stub.GetPreferredAllocation(
                pb.PreferredAllocationRequest(
                    container_requests=[
                        pb.ContainerPreferredAllocationRequest(
                            available_deviceIDs=[inventory.gpus[0].uuid], allocation_size=1
                        )
                    ]
                ),
                timeout=5,
            )
    finally:
        plugin.stop()
    assert info.value.code() is grpc.StatusCode.INTERNAL
    assert "internal error: boom" in str(info.value.details())
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert errors[0].exc_info is not None
    assert list(preferred.container_responses[0].deviceIDs) == [inventory.gpus[0].uuid]
    assert calls == [
        ("Allocate", "nvidia.com/gpu", "INTERNAL"),
        ("GetPreferredAllocation", "nvidia.com/gpu", "OK"),
    ]
    assert not plugin.socket_path.exists()
