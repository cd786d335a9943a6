"""The device plugin through the kubelet emulator: real gRPC over unix sockets, fake pynvml."""

from __future__ import annotations

import shutil
import time

import grpc
import pytest

from agent.model import HEALTHY, UNHEALTHY, MigDevice, MigUuid
from deviceplugin.settings import MigStrategy
from deviceplugin.testing.kubelet import KubeletEmulator
from tests.builders.clock import FakeClock
from tests.builders.kubelet import Node, eventually, running_node

MIXED_COUNTS = {
    "nvidia.com/gpu": 4,
    "nvidia.com/mig-1g.10gb": 8,
    "nvidia.com/mig-2g.20gb": 1,
    "nvidia.com/mig-3g.40gb": 4,
    "nvidia.com/mig-4g.40gb": 1,
}


def test_mixed_strategy_advertises_every_resource_with_numa():
    with running_node("dgx-a100-mig") as node:
        view = node.kubelet.resources()
        assert {name: len(devices) for name, devices in view.items()} == MIXED_COUNTS
        gpus = view["nvidia.com/gpu"]
        for gpu in node.inventory.gpus[4:]:
            assert gpus[gpu.uuid].numa_nodes == (gpu.numa_node,)
            assert gpus[gpu.uuid].health == HEALTHY
        endpoints = {r.resource_name: r.endpoint for r in node.kubelet.registrations}
        assert endpoints["nvidia.com/mig-1g.10gb"] == "gputopo-mig-1g.10gb.sock"
        assert all(r.preferred_allocation for r in node.kubelet.registrations)
        assert node.kubelet.options("nvidia.com/gpu").get_preferred_allocation_available


def test_none_strategy_advertises_whole_gpus():
    with running_node("dgx-a100-mig", mig_strategy=MigStrategy.NONE) as node:
        assert {n: len(d) for n, d in node.kubelet.resources().items()} == {"nvidia.com/gpu": 8}


def test_admission_gets_an_nvlink_pair_and_the_env():
    with running_node("pcie-4x-nvlink-pairs") as node:
        node.kubelet.in_use["nvidia.com/gpu"] = {node.uuid(1)}
        chosen, response = node.kubelet.admit("nvidia.com/gpu", 2)
        assert set(chosen) == {node.uuid(2), node.uuid(3)}
        assert set(response.envs["NVIDIA_VISIBLE_DEVICES"].split(",")) == set(chosen)


def test_allocate_errors_carry_a_status_and_the_id():
    with running_node("dgx-a100") as node:
        with pytest.raises(grpc.RpcError) as info:
            node.kubelet.allocate("nvidia.com/gpu", [node.uuid(0), "GPU-does-not-exist"])
        assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "unknown device ID 'GPU-does-not-exist'" in str(info.value.details())
        with pytest.raises(grpc.RpcError) as info:
            node.kubelet.preferred("nvidia.com/gpu", [node.uuid(0)], [], 3)
        assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_xid_reaches_the_stream_blocks_allocate_and_recovers():
    clock = FakeClock()
    with running_node("dgx-a100", clock=clock, health_quiet_period_s=60.0) as node:
        uuid = node.uuid(3)
        node.fake.emit_xid(3, 94)
        assert node.kubelet.wait_for(
            lambda k: k.devices("nvidia.com/gpu")[uuid].health == UNHEALTHY, 2.0
        )
        with pytest.raises(grpc.RpcError) as info:
            node.kubelet.allocate("nvidia.com/gpu", [uuid])
        assert info.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert uuid in str(info.value.details())
        clock.advance(60.0)
        assert node.kubelet.wait_for(
            lambda k: k.devices("nvidia.com/gpu")[uuid].health == HEALTHY, 2.0
        )
        assert node.kubelet.allocate("nvidia.com/gpu", [uuid]).container_responses


def test_application_xid_sends_nothing():
    with running_node("dgx-a100") as node:
        before = node.kubelet.updates("nvidia.com/gpu")
        node.fake.emit_xid(2, 43)
        node.fake.emit_xid(2, 94)  # a real change after it, to know the first was processed
        assert node.kubelet.wait_for(lambda k: k.updates("nvidia.com/gpu") > before, 2.0)
        assert node.kubelet.updates("nvidia.com/gpu") == before + 1


