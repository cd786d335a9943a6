"""`ResourcePlugin`: one resource's gRPC server, on `<plugin dir>/<socket_name(resource)>`.

It serves the resource's `GrpcTranslation` on its unix socket, notices when the kubelet deleted or
replaced that socket, and removes the socket when it stops (only if it is still ours). Its worker
threads are `max_streams` for `ListAndWatch` streams plus `unary_workers` for the other calls; a
stream beyond `max_streams` is refused with RESOURCE_EXHAUSTED, so an open stream never takes the
worker an `Allocate` needs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from agent import logkeys
from deviceplugin._pb import deviceplugin_pb2_grpc as pb_grpc
from deviceplugin.grpc_translation import GrpcTranslation
from deviceplugin.kubelet_api import socket_name
from deviceplugin.kubelet_registration import FileId, file_id

logger = logging.getLogger(__name__)

LIST_AND_WATCH = "/v1beta1.DevicePlugin/ListAndWatch"


class ResourcePlugin:
    """Serves one resource's `GrpcTranslation` on its unix socket; `start` again re-creates it."""

    def __init__(
        self,
        plugin_dir: Path,
        translation: GrpcTranslation,
        *,
        max_streams: int = 4,
        unary_workers: int = 4,
    ):
        self.resource_name = translation.resource_name
        self.socket_name = socket_name(self.resource_name)
        self.socket_path = plugin_dir / self.socket_name
        self._translation = translation
        self._max_streams = max_streams
        self._workers = max_streams + unary_workers
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
                max_workers=self._workers, thread_name_prefix=f"dp-{self.socket_name}"
            ),
            interceptors=[StreamLimit(self.resource_name, self._max_streams)],
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


if TYPE_CHECKING:
    _Interceptor = grpc.ServerInterceptor[Any, Any]
else:
    _Interceptor = grpc.ServerInterceptor


class StreamLimit(_Interceptor):
    """Lets at most `max_streams` `ListAndWatch` streams run at once; refuses the rest."""

    def __init__(self, resource_name: str, max_streams: int) -> None:
        self._resource_name = resource_name
        self._max_streams = max_streams
        self._slots = threading.BoundedSemaphore(max_streams)

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = continuation(handler_call_details)
        if handler is None or handler_call_details.method != LIST_AND_WATCH:
            return handler
        stream = handler.unary_stream
        if stream is None:
            return handler
        return grpc.unary_stream_rpc_method_handler(
            lambda request, context: self._bounded(stream, request, context),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _bounded(
        self,
        stream: Callable[[Any, grpc.ServicerContext], Iterator[Any]],
        request: Any,
        context: grpc.ServicerContext,
    ) -> Iterator[Any]:
        if not self._slots.acquire(blocking=False):
            logger.warning(
                "%s: refused a ListAndWatch stream: %d are open already",
                self._resource_name,
                self._max_streams,
                extra={logkeys.RESOURCE: self._resource_name},
            )
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{self._resource_name}: at most {self._max_streams} ListAndWatch streams",
            )
        try:
            yield from stream(request, context)
        finally:
            self._slots.release()
