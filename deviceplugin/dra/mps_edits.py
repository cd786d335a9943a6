"""What a DRA share of a GPU needs under `sharing.mps` (DESIGN §12, §14): the CDI edits.

The same as the device plugin's Allocate gives a share (`deviceplugin.mps_env`):
`CUDA_MPS_PIPE_DIRECTORY` (mounted at the same path) and that user's tmpfs as `/dev/shm`,
`CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=<MiB>M` and `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=<percent>`.
The sizes come from the allocation result's `consumedCapacity` (`memory`, `compute`), written by
the scheduler that allocated the claim (nothing the pod author writes widens it); a result without
them takes the device's equal split, as its request policy does.

The user is the one the claim's containers run as (each container's `runAsUser`, else the pod's)
in the pods on this node the claim is reserved for; containers that use no claim are not asked.
Refused with a reason naming the claim: users that differ (one claim, one pipe directory), a user
MPS does not serve here, a pod without `runAsUser` unless root is served.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.dra.devices import COMPUTE, MEMORY, DraDevice
from agent.quantity import MIB, parse_quantity
from agent.shares import mps_pipe_directory, mps_shm_directory
from deviceplugin.dra.claims import ClaimRef
from deviceplugin.errors import ClaimError
from deviceplugin.mps_env import MEMORY_ENV, PIPE_ENV, SHM, THREADS_ENV, effective_uid, mps_uid


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceEdits:
    """Extra CDI edits of one prepared device: `KEY=value` lines and (host, container) mounts."""

    env: tuple[str, ...] = ()
    mounts: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareSize:
    memory_mib: int
    compute_percent: int


def share_size(device: DraDevice, consumed: Mapping[str, str]) -> ShareSize:
    """What the allocation gave a share of `device` (its equal split where it says nothing)."""
    memory = consumed.get(MEMORY)
    compute = consumed.get(COMPUTE)
    return ShareSize(
        memory_mib=(
            max(1, int(parse_quantity(memory)) // MIB)
            if memory is not None
            else device.share_memory_mib
        ),
        compute_percent=(
            max(1, int(parse_quantity(compute)))
            if compute is not None
            else device.share_compute_percent
        ),
    )


class MpsEdits:
    """The CDI edits of shares under MPS; `users` gives the uids MPS serves now."""

    def __init__(self, root: str, users: Callable[[], frozenset[int]]) -> None:
        self._root = root.rstrip("/")
        self._users = users

    def __call__(
        self,
        ref: ClaimRef,
        device: DraDevice,
        consumed: Mapping[str, str],
        pods: Sequence[Mapping[str, Any]],
    ) -> DeviceEdits:
        try:
            size = share_size(device, consumed)
        except ValueError as exc:
            raise ClaimError(f"{ref}: consumedCapacity of {device.name}: {exc}") from None
        uid = self._uid(ref, pods)
        pipe = mps_pipe_directory(self._root, uid)
        return DeviceEdits(
            env=(
                f"{PIPE_ENV}={pipe}",
                f"{MEMORY_ENV}=0={size.memory_mib}M",
                f"{THREADS_ENV}={size.compute_percent}",
            ),
            mounts=((pipe, pipe), (mps_shm_directory(self._root, uid), SHM)),
        )

    def _uid(self, ref: ClaimRef, pods: Sequence[Mapping[str, Any]]) -> int:
        uids = {uid for pod in pods for uid in _claim_users(pod, ref.name)}
        if len(uids) > 1:
            listed = ", ".join("unset" if u is None else str(u) for u in sorted(uids, key=str))
            raise ClaimError(
                f"{ref}: its containers run as different users ({listed}); an MPS share serves "
                "one user: give them one runAsUser"
            )
        return mps_uid(next(iter(uids), None), self._users(), f"{ref}: its pod", ClaimError)


def _claim_users(pod: Mapping[str, Any], claim: str) -> Iterable[int | None]:
    """The effective users of the pod's containers that use `claim` (all of them when the pod
    does not say which of its claims is `claim`)."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    entries = {
        e.get("name")
        for e in spec.get("resourceClaims") or ()
        if e.get("resourceClaimName") == claim
    }
    entries |= {
        s.get("name")
        for s in status.get("resourceClaimStatuses") or ()
        if s.get("resourceClaimName") == claim
    }
    for field in ("initContainers", "containers"):
        for container in spec.get(field) or ():
            used = {c.get("name") for c in (container.get("resources") or {}).get("claims") or ()}
            if entries and not used & entries:
                continue
            yield effective_uid(pod, str(container.get("name")))
