"""What a pod's allocated claims are charged to its queue (DESIGN §14 "Queues"; §12 for shares).

A claim's result on a GPU device (attribute `type` `gpu` in the device's driver domain) held
exclusively is one whole GPU (`ClaimCharge.gpus`, by device, so two claims naming one device count
it once). A result on a shared device (`allowMultipleAllocations`: it has a `shareID` or consumed
capacity) is a share of that GPU, charged as a device-plugin share of the same memory and compute
is (`agent.shares.share_milli`): `nvidia.com/gpu` in milli, the larger of its memory and compute
fractions of the device (memory rounded up, compute down, at least 1, at most 1000), and its
memory in bytes as `gputopo.io/gpu-memory`. Compute is the consumed `compute` (percent of the
device's `compute` capacity) or `multiprocessors` (of the device's), whichever the device has;
a device with neither charges memory alone. Results with `adminAccess` hold nothing (Kubernetes
does not count them); a result whose device no slice lists any more, or that is not a GPU
(MIG devices), is not charged.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from agent.shares import MAX_COMPUTE_PERCENT, share_milli

from .model import AllocatedDevice, Allocation, Device, DeviceId

__all__ = ["ClaimCharge", "ClaimShare", "claim_charge", "share_charge"]

MEMORY, COMPUTE, MULTIPROCESSORS = "memory", "compute", "multiprocessors"


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimShare:
    """One share a claim holds of shared GPU device `device`: what the queue is charged
    (`milli`, `memory` bytes) and the compute percent it was judged by."""

    device: DeviceId
    milli: int
    memory: int
    compute: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimCharge:
    """The whole GPU devices a pod's claims hold exclusively, and their shares."""

    gpus: frozenset[DeviceId] = frozenset()
    shares: tuple[ClaimShare, ...] = ()


NO_CHARGE = ClaimCharge()


def claim_charge(
    allocations: Iterable[Allocation], devices: Mapping[DeviceId, Device]
) -> ClaimCharge:
    """What `allocations` (one pod's claims, each once) hold, judged by `devices` (every
    device of every slice by its ID)."""
    gpus: set[DeviceId] = set()
    shares: list[ClaimShare] = []
    for allocation in allocations:
        for result in allocation.devices:
            device = devices.get(result.id)
            if result.admin_access or device is None or not _is_gpu(device):
                continue
            if result.share_id is None and not result.consumed:
                gpus.add(result.id)
                continue
            share = share_charge(result, device)
            if share is not None:
                shares.append(share)
    if not gpus and not shares:
        return NO_CHARGE
    return ClaimCharge(gpus=frozenset(gpus), shares=tuple(shares))


def share_charge(result: AllocatedDevice, device: Device) -> ClaimShare | None:
    """The charge of one share (None: the device has no `memory` capacity to judge it by)."""
    driver = device.id.driver
    size = device.capacity.get(f"{driver}/{MEMORY}")
    if size is None or size.value <= 0:
        return None
    memory = math.ceil(result.consumed.get(f"{driver}/{MEMORY}", Fraction(0)))
    compute = _compute_percent(result, device)
    milli = share_milli(
        memory_bytes=memory, compute_percent=compute, gpu_memory_bytes=math.ceil(size.value)
    )
    return ClaimShare(device=result.id, milli=milli, memory=memory, compute=compute or 0)


def _compute_percent(result: AllocatedDevice, device: Device) -> int | None:
    """The share's compute as a percent of the device's (rounded down), None when the device
    offers no compute capacity."""
    driver = device.id.driver
    for name in (COMPUTE, MULTIPROCESSORS):
        total = device.capacity.get(f"{driver}/{name}")
        if total is not None and total.value > 0:
            used = result.consumed.get(f"{driver}/{name}", Fraction(0))
            return min(MAX_COMPUTE_PERCENT, math.floor(used * MAX_COMPUTE_PERCENT / total.value))
    return None


def _is_gpu(device: Device) -> bool:
    return device.attributes.get(f"{device.id.driver}/type") == "gpu"
