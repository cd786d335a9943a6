"""One resource's gRPC server: open ListAndWatch streams never starve the unary calls."""

from __future__ import annotations

import threading
import time

import grpc

from deviceplugin._pb import deviceplugin_pb2 as pb
from deviceplugin._pb import deviceplugin_pb2_grpc as pb_grpc
from tests.builders.kubelet import running_node

OLD_POOL = 8  # worker threads per server before the bound: 8 open streams took them all


class _Stream:
    """One ListAndWatch stream read in its own thread; `outcome` is "open" or a status code."""

    def __init__(self, stub: pb_grpc.DevicePluginStub, settled: threading.Condition) -> None:
        self.call = stub.ListAndWatch(pb.Empty())
        self.outcome: str | None = None
        self._settled = settled
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for _ in self.call:
                self._settle("open")
        except grpc.RpcError as exc:
            self._settle(exc.code().name)

    def wait(self, timeout_s: float) -> str | None:
        with self._settled:
            self._settled.wait_for(lambda: self.outcome is not None, timeout_s)
            return self.outcome

    def _settle(self, outcome: str) -> None:
        with self._settled:
            if self.outcome is None:
                self.outcome = outcome
            self._settled.notify_all()


def _timed(call) -> float:
    started = time.monotonic()
    call()
    return time.monotonic() - started


def test_unary_calls_answer_while_more_streams_than_the_old_pool_are_open():
    with running_node("dgx-a100") as node:  # the kubelet holds one stream already
        socket = node.plugin.registration_loop.serving["nvidia.com/gpu"]
        with grpc.insecure_channel(f"unix://{socket}") as channel:
            stub = pb_grpc.DevicePluginStub(channel)  # type: ignore[no-untyped-call]
            settled = threading.Condition()
            streams = [_Stream(stub, settled) for _ in range(OLD_POOL + 2)]
            with settled:
                settled.wait_for(lambda: all(s.outcome for s in streams), 10.0)
            request = pb.AllocateRequest(
                container_requests=[pb.ContainerAllocateRequest(devices_ids=[node.uuid(0)])]
            )
            allocate_s = _timed(lambda: stub.Allocate(request, timeout=5))
            options_s = _timed(lambda: stub.GetDevicePluginOptions(pb.Empty(), timeout=5))
            outcomes = sorted(str(s.outcome) for s in streams)
            for stream in streams:
                stream.call.cancel()
        assert allocate_s < 2.0  # before the bound: DEADLINE_EXCEEDED after 5 s
        assert options_s < 2.0
        assert set(outcomes) == {"open", "RESOURCE_EXHAUSTED"}
        assert outcomes.count("open") == 3  # four streams in all, with the kubelet's
        assert node.kubelet.connected("nvidia.com/gpu")


def test_a_closed_stream_frees_its_place():
    with running_node("dgx-a100") as node:
        socket = node.plugin.registration_loop.serving["nvidia.com/gpu"]
        with grpc.insecure_channel(f"unix://{socket}") as channel:
            stub = pb_grpc.DevicePluginStub(channel)  # type: ignore[no-untyped-call]
            settled = threading.Condition()
            first = [_Stream(stub, settled) for _ in range(4)]
            with settled:
                settled.wait_for(lambda: all(s.outcome for s in first), 10.0)
            for stream in first:
                stream.call.cancel()
            deadline, later = time.monotonic() + 5.0, None
            while later is None or (later.outcome != "open" and time.monotonic() < deadline):
                later = _Stream(stub, settled)  # refused until a cancelled stream has ended
                later.wait(5.0)
            later.call.cancel()
        assert sorted(str(s.outcome) for s in first).count("open") == 3
        assert later.outcome == "open"
