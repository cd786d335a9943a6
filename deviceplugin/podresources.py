"""Client of the kubelet's PodResources API v1 (`/var/lib/kubelet/pod-resources/kubelet.sock`).

One `snapshot()` is GetAllocatableResources + List (with each container's DRA claims,
`dynamic_resources`), translated to the plain dataclasses of
`agent.availability` (no protobuf message leaves this module). Pods the caller reports as terminal
(Succeeded/Failed; the kubelet may still list them) are skipped, so a finished pod's devices count
as free and its name stays out of the pods fingerprint.

Errors::

    PluginError
    └── PodResourcesError          a call failed (names the RPC and the status)
        └── PodResourcesUnavailableError  no socket, or the kubelet does not answer (retry later)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

import grpc

from agent.availability import (
    ClaimDevice,
    ClaimGrant,
    ContainerGrant,
    DeviceGrant,
    MemoryGrant,
    PodGrant,
    PodResourcesSnapshot,
)
from deviceplugin._pb import podresources_pb2 as pb
from deviceplugin._pb import podresources_pb2_grpc as pb_grpc
from deviceplugin.errors import PluginError
from deviceplugin.kubelet_registration import FileId, file_id

log = logging.getLogger(__name__)

DEFAULT_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # List on a busy node exceeds gRPC's 4 MiB default
MAX_RECONNECT_BACKOFF_MS = 5_000  # gRPC's default grows to 120 s while the socket refuses

IsTerminal = Callable[[str, str], bool]
"""`(namespace, name) -> True` when the pod has finished (Succeeded or Failed)."""

_UNAVAILABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}


class PodResourcesError(PluginError):
    """A PodResources call failed; the message names the RPC and the gRPC status."""


class PodResourcesUnavailableError(PodResourcesError):
    """The socket is absent or the kubelet does not answer; try again later."""


@contextmanager
def _rpc(socket: Path, method: str) -> Iterator[None]:
    """Translate gRPC failures of one call into our errors."""
    try:
        yield
    except grpc.RpcError as exc:
        code, details = _status(exc)
        reason = f"PodResources {method} on {socket}: {code.name}: {details}"
        if code == grpc.StatusCode.UNIMPLEMENTED and method == "GetAllocatableResources":
            reason += " (kubelet older than 1.23, or KubeletPodResourcesGetAllocatable is off)"
        error = PodResourcesUnavailableError if code in _UNAVAILABLE else PodResourcesError
        raise error(reason) from None


def _status(exc: grpc.RpcError) -> tuple[grpc.StatusCode, str]:
    code, details = getattr(exc, "code", None), getattr(exc, "details", None)
    if callable(code) and callable(details):
        return code(), str(details())
    return grpc.StatusCode.UNKNOWN, str(exc)


class PodResourcesClient:
    """Use as a context manager, or call `close()`.

    One channel serves every call while the kubelet's socket stays the same file. A kubelet
    that crashed leaves its socket file behind, and calls to it fail; meanwhile gRPC waits
    longer and longer between reconnection tries, and a call made while it waits fails at once
    even after the kubelet serves again. So the channel is dialled anew whenever the socket is
    a new file (a restarted kubelet makes one), and the wait between tries is capped at
    `MAX_RECONNECT_BACKOFF_MS` for a kubelet that stops answering on the same socket.
    """

    def __init__(self, socket: Path = DEFAULT_SOCKET, *, timeout_s: float = 2.0) -> None:
        self._socket = Path(socket)
        self._timeout_s = timeout_s
        self._dialled: FileId | None = None
        self._channel, self._stub = self._dial()

    def _dial(self) -> tuple[grpc.Channel, pb_grpc.PodResourcesListerStub]:
        self._dialled = file_id(self._socket)
        channel = grpc.insecure_channel(
            f"unix:{self._socket.absolute()}",
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS),
                ("grpc.use_local_subchannel_pool", 1),
            ],
        )
        return channel, pb_grpc.PodResourcesListerStub(channel)  # type: ignore[no-untyped-call]

    def _stub_for_current_socket(self) -> pb_grpc.PodResourcesListerStub:
        """The stub, on a channel dialled anew if the socket is not the file it was dialled to."""
        if file_id(self._socket) != self._dialled:
            self._channel.close()
            self._channel, self._stub = self._dial()
        return self._stub

    @property
    def socket(self) -> Path:
        return self._socket

    def __enter__(self) -> PodResourcesClient:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def available(self) -> bool:
        """True when the kubelet's socket exists (the publisher then reports `podresources`)."""
        return self._socket.is_socket()

    def pods(self) -> tuple[PodGrant, ...]:
        """`List` alone: every pod the kubelet lists now (share Allocate's one kubelet call)."""
        if not self.available():
            raise PodResourcesUnavailableError(f"PodResources socket {self._socket} does not exist")
        stub = self._stub_for_current_socket()
        with _rpc(self._socket, "List"):
            listed = stub.List(pb.ListPodResourcesRequest(), timeout=self._timeout_s)
        return tuple(_pod(p) for p in listed.pod_resources)

    def snapshot(self, is_terminal: IsTerminal | None = None) -> PodResourcesSnapshot:
        """Allocatable devices/CPUs/memory and the non-terminal pods' assignments."""
        if not self.available():
            raise PodResourcesUnavailableError(f"PodResources socket {self._socket} does not exist")
        stub = self._stub_for_current_socket()
        with _rpc(self._socket, "GetAllocatableResources"):
            alloc = stub.GetAllocatableResources(
                pb.AllocatableResourcesRequest(), timeout=self._timeout_s
            )
        with _rpc(self._socket, "List"):
            listed = stub.List(pb.ListPodResourcesRequest(), timeout=self._timeout_s)
        pods = tuple(_pod(p) for p in listed.pod_resources)
        if is_terminal is not None:
            skipped = [p for p in pods if is_terminal(p.namespace, p.name)]
            if skipped:
                log.debug("skipping %d terminal pods", len(skipped))
                pods = tuple(p for p in pods if p not in skipped)
        return PodResourcesSnapshot(
            devices=_devices(alloc.devices),
            cpu_ids=tuple(sorted(alloc.cpu_ids)),
            memory=_memory(alloc.memory),
            pods=pods,
        )


