"""What is already allocated, and what a request would consume of a shared device.

`Usage` holds the devices allocated by any claim (whoever allocated it): exclusive devices by id,
and for devices with `allowMultipleAllocations` the capacity consumed so far. Results with
`adminAccess` take nothing (Kubernetes does not count them). `consumption` is Kubernetes'
consumable-capacity rule: a requested amount is rounded up to the device's request policy (the
smallest valid value at or above it, or the next step of the valid range); an amount not
requested is the policy's default, or the whole capacity when there is none.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from fractions import Fraction

from .model import AllocatedDevice, Allocation, Capacity, Device, DeviceId, RequestPolicy

__all__ = ["Usage", "consumption"]


class Usage:
    """Allocated devices and consumed capacity; `add` and `copy` keep it cheap to thread through
    a gang's pods. When allocations go, build a new one (`of`); a caller that keeps one in step
    with what it models may give exclusive devices back (`release`). Change it only through
    `add` and `release` (the tokens that verdicts key on change there)."""

    __slots__ = ("__weakref__", "changes", "consumed", "epoch", "exclusive", "versions")

    def __init__(self) -> None:
        self.exclusive: set[DeviceId] = set()
        self.consumed: dict[DeviceId, dict[str, Fraction]] = {}
        self.versions: dict[tuple[str, str], object] = {}
        """Per (driver, pool): a fresh token each time `add` changes it (what a memo of verdicts
        keys on; a copy keeps the tokens, and its own changes make new ones)."""
        self.epoch: object = object()
        """A fresh token whenever anything changes (and kept by a copy, as `versions`)."""
        self.changes: list[tuple[str, str]] = []
        """The pools `add` changed, in order, appended to only (a copy starts its own): what
        changed since a reader's last look at this object is `changes[seen:]`."""

    @classmethod
    def of(cls, allocations: Iterable[Allocation]) -> Usage:
        usage = cls()
        for allocation in allocations:
            usage.add(allocation.devices)
        return usage

    def copy(self) -> Usage:
        twin = Usage()
        twin.exclusive = set(self.exclusive)
        twin.consumed = {k: dict(v) for k, v in self.consumed.items()}
        twin.versions = dict(self.versions)
        twin.epoch = self.epoch
        return twin

    def add(self, results: Iterable[AllocatedDevice]) -> None:
        for res in results:
            if res.admin_access:
                continue
            pool = (res.id.driver, res.id.pool)
            self.versions[pool] = self.epoch = object()
            self.changes.append(pool)
            if res.share_id is None and not res.consumed:
                self.exclusive.add(res.id)
                continue
            held = self.consumed.setdefault(res.id, {})
            for name, amount in res.consumed.items():
                held[name] = held.get(name, Fraction(0)) + amount

    def release(self, ids: Iterable[DeviceId]) -> None:
        """The devices `ids` are no longer held exclusively (a share's capacity is never given
        back here)."""
        for dev in ids:
            if dev in self.exclusive:
                self.exclusive.discard(dev)
                pool = (dev.driver, dev.pool)
                self.versions[pool] = self.epoch = object()
                self.changes.append(pool)

    def is_free(self, device: Device) -> bool:
        """Nothing holds the device exclusively (and, unless it is shared, no share either)."""
        if device.id in self.exclusive:
            return False
        return device.allow_multiple_allocations or device.id not in self.consumed

    def left(self, device: Device, name: str) -> Fraction:
        """What shares leave of capacity `name` (the device's qualified capacity name)."""
        held = self.consumed.get(device.id, {}).get(name, Fraction(0))
        return device.capacity[name].value - held


def consumption(device: Device, wanted: Mapping[str, Fraction]) -> dict[str, Fraction] | None:
    """What one allocation of `device` takes of each capacity for a request of `wanted`
    (keys: qualified capacity names), or None when the request breaks a request policy or
    asks for a capacity the device does not have."""
    if any(name not in device.capacity for name in wanted):
        return None
    out: dict[str, Fraction] = {}
    for name, cap in device.capacity.items():
        amount = _consumed(wanted.get(name), cap)
        if amount is None:
            return None
        out[name] = amount
    return out


def _consumed(wanted: Fraction | None, cap: Capacity) -> Fraction | None:
    policy = cap.policy
    if wanted is None:
        if policy is None or policy.default is None:
            return cap.value
        return policy.default
    if policy is None:
        return wanted
    return _round_up(wanted, policy)


def _round_up(wanted: Fraction, policy: RequestPolicy) -> Fraction | None:
    if policy.valid_values:
        return next((v for v in policy.valid_values if v >= wanted), None)
    low = policy.valid_min
    if low is None:
        return wanted
    amount = max(wanted, low)
    if policy.valid_step:
        amount = low + math.ceil((amount - low) / policy.valid_step) * policy.valid_step
    if policy.valid_max is not None and amount > policy.valid_max:
        return None
    return amount
