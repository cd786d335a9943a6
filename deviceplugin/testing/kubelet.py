"""A kubelet emulator for the device-plugin API: Registration server plus device-manager client.

It behaves like the kubelet's device manager where the plugin can tell: it serves
`v1beta1.Registration` on `<dir>/kubelet.sock`; inside `Register` it dials the plugin's socket and
calls `GetDevicePluginOptions` (a plugin that is not yet serving fails its registration); it reads
each resource's `ListAndWatch` stream into a live view (a closed stream marks the resource's
devices Unhealthy); `admit` runs the kubelet's allocation flow (healthy minus in use, then
`GetPreferredAllocation` when offered, then `Allocate`); `restart()` deletes every file in the
directory but `kubelet_internal_checkpoint` and serves a new `kubelet.sock`; a `Register` still
running from before a restart is answered UNAVAILABLE and leaves no endpoint behind. `refuse()`
makes it fail one resource's `Register`, at once or after a delay (a kubelet that cannot dial).
Whole pods (batches, init containers, PodResources `List`) are admitted by
`deviceplugin.testing.admission.PodAdmitter` on top of it.
"""

from __future__ import annotations

import logging
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from agent.model import HEALTHY, UNHEALTHY
from deviceplugin._pb import deviceplugin_pb2 as pb
from deviceplugin._pb import deviceplugin_pb2_grpc as pb_grpc
from deviceplugin.kubelet_api import CHECKPOINT, KUBELET_SOCKET, VERSION
from deviceplugin.kubelet_registration import dial

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ListedDevice:
    """One device as the resource's last ListAndWatch message listed it."""

    id: str
    health: str
    numa_nodes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Registration:
    version: str
    endpoint: str
    resource_name: str
    preferred_allocation: bool


@dataclass(slots=True)
class _Endpoint:
    registration: Registration
    channel: grpc.Channel
    stub: pb_grpc.DevicePluginStub
    devices: dict[str, ListedDevice] = field(default_factory=dict)
    updates: int = 0
    connected: bool = True
    stream: grpc.Future | None = None  # type: ignore[type-arg]


