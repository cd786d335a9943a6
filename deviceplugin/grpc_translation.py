"""`GrpcTranslation`: the `v1beta1.DevicePlugin` servicer of one resource; it only translates.

Each RPC turns protobuf into model values, asks `DeviceState` (what is advertised, what is
Unhealthy) and the `Allocator` (the decisions), and turns the answer back into protobuf. Our
request errors become `context.abort` with INVALID_ARGUMENT / FAILED_PRECONDITION and a message
naming the device; anything unexpected is logged once with its traceback and becomes INTERNAL.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Protocol, TypeVar

import grpc

from agent import logkeys
from agent.model import HEALTHY, UNHEALTHY
from agent.plural import counted
from deviceplugin._pb import deviceplugin_pb2 as pb
from deviceplugin._pb import deviceplugin_pb2_grpc as pb_grpc
from deviceplugin.allocation import Allocator, ContainerAllocation, PreferredRequest
from deviceplugin.device_state import DeviceState, down_error
from deviceplugin.errors import DeviceUnavailableError, InvalidRequestError, RequestError
from deviceplugin.resources import Resource, is_healthy
from deviceplugin.share_allocation import ShareAllocator

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

MAX_DETAIL = 2_000
"""Longest status message we send (the allocator's own messages stay far below)."""

DeviceList = tuple[tuple[str, bool, int | None], ...]
"""(ID, healthy, NUMA node) per device: what one ListAndWatch message says."""


class RpcObserver(Protocol):
    """Receives one call per RPC (the metrics' latency histogram)."""

    def __call__(self, method: str, resource: str, seconds: float, code: str) -> None: ...


def is_share_resource(resource: Resource) -> bool:
    """Replicas of whole GPUs: served per pod through the share lock (DESIGN §12); time-sliced
    MIG devices are not shares and keep the plain answer."""
    return resource.shared and all(d.mig is None for d in resource.devices)


def device_list(
    resource: Resource | None, unhealthy: frozenset[str], down: bool = False
) -> DeviceList:
    """Share replicas go without their NUMA node (DESIGN §12): the kubelet's topology manager
    must never narrow which replica it hands out, since the GPU is the scheduler's choice.
    A resource `down` (MPS not serving) lists every device Unhealthy."""
    if resource is None:
        return ()
    shares = is_share_resource(resource)
    return tuple(
        (d.id, not down and is_healthy(d, unhealthy), None if shares else d.numa_node)
        for d in resource.devices
    )


def to_list_response(devices: DeviceList) -> pb.ListAndWatchResponse:
    return pb.ListAndWatchResponse(
        devices=[
            pb.Device(
                ID=device_id,
                health=HEALTHY if healthy else UNHEALTHY,
                topology=None if numa is None else pb.TopologyInfo(nodes=[pb.NUMANode(ID=numa)]),
            )
            for device_id, healthy, numa in devices
        ]
    )


def to_container_response(alloc: ContainerAllocation) -> pb.ContainerAllocateResponse:
    return pb.ContainerAllocateResponse(
        envs=dict(alloc.envs),
        mounts=[
            pb.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
            for m in alloc.mounts
        ],
        devices=[
            pb.DeviceSpec(
                container_path=d.container_path, host_path=d.host_path, permissions=d.permissions
            )
            for d in alloc.device_nodes
        ],
        annotations=dict(alloc.annotations),
        cdi_devices=[pb.CDIDevice(name=n) for n in alloc.cdi_devices],
    )


class GrpcTranslation(pb_grpc.DevicePluginServicer):
    """Answers the kubelet's calls for `resource_name` from the device state and the allocator."""

    def __init__(
        self,
        resource_name: str,
        device_state: DeviceState,
        allocator: Allocator,
        *,
        stop: threading.Event,
        observer: RpcObserver | None = None,
        poll_s: float = 1.0,
        shares: ShareAllocator | None = None,
    ) -> None:
        self.resource_name = resource_name
        self._shares = shares
        self._device_state = device_state
        self._allocator = allocator
        self._stop = stop
        self._observer = observer
        self._poll_s = poll_s

    def GetDevicePluginOptions(  # noqa: N802
        self, request: pb.Empty, context: grpc.ServicerContext
    ) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=True
        )

    def PreStartContainer(  # noqa: N802
        self, request: pb.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()

    def ListAndWatch(  # noqa: N802
        self, request: pb.Empty, context: grpc.ServicerContext
    ) -> Iterator[pb.ListAndWatchResponse]:
        """The full list now, then again on every change; ends when the resource goes away."""
        context.add_callback(self._device_state.wake)
        closing: Callable[[], bool] = lambda: self._stop.is_set() or not context.is_active()  # noqa: E731
        last: DeviceList | None = None
        state = self._device_state.view()
        while not closing():
            resource = state.resources.get(self.resource_name)
            devices = device_list(resource, state.unhealthy, self.resource_name in state.down)
            if devices != last:
                logger.debug(
                    "ListAndWatch %s: %s", self.resource_name, counted(len(devices), "device")
                )
                yield to_list_response(devices)
                last = devices
            if resource is None:
                return
            state = self._device_state.wait(state.version, self._poll_s, closing)

    def Allocate(  # noqa: N802
        self, request: pb.AllocateRequest, context: grpc.ServicerContext
    ) -> pb.AllocateResponse:
        return self._guarded("Allocate", context, lambda: self._allocate(request))

    def GetPreferredAllocation(  # noqa: N802
        self, request: pb.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> pb.PreferredAllocationResponse:
        return self._guarded("GetPreferredAllocation", context, lambda: self._preferred(request))

    def _allocate(self, request: pb.AllocateRequest) -> pb.AllocateResponse:
        ids = [list(c.devices_ids) for c in request.container_requests]
        resource, state = self._current(), self._device_state.view()
        down = state.down.get(resource.name)
        if self._shares is not None and is_share_resource(resource):
            allocations = self._shares.allocate(resource, state.unhealthy, ids, down=down)
        elif down is not None:
            raise down_error(resource.name, down)
        else:
            allocations = self._allocator.allocate(resource, state.unhealthy, ids)
        return pb.AllocateResponse(
            container_responses=[to_container_response(a) for a in allocations]
        )

    def _preferred(self, request: pb.PreferredAllocationRequest) -> pb.PreferredAllocationResponse:
        resource = self._current()
        answers = [self._preferred_one(resource, c) for c in request.container_requests]
        return pb.PreferredAllocationResponse(
            container_responses=[
                pb.ContainerPreferredAllocationResponse(deviceIDs=list(a)) for a in answers
            ]
        )

    def _preferred_one(
        self, resource: Resource, c: pb.ContainerPreferredAllocationRequest
    ) -> tuple[str, ...]:
        asked = PreferredRequest(
            available=tuple(c.available_deviceIDs),
            must_include=tuple(c.must_include_deviceIDs),
            size=c.allocation_size,
        )
        packed = self._allocator.preferred(resource, asked)  # validates the request
        if self._shares is None or not is_share_resource(resource):
            return packed
        shared = self._shares.preferred(resource, asked.available, asked.must_include, asked.size)
        return packed if shared is None else shared

    def _current(self) -> Resource:
        resource = self._device_state.resource(self.resource_name)
        if resource is None:
            raise DeviceUnavailableError(f"{self.resource_name} is no longer advertised")
        return resource

    def _guarded(self, method: str, context: grpc.ServicerContext, body: Callable[[], _T]) -> _T:
        """Run `body`; our errors abort with their status, anything else is logged and INTERNAL."""
        start, code = time.perf_counter(), grpc.StatusCode.OK
        extra = {logkeys.RESOURCE: self.resource_name}
        try:
            return body()
        except RequestError as exc:
            code = _status_of(exc)
            logger.info("%s refused: %s", method, exc, extra=extra)
            context.abort(code, _detail(str(exc)))
        except Exception as exc:
            code = grpc.StatusCode.INTERNAL
            logger.exception("%s %s failed", method, self.resource_name, extra=extra)
            context.abort(code, _detail(f"{method} {self.resource_name}: internal error: {exc}"))
        finally:
            if self._observer is not None:
                elapsed = time.perf_counter() - start
                self._observer(method, self.resource_name, elapsed, code.name)


def _detail(message: str) -> str:
    """A status message the client can receive: over gRPC's 8 KiB metadata limit it would
    arrive as RESOURCE_EXHAUSTED instead of our code."""
    return message if len(message) <= MAX_DETAIL else message[:MAX_DETAIL] + "… (cut)"


def _status_of(exc: RequestError) -> grpc.StatusCode:
    if isinstance(exc, InvalidRequestError):
        return grpc.StatusCode.INVALID_ARGUMENT
    return grpc.StatusCode.FAILED_PRECONDITION