def _numa(topology: pb.TopologyInfo) -> tuple[int, ...]:
    return tuple(sorted(n.ID for n in topology.nodes))


def _devices(devices: Iterable[pb.ContainerDevices]) -> tuple[DeviceGrant, ...]:
    return tuple(
        DeviceGrant(
            resource_name=d.resource_name,
            device_ids=tuple(d.device_ids),
            numa_nodes=_numa(d.topology),
        )
        for d in devices
    )


def _memory(memory: Iterable[pb.ContainerMemory]) -> tuple[MemoryGrant, ...]:
    return tuple(
        MemoryGrant(memory_type=m.memory_type, size=m.size, numa_nodes=_numa(m.topology))
        for m in memory
    )


def _claims(resources: Iterable[pb.DynamicResource]) -> tuple[ClaimGrant, ...]:
    return tuple(
        ClaimGrant(
            claim_namespace=r.claim_namespace,
            claim_name=r.claim_name,
            devices=tuple(
                ClaimDevice(
                    driver=c.driver_name,
                    pool=c.pool_name,
                    device=c.device_name,
                    cdi_devices=tuple(d.name for d in c.cdi_devices),
                    share_id=c.share_id if c.HasField("share_id") else None,
                )
                for c in r.claim_resources
            ),
        )
        for r in resources
    )


def _pod(pod: pb.PodResources) -> PodGrant:
    return PodGrant(
        namespace=pod.namespace,
        name=pod.name,
        containers=tuple(
            ContainerGrant(
                name=c.name,
                devices=_devices(c.devices),
                cpu_ids=tuple(sorted(c.cpu_ids)),
                memory=_memory(c.memory),
                claims=_claims(c.dynamic_resources),
            )
            for c in pod.containers
        ),
    )
