"""The DRA gRPC services on the kubelet's side of the wire: protobuf in and out, nothing else.

`DraPluginV1` and `DraPluginV1beta1` serve `Node(Un)PrepareResources` through one `Preparer`
(v1beta1 has no `share_id`); `HealthServicer` streams every device's health
(`v1alpha1.DRAResourceHealth`), the complete list again on each change and every 10 s (the kubelet
reads a device not reported for 30 s as Unknown); `RegistrationServicer`
answers the kubelet's plugin watcher. A request with a claim missing its UID, namespace or name is
INVALID_ARGUMENT naming the entry; an unexpected failure is logged once and is INTERNAL.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import grpc

from agent.dra import DRIVER
from agent.dra.devices import DraDevice, unhealthy_devices
from deviceplugin._pb import dra_health_v1alpha1_pb2 as health_pb
from deviceplugin._pb import dra_health_v1alpha1_pb2_grpc as health_grpc
from deviceplugin._pb import dra_v1_pb2 as v1_pb
from deviceplugin._pb import dra_v1_pb2_grpc as v1_grpc
from deviceplugin._pb import dra_v1beta1_pb2 as v1beta1_pb
from deviceplugin._pb import dra_v1beta1_pb2_grpc as v1beta1_grpc
from deviceplugin._pb import pluginregistration_pb2 as reg_pb
from deviceplugin._pb import pluginregistration_pb2_grpc as reg_grpc
from deviceplugin.device_state import DeviceState, DeviceStateView
from deviceplugin.dra.claims import ClaimRef
from deviceplugin.dra.prepare import Preparer
from deviceplugin.dra.wire import PLUGIN_TYPE, SUPPORTED_VERSIONS
from deviceplugin.errors import InvalidRequestError

logger = logging.getLogger(__name__)


def claim_refs(claims: Sequence[Any]) -> list[ClaimRef]:
    """The request's claims; InvalidRequestError names the first entry with an empty field."""
    refs = []
    for i, claim in enumerate(claims):
        for field in ("uid", "namespace", "name"):
            if not getattr(claim, field):
                raise InvalidRequestError(f"claims[{i}].{field} is empty")
        refs.append(ClaimRef(namespace=claim.namespace, name=claim.name, uid=claim.uid))
    return refs


class _Translation:
    """Prepare/unprepare for one protobuf version (`pb`: its generated message module)."""

    def __init__(self, preparer: Preparer, pb: ModuleType, *, share_ids: bool) -> None:
        self._preparer = preparer
        self._pb = pb
        self._share_ids = share_ids

    def prepare(self, request: Any, context: grpc.ServicerContext) -> Any:
        with _errors(context, "NodePrepareResources"):
            outcomes = self._preparer.prepare(claim_refs(request.claims))
            response = self._pb.NodePrepareResourcesResponse()
            for uid, outcome in outcomes.items():
                entry = response.claims[uid]
                if isinstance(outcome, str):
                    entry.error = outcome
                    continue
                for device in outcome.devices:
                    out = entry.devices.add(
                        request_names=list(device.requests),
                        pool_name=device.pool,
                        device_name=device.device,
                        cdi_device_ids=list(device.cdi_ids),
                    )
                    if self._share_ids and device.share_id:
                        out.share_id = device.share_id
            return response

    def unprepare(self, request: Any, context: grpc.ServicerContext) -> Any:
        with _errors(context, "NodeUnprepareResources"):
            errors = self._preparer.unprepare(claim_refs(request.claims))
            response = self._pb.NodeUnprepareResourcesResponse()
            for uid, error in errors.items():
                response.claims[uid].error = error
            return response


@contextmanager
def _errors(context: grpc.ServicerContext, rpc: str) -> Iterator[None]:
    """Map a request's failure to its gRPC status, as the device plugin's translation does."""
    try:
        yield
    except InvalidRequestError as exc:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{rpc}: {exc}")
    except Exception as exc:
        logger.exception("%s failed", rpc)
        context.abort(grpc.StatusCode.INTERNAL, f"{rpc}: {exc}")


