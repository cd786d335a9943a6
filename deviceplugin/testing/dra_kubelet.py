"""A kubelet emulator for DRA drivers: the plugin watcher and the DRA manager's client side.

Like the kubelet it finds registration sockets in a `plugins_registry` directory (`scan()`), asks
`GetInfo`, accepts a plugin of type `DRAPlugin` that lists `v1.DRAPlugin` or `v1beta1.DRAPlugin`
(the first of them in the plugin's order, as the kubelet picks), answers
`NotifyRegistrationStatus`, then dials the plugin's endpoint. `prepare` and `unprepare` call the
chosen version with a pod's claims and check what the kubelet checks (every claim answered).
`watch_health` reads `v1alpha1.DRAResourceHealth` into a live view. `restart()` forgets every
plugin, as a restarted kubelet does, and scans anew.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc

from deviceplugin._pb import dra_health_v1alpha1_pb2 as health_pb
from deviceplugin._pb import dra_health_v1alpha1_pb2_grpc as health_grpc
from deviceplugin._pb import dra_v1_pb2 as v1_pb
from deviceplugin._pb import dra_v1_pb2_grpc as v1_grpc
from deviceplugin._pb import dra_v1beta1_pb2 as v1beta1_pb
from deviceplugin._pb import dra_v1beta1_pb2_grpc as v1beta1_grpc
from deviceplugin._pb import pluginregistration_pb2 as reg_pb
from deviceplugin._pb import pluginregistration_pb2_grpc as reg_grpc
from deviceplugin.kubelet_registration import dial

logger = logging.getLogger(__name__)

_SERVICES: dict[str, tuple[ModuleType, Any]] = {
    "v1.DRAPlugin": (v1_pb, v1_grpc.DRAPluginStub),
    "v1beta1.DRAPlugin": (v1beta1_pb, v1beta1_grpc.DRAPluginStub),
}


class PrepareCallError(Exception):
    """What the kubelet would count as a failed call: an RPC error or a claim left out."""


@dataclass(slots=True)
class DraRegistration:
    driver: str
    endpoint: str
    service: str  # the version the kubelet chose
    advertised: tuple[str, ...]
    channel: grpc.Channel
    stub: Any
    pb: ModuleType
    health: dict[str, int] = field(default_factory=dict)  # "<pool>/<device>" -> HealthStatus
    health_messages: int = 0


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    requests: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]
    share_id: str | None = None  # v1 only


class DraKubelet:
    """The kubelet's view of the DRA drivers whose sockets are in `registry_dir`."""

    def __init__(self, registry_dir: Path, services: Sequence[str] = tuple(_SERVICES)) -> None:
        self.registry_dir = registry_dir
        self.services = tuple(services)  # what this kubelet speaks (1.32-1.33: v1beta1 only)
        self.plugins: dict[str, DraRegistration] = {}
        self.refused: dict[str, str] = {}  # socket path -> why
        self._cond = threading.Condition()

    def scan(self) -> list[str]:
        """Register every plugin socket not registered yet; the drivers registered now."""
        known = {r.endpoint for r in self.plugins.values()}
        added = []
        for socket in sorted(self.registry_dir.glob("*.sock")):
            info = self._info(socket)
            if info is None or info.endpoint in known:
                continue
            name = self._register(socket, info)
            if name is not None:
                added.append(name)
        return added

    def _info(self, socket: Path) -> reg_pb.PluginInfo | None:
        with dial(socket) as channel:
            try:
                info: reg_pb.PluginInfo = reg_grpc.RegistrationStub(channel).GetInfo(  # type: ignore[no-untyped-call]
                    reg_pb.InfoRequest(), timeout=5
                )
            except grpc.RpcError as exc:
                self.refused[str(socket)] = f"GetInfo failed: {exc.code()}"
                return None
            return info

    def _register(self, socket: Path, info: reg_pb.PluginInfo) -> str | None:
        service = next((v for v in info.supported_versions if v in self.services), None)
        error = ""
        if info.type != "DRAPlugin":
            error = f"plugin type {info.type!r} is not DRAPlugin"
        elif service is None:
            error = f"none of {list(info.supported_versions)} is supported"
        with dial(socket) as channel:
            reg_grpc.RegistrationStub(channel).NotifyRegistrationStatus(  # type: ignore[no-untyped-call]
                reg_pb.RegistrationStatus(plugin_registered=not error, error=error), timeout=5
            )
        if error or service is None:
            self.refused[str(socket)] = error
            return None
        pb, stub_type = _SERVICES[service]
        channel = dial(Path(info.endpoint))
        self.plugins[info.name] = DraRegistration(
            driver=info.name,
            endpoint=info.endpoint,
            service=service,
            advertised=tuple(info.supported_versions),
            channel=channel,
            stub=stub_type(channel),
            pb=pb,
        )
        return info.name

    def prepare(
        self, driver: str, claims: Sequence[tuple[str, str, str]]
    ) -> dict[str, tuple[PreparedDevice, ...] | str]:
        """(namespace, name, uid) claims -> per claim UID its devices or its error text."""
        reg = self.plugins[driver]
        request = reg.pb.NodePrepareResourcesRequest(claims=[_claim(reg.pb, c) for c in claims])
        response = self._call(reg.stub.NodePrepareResources, request, claims)
        out: dict[str, tuple[PreparedDevice, ...] | str] = {}
        for uid, entry in response.claims.items():
            out[uid] = entry.error or tuple(
                PreparedDevice(
                    tuple(d.request_names),
                    d.pool_name,
                    d.device_name,
                    tuple(d.cdi_device_ids),
                    d.share_id
                    if "share_id" in d.DESCRIPTOR.fields_by_name and d.HasField("share_id")
                    else None,
                )
                for d in entry.devices
            )
        return out

    def unprepare(self, driver: str, claims: Sequence[tuple[str, str, str]]) -> dict[str, str]:
        reg = self.plugins[driver]
        request = reg.pb.NodeUnprepareResourcesRequest(claims=[_claim(reg.pb, c) for c in claims])
        response = self._call(reg.stub.NodeUnprepareResources, request, claims)
        return {uid: entry.error for uid, entry in response.claims.items()}

    @staticmethod
    def _call(method: Any, request: Any, claims: Sequence[tuple[str, str, str]]) -> Any:
        try:
            response = method(request, timeout=45)
        except grpc.RpcError as exc:
            raise PrepareCallError(f"{exc.code()}: {exc.details()}") from None
        missing = [uid for _, _, uid in claims if uid not in response.claims]
        if missing:
            raise PrepareCallError(f"left out {len(missing)} claims: {missing}")
        return response

    def watch_health(self, driver: str) -> threading.Thread:
        """Read the driver's health stream into `plugins[driver].health` until it ends."""
        reg = self.plugins[driver]
        stub = health_grpc.DRAResourceHealthStub(reg.channel)  # type: ignore[no-untyped-call]
        stream = stub.NodeWatchResources(health_pb.NodeWatchResourcesRequest())

        def read() -> None:
            try:
                for message in stream:
                    with self._cond:
                        reg.health = {
                            f"{d.device.pool_name}/{d.device.device_name}": d.health
                            for d in message.devices
                        }
                        reg.health_messages += 1
                        self._cond.notify_all()
            except grpc.RpcError as exc:
                logger.info("health stream of %s ended: %s", driver, exc.code())

        thread = threading.Thread(target=read, name=f"dra-health-{driver}", daemon=True)
        thread.start()
        return thread

    def wait_health(self, driver: str, device: str, health: int, timeout_s: float = 5.0) -> bool:
        """True once the driver's last health message gives `device` (`pool/name`) `health`."""
        with self._cond:
            return self._cond.wait_for(
                lambda: self.plugins[driver].health.get(device) == health, timeout_s
            )

    def restart(self) -> None:
        """Forget every plugin and its streams, as a restarted kubelet does."""
        self.close()
        self.scan()

    def close(self) -> None:
        for reg in self.plugins.values():
            reg.channel.close()
        self.plugins.clear()


def _claim(pb: ModuleType, claim: tuple[str, str, str]) -> Any:
    namespace, name, uid = claim
    return pb.Claim(namespace=namespace, name=name, uid=uid)
