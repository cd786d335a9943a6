"""`Usage.release`: exclusive devices given back, their pools' tokens renewed, nothing else."""

from __future__ import annotations

from scheduler.claims.model import AllocatedDevice, DeviceId
from scheduler.claims.usage import Usage

A0, A1, B0 = (DeviceId("d", "a", "gpu-0"), DeviceId("d", "a", "gpu-1"), DeviceId("d", "b", "gpu-0"))


def test_a_released_device_is_free_and_only_its_pool_changes() -> None:
    usage = Usage()
    usage.add([AllocatedDevice(request="r", id=d) for d in (A0, A1, B0)])
    tokens, epoch, logged = dict(usage.versions), usage.epoch, len(usage.changes)
    usage.release([A1])
    assert usage.exclusive == {A0, B0}
    assert usage.versions[("d", "a")] is not tokens[("d", "a")]
    assert usage.versions[("d", "b")] is tokens[("d", "b")]
    assert usage.epoch is not epoch
    assert usage.changes[logged:] == [("d", "a")]


def test_releasing_a_device_not_held_changes_nothing() -> None:
    usage = Usage()
    usage.add([AllocatedDevice(request="r", id=A0)])
    tokens, epoch = dict(usage.versions), usage.epoch
    usage.release([A1, B0])
    assert usage.exclusive == {A0}
    assert usage.versions == tokens
    assert usage.epoch is epoch
