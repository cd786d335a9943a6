"""Hostile Allocate / GetPreferredAllocation input over real gRPC: linear cost, short errors.

The kubelet emulator dials the plugin's real unix socket; each refusal must reach the client as
INVALID_ARGUMENT with a message short enough for gRPC's metadata limit (a long one arrives as
RESOURCE_EXHAUSTED instead), and a request of 20,000 IDs must cost milliseconds, not seconds.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from agent.inventory import load_inventory
from deviceplugin._pb import deviceplugin_pb2 as pb
from deviceplugin._pb import deviceplugin_pb2_grpc as pb_grpc
from deviceplugin.allocation import Allocator
from deviceplugin.device_state import DeviceState
from deviceplugin.grpc_translation import GrpcTranslation
from deviceplugin.resources import build_resources
from deviceplugin.settings import PluginSettings
from tests.builders.kubelet import running_node

GPU = "nvidia.com/gpu"
MAX_DETAIL = 2_000
"""Longest error message we accept: far under gRPC's 8 KiB default metadata limit."""


def refusal(call) -> tuple[grpc.StatusCode, str, float]:
    """(status, message, seconds) of a call that must fail."""
    start = time.perf_counter()
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value.code(), info.value.details(), time.perf_counter() - start


@pytest.mark.parametrize("count", [10_000, 20_000])
def test_allocate_with_duplicate_ids_is_refused_in_linear_time(count):
    with running_node("dgx-a100") as node:
        ids = [node.uuid(0)] * (count // 2) + [node.uuid(1)] * (count // 2)
        code, message, seconds = refusal(lambda: node.kubelet.allocate(GPU, ids))
        print(f"Allocate with {count:,} duplicate IDs: refused in {seconds * 1000:.0f} ms")
        assert code is grpc.StatusCode.INVALID_ARGUMENT
        assert f"repeats device IDs '{node.uuid(0)}', '{node.uuid(1)}'" in message
        assert seconds < 2.0  # 2.4 s (10,000) and 10.8 s (20,000) when counted per ID


def test_ten_thousand_unknown_ids_give_one_short_invalid_argument():
    with running_node("dgx-a100") as node:
        ids = [f"GPU-unknown-{n:05d}" for n in range(10_000)]
        code, message, _ = refusal(lambda: node.kubelet.allocate(GPU, ids))
        assert code is grpc.StatusCode.INVALID_ARGUMENT
        assert "unknown device IDs 'GPU-unknown-00000'" in message
        assert message.endswith("and 9,990 more")
        assert len(message) < MAX_DETAIL


def test_one_huge_id_is_cut_in_the_message():
    with running_node("dgx-a100") as node:
        huge = "GPU-" + "x" * 1_000_000
        code, message, _ = refusal(lambda: node.kubelet.allocate(GPU, [huge]))
        assert code is grpc.StatusCode.INVALID_ARGUMENT
        assert "(1,000,004 characters)" in message
        assert len(message) < MAX_DETAIL


def test_preferred_refuses_must_include_outside_available():
    with running_node("dgx-a100") as node:
        available = [node.uuid(i) for i in range(4)]
        outside = node.uuid(6)
        code, message, _ = refusal(lambda: node.kubelet.preferred(GPU, available, [outside], 2))
        assert code is grpc.StatusCode.INVALID_ARGUMENT
        assert f"must-include device ID '{outside}' not in available_deviceIDs" in message
        # a must-include ID that is offered is still honoured
        picked = node.kubelet.preferred(GPU, available, [node.uuid(2)], 2)
        assert node.uuid(2) in picked
        assert set(picked) <= set(available)


def test_preferred_with_many_unknown_ids_is_short():
    with running_node("dgx-a100") as node:
        available = [f"GPU-unknown-{n:05d}" for n in range(10_000)]
        code, message, seconds = refusal(lambda: node.kubelet.preferred(GPU, available * 2, [], 1))
        assert code is grpc.StatusCode.INVALID_ARGUMENT
        assert message.endswith("and 9,990 more")
        assert len(message) < MAX_DETAIL
        assert seconds < 2.0


class LongWindedAllocator(Allocator):
    """Fails the way a bug with a huge message would."""

    def allocate(self, resource, unhealthy, requests):
        raise RuntimeError("x" * 100_000)


def test_an_unexpected_error_with_a_huge_message_still_arrives_as_internal(caplog):
    inventory = load_inventory("single-t4")
    settings = PluginSettings(device_plugin_dir=Path("/nonexistent"))
    translation = GrpcTranslation(
        GPU,
        DeviceState(build_resources(inventory, settings)),
        LongWindedAllocator(settings, inventory),
        stop=threading.Event(),
    )
    folder = Path(tempfile.mkdtemp(prefix="dp-", dir="/tmp"))
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_DevicePluginServicer_to_server(translation, server)  # type: ignore[no-untyped-call]
    server.add_insecure_port(f"unix://{folder}/plugin.sock")
    server.start()
    try:
        with grpc.insecure_channel(f"unix://{folder}/plugin.sock") as channel:
            stub = pb_grpc.DevicePluginStub(channel)  # type: ignore[no-untyped-call]
            request = pb.AllocateRequest(
                container_requests=[pb.ContainerAllocateRequest(devices_ids=["GPU-0"])]
            )
            with caplog.at_level(logging.CRITICAL):
                code, message, _ = refusal(lambda: stub.Allocate(request, timeout=5))
    finally:
        server.stop(None)
        shutil.rmtree(folder, ignore_errors=True)
    assert code is grpc.StatusCode.INTERNAL
    assert message.startswith(f"Allocate {GPU}: internal error: xxx")
    assert message.endswith("… (cut)")
    assert len(message) < MAX_DETAIL + 100