class KubeletEmulator:
    """Start with `start()` (or as a context manager); stop with `stop()`."""

    def __init__(self, plugin_dir: Path | None = None, *, dial_timeout_s: float = 10.0) -> None:
        self.plugin_dir = plugin_dir or Path(tempfile.mkdtemp(prefix="kubelet-", dir="/tmp"))
        self.dial_timeout_s = dial_timeout_s
        self.registrations: list[Registration] = []
        self.in_use: dict[str, set[str]] = {}
        self._endpoints: dict[str, _Endpoint] = {}
        self._refused: dict[str, float] = {}
        self._registering: dict[str, int] = {}  # Register calls running now, per resource
        self._cond = threading.Condition()
        self._server: grpc.Server | None = None
        self._generation = 0  # one per start(): a Register still running from before is dropped

    @property
    def socket(self) -> Path:
        return self.plugin_dir / KUBELET_SOCKET

    def __enter__(self) -> KubeletEmulator:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        (self.plugin_dir / CHECKPOINT).touch()
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="kubelet")
        )
        with self._cond:
            self._generation += 1
            registration = _Registration(self, self._generation)
        pb_grpc.add_RegistrationServicer_to_server(registration, server)  # type: ignore[no-untyped-call]
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self._server = server

    def stop(self) -> None:
        server, self._server = self._server, None
        with self._cond:
            self._generation += 1
        if server is not None:
            server.stop(0).wait()
        with self._cond:
            endpoints = list(self._endpoints.values())
            self._endpoints.clear()
            self._cond.notify_all()
        for endpoint in endpoints:
            endpoint.channel.close()

    def restart(self) -> None:
        """What a kubelet restart does to the directory: clean it, serve a new kubelet.sock."""
        self.stop()
        for path in self.plugin_dir.iterdir():
            if path.name != CHECKPOINT and not path.is_dir():
                path.unlink(missing_ok=True)
        self.start()

    def refuse(self, resource: str, *, after_s: float = 0.0) -> None:
        """Fail every `Register` of `resource` with UNAVAILABLE, after `after_s` (a slow dial)."""
        with self._cond:
            self._refused[resource] = after_s

    def accept(self, resource: str) -> None:
        """Undo `refuse`."""
        with self._cond:
            self._refused.pop(resource, None)

    def refusal(self, resource: str) -> float | None:
        """How long a refused `Register` of `resource` takes; None when it is not refused."""
        with self._cond:
            return self._refused.get(resource)

    def registering(self, resource: str) -> int:
        """How many `Register` calls for `resource` are running now."""
        with self._cond:
            return self._registering.get(resource, 0)

    def _count_register(self, resource: str, delta: int) -> None:
        with self._cond:
            self._registering[resource] = self._registering.get(resource, 0) + delta
            self._cond.notify_all()

    # --- the live view -------------------------------------------------------------------------

    def resources(self) -> dict[str, dict[str, ListedDevice]]:
        with self._cond:
            return {name: dict(e.devices) for name, e in self._endpoints.items()}

    def devices(self, resource: str) -> dict[str, ListedDevice]:
        return self.resources().get(resource, {})

    def healthy(self, resource: str) -> set[str]:
        return {i for i, d in self.devices(resource).items() if d.health == HEALTHY}

    def updates(self, resource: str) -> int:
        """How many ListAndWatch messages this resource's current stream has delivered."""
        with self._cond:
            endpoint = self._endpoints.get(resource)
            return endpoint.updates if endpoint else 0

    def connected(self, resource: str) -> bool:
        with self._cond:
            endpoint = self._endpoints.get(resource)
            return endpoint is not None and endpoint.connected

    def wait_for(
        self, predicate: Callable[[KubeletEmulator], bool], timeout_s: float = 5.0
    ) -> bool:
        """Block until `predicate(self)` holds (re-checked on stream messages and registrations)."""
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self), timeout_s)

    # --- device-manager calls ------------------------------------------------------------------

    def options(self, resource: str) -> pb.DevicePluginOptions:
        options: pb.DevicePluginOptions = self._stub(resource).GetDevicePluginOptions(
            pb.Empty(), timeout=5
        )
        return options

    def allocate(self, resource: str, *containers: Sequence[str]) -> pb.AllocateResponse:
        """One `ContainerAllocateRequest` per argument; raises grpc.RpcError when refused."""
        request = pb.AllocateRequest(
            container_requests=[
                pb.ContainerAllocateRequest(devices_ids=list(c)) for c in containers
            ]
        )
        response: pb.AllocateResponse = self._stub(resource).Allocate(request, timeout=5)
        return response

    def preferred(
        self, resource: str, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> tuple[str, ...]:
        request = pb.PreferredAllocationRequest(
            container_requests=[
                pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=list(available),
                    must_include_deviceIDs=list(must_include),
                    allocation_size=size,
                )
            ]
        )
        response = self._stub(resource).GetPreferredAllocation(request, timeout=5)
        return tuple(response.container_responses[0].deviceIDs)

    def admit(
        self, resource: str, count: int
    ) -> tuple[tuple[str, ...], pb.ContainerAllocateResponse]:
        """The kubelet's flow for one container needing `count` devices; marks them in use."""
        in_use = self.in_use.setdefault(resource, set())
        available = sorted(self.healthy(resource) - in_use)
        if count > len(available):
            raise ValueError(f"{resource}: {count} requested, {len(available)} available")
        chosen: tuple[str, ...] = tuple(available)
        if count < len(available) and self._endpoint(resource).registration.preferred_allocation:
            chosen = self.preferred(resource, available, (), count)
        chosen = chosen[:count]
        response = self.allocate(resource, chosen).container_responses[0]
        in_use.update(chosen)
        return chosen, response

    def offers_preferred(self, resource: str) -> bool:
        """The plugin said `get_preferred_allocation_available` when it registered."""
        return self._endpoint(resource).registration.preferred_allocation

    def release(self, resource: str, ids: Sequence[str]) -> None:
        self.in_use.get(resource, set()).difference_update(ids)

    # --- internals -----------------------------------------------------------------------------

    def _endpoint(self, resource: str) -> _Endpoint:
        with self._cond:
            endpoint = self._endpoints.get(resource)
        if endpoint is None:
            raise KeyError(f"no plugin registered for {resource}")
        return endpoint

    def _stub(self, resource: str) -> pb_grpc.DevicePluginStub:
        return self._endpoint(resource).stub

    def _connect(self, request: pb.RegisterRequest, generation: int) -> None:
        """Dial the plugin and ask for its options, as the kubelet does inside Register.

        Raises `grpc.RpcError` when the dial fails and `_StoppedError` when this kubelet was stopped
        or restarted meanwhile (the endpoint belonged to the kubelet that is gone).
        """
        channel = dial(self.plugin_dir / request.endpoint)  # a fresh connection, as Go's dial
        stub = pb_grpc.DevicePluginStub(channel)  # type: ignore[no-untyped-call]
        try:
            options = stub.GetDevicePluginOptions(
                pb.Empty(), timeout=self.dial_timeout_s, wait_for_ready=True
            )
        except grpc.RpcError:
            channel.close()
            raise
        registration = Registration(
            version=request.version,
            endpoint=request.endpoint,
            resource_name=request.resource_name,
            preferred_allocation=options.get_preferred_allocation_available,
        )
        endpoint = _Endpoint(registration=registration, channel=channel, stub=stub)
        with self._cond:
            if generation != self._generation:
                channel.close()
                raise _StoppedError(f"kubelet stopped while registering {request.resource_name}")
            old = self._endpoints.get(request.resource_name)
            self._endpoints[request.resource_name] = endpoint
            self.registrations.append(registration)
            self._cond.notify_all()
        if old is not None:
            old.channel.close()
        threading.Thread(
            target=self._watch, args=(endpoint,), name=f"law-{request.resource_name}", daemon=True
        ).start()

    def _watch(self, endpoint: _Endpoint) -> None:
        name = endpoint.registration.resource_name
        try:
            for message in endpoint.stub.ListAndWatch(pb.Empty()):
                devices = {
                    d.ID: ListedDevice(d.ID, d.health, tuple(n.ID for n in d.topology.nodes))
                    for d in message.devices
                }
                with self._cond:
                    endpoint.devices = devices
                    endpoint.updates += 1
                    self._cond.notify_all()
        except grpc.RpcError as exc:
            logger.debug("ListAndWatch %s ended: %s", name, exc)
        except ValueError as exc:  # the channel was closed (a restart, a newer Register) first
            logger.debug("ListAndWatch %s not opened: %s", name, exc)
        with self._cond:
            endpoint.connected = False
            endpoint.devices = {
                i: ListedDevice(i, UNHEALTHY, d.numa_nodes) for i, d in endpoint.devices.items()
            }
            self._cond.notify_all()


