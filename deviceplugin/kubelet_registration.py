"""Registering with the kubelet, and noticing when the kubelet restarts.

The kubelet answers `Register` only after it has dialled the plugin's socket and called
`GetDevicePluginOptions`, so the plugin's server must already be serving. When the kubelet
restarts it deletes every socket in the device-plugin directory (but its checkpoint) and creates a
new `kubelet.sock`; `SocketWatch` notices the new inode so every plugin re-creates its socket and
registers again.

Each `Register` dials the kubelet afresh (`dial`): gRPC Python shares a connection between channels
to the same socket, so a new channel would inherit another call's connection in reconnect back-off
(after the kubelet was down) and fail at once for up to the back-off (1 s, then 1.6 s, ...) though
the kubelet is serving again. The kubelet's own dials (Go) share nothing either.
"""

from __future__ import annotations

import os
from pathlib import Path

import grpc

from deviceplugin._pb import deviceplugin_pb2 as pb
from deviceplugin._pb import deviceplugin_pb2_grpc as pb_grpc
from deviceplugin.errors import RegistrationError
from deviceplugin.kubelet_api import VERSION

FileId = tuple[int, int, int]
"""(device, inode, change time) of a file: a re-created socket gets a new one."""


def file_id(path: Path) -> FileId | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_ctime_ns


def dial(socket: Path) -> grpc.Channel:
    """A channel to a unix socket with its own connection: none shared with another channel."""
    return grpc.insecure_channel(
        f"unix://{socket}", options=[("grpc.use_local_subchannel_pool", 1)]
    )


def register(
    kubelet_socket: Path,
    *,
    endpoint: str,
    resource_name: str,
    preferred_allocation: bool = True,
    timeout_s: float = 10.0,
) -> None:
    """Register one resource served on `endpoint` (a socket name in the same directory)."""
    request = pb.RegisterRequest(
        version=VERSION,
        endpoint=endpoint,
        resource_name=resource_name,
        options=pb.DevicePluginOptions(get_preferred_allocation_available=preferred_allocation),
    )
    try:
        with dial(kubelet_socket) as channel:
            stub = pb_grpc.RegistrationStub(channel)  # type: ignore[no-untyped-call]
            stub.Register(request, timeout=timeout_s)
    except grpc.RpcError as exc:
        raise RegistrationError(
            f"registering {resource_name} ({endpoint}) with {kubelet_socket} failed: "
            f"{rpc_details(exc)}"
        ) from exc


def rpc_details(exc: grpc.RpcError) -> str:
    """The status code and details of a failed call, on one line."""
    code, details = getattr(exc, "code", None), getattr(exc, "details", None)
    if callable(code) and callable(details):
        return f"{code().name}: {details()}"
    return str(exc)


class SocketWatch:
    """Remembers a socket file's identity; `changed()` says when it was deleted or re-created."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.current: FileId | None = file_id(path)

    def changed(self) -> bool:
        now = file_id(self.path)
        if now == self.current:
            return False
        self.current = now
        return True