class DraPluginV1(v1_grpc.DRAPluginServicer):
    def __init__(self, preparer: Preparer) -> None:
        self._t = _Translation(preparer, v1_pb, share_ids=True)

    def NodePrepareResources(  # noqa: N802
        self, request: Any, context: grpc.ServicerContext
    ) -> Any:
        return self._t.prepare(request, context)

    def NodeUnprepareResources(  # noqa: N802
        self, request: Any, context: grpc.ServicerContext
    ) -> Any:
        return self._t.unprepare(request, context)


class DraPluginV1beta1(v1beta1_grpc.DRAPluginServicer):
    def __init__(self, preparer: Preparer) -> None:
        self._t = _Translation(preparer, v1beta1_pb, share_ids=False)

    def NodePrepareResources(  # noqa: N802
        self, request: Any, context: grpc.ServicerContext
    ) -> Any:
        return self._t.prepare(request, context)

    def NodeUnprepareResources(  # noqa: N802
        self, request: Any, context: grpc.ServicerContext
    ) -> Any:
        return self._t.unprepare(request, context)


class HealthServicer(health_grpc.DRAResourceHealthServicer):
    """Streams the health of every published device, Unhealthy as `unhealthy_devices` reads the
    device state (an Xid on it or its GPU; a share while MPS does not serve)."""

    def __init__(
        self,
        *,
        pool: str,
        devices: Callable[[], Sequence[DraDevice]],
        state: DeviceState,
        stop: threading.Event,
        wall_clock: Callable[[], float] = time.time,
        wait_s: float = 1.0,
        resend_s: float = 10.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pool = pool
        self._devices = devices
        self._state = state
        self._stop = stop
        self._clock = wall_clock
        self._wait_s = wait_s
        self._resend_s = resend_s
        self._monotonic = monotonic

    def message(self, view: DeviceStateView) -> health_pb.NodeWatchResourcesResponse:
        now = int(self._clock())
        response = health_pb.NodeWatchResourcesResponse()
        devices = self._devices()
        why = unhealthy_devices(devices, view.unhealthy, view.mps_down)
        for device in devices:
            entry = response.devices.add()
            entry.device.pool_name = self._pool
            entry.device.device_name = device.name
            bad = device.name in why
            entry.health = health_pb.UNHEALTHY if bad else health_pb.HEALTHY
            entry.last_updated_time = now
            entry.message = why.get(device.name, "")
        return response

    def NodeWatchResources(  # noqa: N802
        self, request: Any, context: grpc.ServicerContext
    ) -> Iterator[health_pb.NodeWatchResourcesResponse]:
        """The list at once, again on every change, and again every `resend_s` without one: the
        kubelet reads a device whose last report is older than 30 s as Unknown."""
        version, last, sent_at = -1, None, float("-inf")

        def done() -> bool:
            return self._stop.is_set() or not context.is_active()

        while not done():
            wait = max(0.0, min(self._wait_s, sent_at + self._resend_s - self._monotonic()))
            view = self._state.wait(version, wait, cancelled=done)
            version = view.version
            message = self.message(view)
            key = [(d.device.device_name, d.health) for d in message.devices]
            due = self._monotonic() - sent_at >= self._resend_s
            if (key != last or due) and not done():
                last, sent_at = key, self._monotonic()
                yield message


class RegistrationServicer(reg_grpc.RegistrationServicer):
    """What the kubelet's plugin watcher asks: who we are, then whether it took us."""

    def __init__(self, endpoint: str) -> None:
        self._endpoint = endpoint
        self.statuses: list[tuple[bool, str]] = []

    def GetInfo(  # noqa: N802
        self, request: Any, context: grpc.ServicerContext
    ) -> reg_pb.PluginInfo:
        return reg_pb.PluginInfo(
            type=PLUGIN_TYPE,
            name=DRIVER,
            endpoint=self._endpoint,
            supported_versions=list(SUPPORTED_VERSIONS),
        )

    def NotifyRegistrationStatus(  # noqa: N802
        self, request: Any, context: grpc.ServicerContext
    ) -> reg_pb.RegistrationStatusResponse:
        self.statuses.append((request.plugin_registered, request.error))
        if request.plugin_registered:
            logger.info("the kubelet registered DRA driver %s", DRIVER)
        else:
            logger.error("the kubelet refused DRA driver %s: %s", DRIVER, request.error)
        return reg_pb.RegistrationStatusResponse()
