"""`DraPlugin`: the DRA driver's kubelet side as one agent service (DESIGN §14).

It serves the DRA services (`v1.DRAPlugin`, `v1beta1.DRAPlugin`, `v1alpha1.DRAResourceHealth`)
on `<plugins_dir>/gpu.gputopo.io/dra.sock`, then the plugin-watcher `Registration` service on
`<registry_dir>/gpu.gputopo.io-reg.sock`; the kubelet finds the registration socket (also after its
own restart: it rescans the directory) and dials the service socket. `stop()` removes the
registration socket first, so the kubelet drops the driver before the service goes away.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc

from agent.dra import DRIVER
from agent.dra.devices import DraDevice
from deviceplugin._pb import dra_health_v1alpha1_pb2_grpc as health_grpc
from deviceplugin._pb import dra_v1_pb2_grpc as v1_grpc
from deviceplugin._pb import dra_v1beta1_pb2_grpc as v1beta1_grpc
from deviceplugin._pb import pluginregistration_pb2_grpc as reg_grpc
from deviceplugin.device_state import DeviceState
from deviceplugin.dra.cdi_specs import CdiSpecDir
from deviceplugin.dra.claims import ClaimReader
from deviceplugin.dra.prepare import Preparer, ShareEdits
from deviceplugin.dra.record import PreparedRecord
from deviceplugin.dra.servicers import (
    DraPluginV1,
    DraPluginV1beta1,
    HealthServicer,
    RegistrationServicer,
)
from deviceplugin.dra.wire import RECORD_FILE, REGISTRATION_SOCKET, SERVICE_SOCKET

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class DraPaths:
    """Where the sockets, the record and the CDI specs go (host paths, as the kubelet sees them)."""

    registry_dir: Path
    plugins_dir: Path
    cdi_dir: Path

    @property
    def service_socket(self) -> Path:
        return self.plugins_dir / DRIVER / SERVICE_SOCKET

    @property
    def registration_socket(self) -> Path:
        return self.registry_dir / REGISTRATION_SOCKET

    @property
    def record(self) -> Path:
        return self.plugins_dir / DRIVER / RECORD_FILE


class DraPlugin:
    """The kubelet plugin of the DRA driver for this node's pool."""

    name = "dra-plugin"

    def __init__(
        self,
        *,
        node: str,
        paths: DraPaths,
        reader: ClaimReader,
        devices: Callable[[], Sequence[DraDevice]],
        state: DeviceState,
        dry_run: bool = False,
        health_resend_s: float = 10.0,
        share_edits: ShareEdits | None = None,
    ) -> None:
        """`share_edits`: what a share of a shared device adds to its CDI spec (MPS)."""
        self.paths = paths
        self._stop = threading.Event()
        self.record = PreparedRecord(None if dry_run else paths.record)
        self.preparer = Preparer(
            pool=node,
            reader=reader,
            devices=devices,
            record=self.record,
            cdi=CdiSpecDir(paths.cdi_dir),
            share_edits=share_edits,
        )
        self.health = HealthServicer(
            pool=node, devices=devices, state=state, stop=self._stop, resend_s=health_resend_s
        )
        self.registration = RegistrationServicer(str(paths.service_socket))
        self._servers: list[tuple[grpc.Server, Path]] = []

    def start(self) -> None:
        service = _server("dra", 8)
        v1_grpc.add_DRAPluginServicer_to_server(DraPluginV1(self.preparer), service)  # type: ignore[no-untyped-call]
        v1beta1_grpc.add_DRAPluginServicer_to_server(DraPluginV1beta1(self.preparer), service)  # type: ignore[no-untyped-call]
        health_grpc.add_DRAResourceHealthServicer_to_server(self.health, service)  # type: ignore[no-untyped-call]
        self._serve(service, self.paths.service_socket)
        registration = _server("dra-reg", 2)
        reg_grpc.add_RegistrationServicer_to_server(self.registration, registration)  # type: ignore[no-untyped-call]
        self._serve(registration, self.paths.registration_socket)
        logger.info(
            "DRA driver %s serving %s, registering at %s",
            DRIVER,
            self.paths.service_socket,
            self.paths.registration_socket,
        )

    def _serve(self, server: grpc.Server, socket: Path) -> None:
        socket.parent.mkdir(parents=True, exist_ok=True)
        socket.unlink(missing_ok=True)
        server.add_insecure_port(f"unix://{socket}")
        server.start()
        self._servers.append((server, socket))

    def stop(self, grace_s: float = 0.5) -> None:
        """Registration socket first, then the service; open health streams end."""
        self._stop.set()
        for server, socket in reversed(self._servers):
            socket.unlink(missing_ok=True)
            server.stop(grace_s).wait()
        self._servers.clear()


def _server(prefix: str, workers: int) -> grpc.Server:
    return grpc.server(futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix=prefix))
