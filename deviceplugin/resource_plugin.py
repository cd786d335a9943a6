"""`ResourcePlugin`: one resource's gRPC server, on `<plugin dir>/gputopo-<resource tail>.sock`.

It serves the resource's `GrpcTranslation` on its unix socket, notices when the kubelet deleted or
replaced that socket, and removes the socket when it stops (only if it is still ours).
"""

from __future__ import annotations

import logging
from concurrent import futures
from pathlib import Path

import grpc

from deviceplugin._pb import deviceplugin_pb2_grpc as pb_grpc
from deviceplugin.grpc_translation import GrpcTranslation
from deviceplugin.kubelet_api import socket_name
from deviceplugin.kubelet_registration import FileId, file_id

logger = logging.getLogger(__name__)


class ResourcePlugin:
    """Serves one resource's `GrpcTranslation` on its unix socket; `start` again re-creates it."""

    def __init__(self, plugin_dir: Path, translation: GrpcTranslation, *, max_workers: int = 8):
        self.resource_name = translation.resource_name
        self.socket_name = socket_name(self.resource_name)
        self.socket_path = plugin_dir / self.socket_name
        self._translation = translation
        self._max_workers = max_workers
        self._server: grpc.Server | None = None
        self._socket_id: FileId | None = None

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> None:
        """Remove a stale socket, bind ours, serve (before anyone registers it)."""
        self.stop()
        self.socket_path.unlink(missing_ok=True)
        server = grpc.server(
            futures.ThreadPoolExecutor(
                max_workers=self._max_workers, thread_name_prefix=f"dp-{self.socket_name}"
            )
        )
        pb_grpc.add_DevicePluginServicer_to_server(self._translation, server)  # type: ignore[no-untyped-call]
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.start()
        self._server = server
        self._socket_id = file_id(self.socket_path)  # None if the kubelet removed it already
        logger.info("serving %s on %s", self.resource_name, self.socket_path)

    def socket_lost(self) -> bool:
        """True when our socket file is missing, was replaced, or was gone before we saw it."""
        if self._server is None:
            return False
        return self._socket_id is None or file_id(self.socket_path) != self._socket_id

    def stop(self, grace_s: float = 0.2) -> None:
        """Stop serving (ending open streams) and remove our socket if it is still ours."""
        server, self._server = self._server, None
        if server is None:
            return
        server.stop(grace_s).wait()
        if self._socket_id is not None and file_id(self.socket_path) == self._socket_id:
            self.socket_path.unlink(missing_ok=True)
        self._socket_id = None
        logger.info("stopped serving %s", self.resource_name)