class _StoppedError(Exception):
    """The kubelet that received a Register was stopped before it finished."""


class _Registration(pb_grpc.RegistrationServicer):
    def __init__(self, kubelet: KubeletEmulator, generation: int) -> None:
        self._kubelet = kubelet
        self._generation = generation

    def Register(  # noqa: N802
        self, request: pb.RegisterRequest, context: grpc.ServicerContext
    ) -> pb.Empty:
        self._kubelet._count_register(request.resource_name, 1)
        try:
            return self._register(request, context)
        finally:
            self._kubelet._count_register(request.resource_name, -1)

    def _register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.Empty:
        if request.version != VERSION:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"unsupported device plugin version {request.version!r} (supported: {VERSION})",
            )
        if not _extended_resource(request.resource_name):
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"invalid extended resource name {request.resource_name!r}",
            )
        self._refuse_if_asked(request, context)
        try:
            self._kubelet._connect(request, self._generation)
        except grpc.RpcError as exc:
            context.abort(
                grpc.StatusCode.UNAVAILABLE,
                f"failed to dial device plugin {request.endpoint}: {exc}",
            )
        except _StoppedError as exc:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        return pb.Empty()

    def _refuse_if_asked(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> None:
        after_s = self._kubelet.refusal(request.resource_name)
        if after_s is None:
            return
        threading.Event().wait(after_s)
        context.abort(
            grpc.StatusCode.UNAVAILABLE,
            f"failed to dial device plugin {request.endpoint}: refused by the test",
        )


def _extended_resource(name: str) -> bool:
    domain, slash, tail = name.partition("/")
    return bool(slash and domain and tail) and not domain.endswith("kubernetes.io")
