"""NodePrepareResources and NodeUnprepareResources as steps on claims (no protobuf here).

Prepare, per claim: answer from the node's record when the claim is there (idempotent, and what
survives restarts); else read the claim, take our allocated devices (`claims.allocated_devices`),
write its CDI spec, then record it. A claim that cannot be prepared gets its own error text, naming
the claim and the field; the others in the same call are prepared. Unprepare removes the spec and
the record entry; a claim never prepared here is already unprepared.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from agent import logkeys
from agent.dra.devices import DraDevice
from agent.errors import AgentError
from deviceplugin.dra.cdi_specs import CdiSpecDir
from deviceplugin.dra.claims import (
    AllocatedDevice,
    ClaimReader,
    ClaimRef,
    allocated_devices,
    reserved_pods,
)
from deviceplugin.dra.mps_edits import DeviceEdits
from deviceplugin.dra.record import PreparedClaim, PreparedDevice, PreparedRecord
from deviceplugin.dra.wire import cdi_device_id
from deviceplugin.errors import ClaimError

logger = logging.getLogger(__name__)

Outcome = PreparedClaim | str
"""A prepared claim, or why it could not be prepared."""


class ShareEdits(Protocol):
    """The CDI edits a share of a shared device needs (`mps_edits.MpsEdits` under MPS); raises
    ClaimError to refuse the claim."""

    def __call__(
        self,
        ref: ClaimRef,
        device: DraDevice,
        consumed: Mapping[str, str],
        pods: Sequence[Mapping[str, Any]],
    ) -> DeviceEdits: ...


class Preparer:
    """Prepares claims for the devices of this node's pool (`devices()` is read on each call:
    it follows MIG layout changes)."""

    def __init__(
        self,
        *,
        pool: str,
        reader: ClaimReader,
        devices: Callable[[], Sequence[DraDevice]],
        record: PreparedRecord,
        cdi: CdiSpecDir,
        share_edits: ShareEdits | None = None,
    ) -> None:
        self.pool = pool
        self._share_edits = share_edits
        self._reader = reader
        self._devices = devices
        self.record = record
        self._cdi = cdi
        self._lock = threading.Lock()

    def prepare(self, refs: Sequence[ClaimRef]) -> dict[str, Outcome]:
        with self._lock:
            node_pods: tuple[Mapping[str, Any], ...] | None = None
            out: dict[str, Outcome] = {}
            for ref in refs:
                known = self.record.get(ref.uid)
                if known is not None:
                    self._cdi.write(ref.uid, known.devices)
                    out[ref.uid] = known
                    continue
                try:
                    if node_pods is None:
                        node_pods = self._reader.node_pods()
                    out[ref.uid] = self._prepare_one(ref, node_pods)
                except (ClaimError, AgentError) as exc:
                    logger.warning("not prepared: %s", exc, extra={logkeys.POD: str(ref)})
                    out[ref.uid] = str(exc)
            return out

    def _prepare_one(self, ref: ClaimRef, node_pods: Sequence[Mapping[str, Any]]) -> PreparedClaim:
        catalog = {d.name: d for d in self._devices()}
        claim = self._reader.read_claim(ref.namespace, ref.name)
        published = dict.fromkeys(catalog, self.pool)
        allocated = allocated_devices(claim, ref, node_pods, published)
        assert claim is not None  # allocated_devices refuses a missing claim
        pods = reserved_pods(claim, node_pods)
        devices = tuple(
            _prepared(ref, a, catalog[a.device], self._edits(ref, a, catalog[a.device], pods))
            for a in allocated
        )
        self._cdi.write(ref.uid, devices)
        prepared = PreparedClaim(
            uid=ref.uid, namespace=ref.namespace, name=ref.name, devices=devices
        )
        self.record.put(prepared)
        logger.info(
            "prepared %s: %s", ref, ", ".join(d.device for d in devices) or "no device of ours"
        )
        return prepared

    def _edits(
        self,
        ref: ClaimRef,
        allocated: AllocatedDevice,
        device: DraDevice,
        pods: Sequence[Mapping[str, Any]],
    ) -> DeviceEdits:
        if self._share_edits is None or not device.shared:
            return DeviceEdits()
        return self._share_edits(ref, device, allocated.consumed, pods)

    def unprepare(self, refs: Sequence[ClaimRef]) -> dict[str, str]:
        """Claim UID -> error text ("" when unprepared)."""
        with self._lock:
            out: dict[str, str] = {}
            for ref in refs:
                try:
                    self._cdi.remove(ref.uid)
                    if self.record.remove(ref.uid):
                        logger.info("unprepared %s", ref)
                    out[ref.uid] = ""
                except OSError as exc:
                    out[ref.uid] = f"{ref}: removing its CDI spec failed: {exc}"
            return out


def _prepared(
    ref: ClaimRef, allocated: AllocatedDevice, device: DraDevice, edits: DeviceEdits
) -> PreparedDevice:
    return PreparedDevice(
        env=edits.env,
        mounts=edits.mounts,
        requests=allocated.requests,
        pool=allocated.pool,
        device=allocated.device,
        uuid=device.uuid,
        cdi_ids=(cdi_device_id(ref.uid, allocated.device),),
        share_id=allocated.share_id,
    )