def test_kubelet_restart_reregisters_every_resource_within_a_second():
    with running_node("dgx-a100-mig") as node:
        before = len(node.kubelet.registrations)
        started = time.monotonic()
        node.kubelet.restart()
        assert node.kubelet.wait_for(
            lambda k: (
                len(k.registrations) >= before + len(MIXED_COUNTS)
                and all(k.connected(n) and k.devices(n) for n in MIXED_COUNTS)
            ),
            2.0,
        )
        assert time.monotonic() - started < 1.0
        names = {p.name for p in node.kubelet.plugin_dir.iterdir()}
        assert "kubelet_internal_checkpoint" in names
        assert {f"gputopo-{n.split('/')[1]}.sock" for n in MIXED_COUNTS} <= names


def test_mig_layout_change_is_advertised_without_restart():
    with running_node("dgx-a100-mig", rescan_interval_s=0.1) as node:
        gpu2 = node.inventory.gpus[2]  # 4g.40gb + 3g.40gb -> 3g.40gb + 3g.40gb
        new = tuple(
            MigDevice(
                uuid=MigUuid(f"MIG-00000000-0000-4000-8000-0000000002{n:02d}"),
                profile="3g.40gb",
                gi_id=n + 1,
                ci_id=0,
                memory_mib=40192,
                start=start,
                size=4,
            )
            for n, start in enumerate((0, 4))
        )
        node.fake.set_mig_devices(gpu2.index, new)
        assert node.kubelet.wait_for(
            lambda k: (
                len(k.devices("nvidia.com/mig-3g.40gb")) == 5
                and not k.connected("nvidia.com/mig-4g.40gb")
            ),
            3.0,
        )
        assert {m.uuid for m in new} <= set(node.kubelet.devices("nvidia.com/mig-3g.40gb"))
        gone = node.kubelet.plugin_dir / "gputopo-mig-4g.40gb.sock"
        assert eventually(lambda: not gone.exists())
        allocated = node.kubelet.allocate("nvidia.com/mig-3g.40gb", [new[1].uuid])
        assert allocated.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == new[1].uuid


def test_stop_ends_streams_and_removes_sockets():
    with running_node("dgx-a100") as node:
        node.plugin.stop()
        assert node.kubelet.wait_for(lambda k: not k.connected("nvidia.com/gpu"), 2.0)
        assert node.kubelet.healthy("nvidia.com/gpu") == set()
        leftovers = sorted(p.name for p in node.kubelet.plugin_dir.iterdir())
        assert leftovers == ["kubelet.sock", "kubelet_internal_checkpoint"]


def test_plugin_started_before_the_kubelet_registers_when_it_appears():
    kubelet = KubeletEmulator()
    node = Node(kubelet, "single-t4")
    try:
        kubelet.plugin_dir.mkdir(parents=True, exist_ok=True)
        node.plugin.start()
        assert node.plugin.registration_loop.serving  # serving without a kubelet
        kubelet.start()
        assert node.wait_registered(timeout_s=2.0)
    finally:
        node.plugin.stop()
        node.backend.close()
        kubelet.stop()
        shutil.rmtree(kubelet.plugin_dir, ignore_errors=True)


def test_the_emulator_refuses_a_wrong_version_like_the_kubelet():
    from deviceplugin._pb import deviceplugin_pb2 as pb
    from deviceplugin._pb import deviceplugin_pb2_grpc as pb_grpc

    with KubeletEmulator() as kubelet:
        with grpc.insecure_channel(f"unix://{kubelet.socket}") as channel:
            stub = pb_grpc.RegistrationStub(channel)  # type: ignore[no-untyped-call]
            request = pb.RegisterRequest(version="v1alpha", endpoint="x.sock", resource_name="a/b")
            with pytest.raises(grpc.RpcError) as info:
                stub.Register(request, timeout=5)
        assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "unsupported device plugin version 'v1alpha'" in str(info.value.details())
    shutil.rmtree(kubelet.plugin_dir, ignore_errors=True)
