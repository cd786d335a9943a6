"""What allocated claims charge a pod's queue (DESIGN §14, §12): whole GPUs by device; a share of
a shared GPU as a device-plugin share of the same memory and compute is charged."""

from __future__ import annotations

import math
from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from agent.shares import share_milli
from scheduler.claims.charge import claim_charge, share_charge
from scheduler.claims.model import (
    AllocatedDevice,
    Allocation,
    Capacity,
    Device,
    DeviceId,
)
from scheduler.placement import GpuShare, PodRequest
from scheduler.quota import request_amounts
from tests.builders.claims import DRIVER, GIB
from tests.builders.placement import share, share_pod

MEMORY, COMPUTE = f"{DRIVER}/memory", f"{DRIVER}/compute"


def _gpu(name: str, *, memory: int = 80 * GIB, compute: int | None = None, **attrs: str) -> Device:
    capacity = {MEMORY: Capacity(value=Fraction(memory))}
    if compute is not None:
        capacity[COMPUTE] = Capacity(value=Fraction(compute))
    attributes: dict[str, str | int | bool] = {f"{DRIVER}/type": "gpu", **attrs}
    return Device(
        id=DeviceId(DRIVER, "n1", name),
        attributes=attributes,
        capacity=capacity,
        allow_multiple_allocations=compute is not None,
    )


def _share(device: Device, memory: int, compute: int | None = None) -> AllocatedDevice:
    consumed = {MEMORY: Fraction(memory)}
    if compute is not None:
        consumed[COMPUTE] = Fraction(compute)
    return AllocatedDevice(request="r", id=device.id, share_id="s", consumed=consumed)


def _whole(device: Device, **kw: bool) -> AllocatedDevice:
    return AllocatedDevice(request="r", id=device.id, **kw)


def test_whole_gpus_are_charged_once_per_device_and_admin_access_or_mig_not_at_all():
    a, b, c = _gpu("gpu-0"), _gpu("gpu-1"), _gpu("gpu-2")
    mig = Device(id=DeviceId(DRIVER, "n1", "gpu-3-mig"), attributes={f"{DRIVER}/type": "mig"})
    gone = DeviceId(DRIVER, "n1", "gpu-9")  # its slice is gone
    devices = {d.id: d for d in (a, b, c, mig)}
    first = Allocation(devices=(_whole(a), _whole(b), _whole(c, admin_access=True)))
    second = Allocation(
        devices=(_whole(a), _whole(mig), AllocatedDevice(request="r", id=gone)),
    )
    charged = claim_charge([first, second], devices)
    assert charged.gpus == frozenset({a.id, b.id})
    assert charged.shares == ()


def test_a_share_is_charged_the_larger_of_its_memory_and_compute_fractions():
    gpu = _gpu("gpu-0", compute=100)
    by_memory = share_charge(_share(gpu, 40 * GIB, 30), gpu)
    by_compute = share_charge(_share(gpu, 8 * GIB, 50), gpu)
    assert by_memory is not None
    assert by_compute is not None
    assert (by_memory.milli, by_memory.memory, by_memory.compute) == (500, 40 * GIB, 30)
    assert (by_compute.milli, by_compute.memory, by_compute.compute) == (500, 8 * GIB, 50)
    held = claim_charge([Allocation(devices=(_share(gpu, 40 * GIB, 30),))], {gpu.id: gpu})
    assert held.gpus == frozenset()
    assert held.shares == (by_memory,)


def test_a_share_is_charged_as_a_device_plugin_share_of_the_same_memory_and_compute():
    gpu = _gpu("gpu-0", compute=100)
    claimed = share_charge(_share(gpu, 20 * GIB, 30), gpu)
    assert claimed is not None
    plain = share_pod("default/p", share(memory=20 * GIB, compute=30))
    placed = GpuShare(
        gpu=0,
        milli=share_milli(memory_bytes=20 * GIB, compute_percent=30, gpu_memory_bytes=80 * GIB),
        memory=20 * GIB,
        compute=30,
        slots=1,
    )
    from_plugin = request_amounts(plain, (placed,))
    from_claims = request_amounts(PodRequest(key="default/q"), claimed=(claimed,))
    assert from_claims == {
        "nvidia.com/gpu": from_plugin["nvidia.com/gpu"],
        "gputopo.io/gpu-memory": from_plugin["gputopo.io/gpu-memory"],
    }
    assert from_claims["nvidia.com/gpu"] == 300


def test_claimed_shares_are_charged_beside_whole_gpus_the_pod_asks():
    gpu = _gpu("gpu-0", compute=100)
    claimed = share_charge(_share(gpu, 40 * GIB, 10), gpu)
    assert claimed is not None
    amounts = request_amounts(PodRequest(key="default/q", gpus=2), claimed=(claimed, claimed))
    assert amounts["nvidia.com/gpu"] == 3000
    assert amounts["gputopo.io/gpu-memory"] == 80 * GIB


def test_compute_may_be_counted_in_multiprocessors():
    gpu = Device(
        id=DeviceId(DRIVER, "n1", "gpu-0"),
        attributes={f"{DRIVER}/type": "gpu"},
        capacity={
            MEMORY: Capacity(value=Fraction(80 * GIB)),
            f"{DRIVER}/multiprocessors": Capacity(value=Fraction(132)),
        },
        allow_multiple_allocations=True,
    )
    result = AllocatedDevice(
        request="r",
        id=gpu.id,
        share_id="s",
        consumed={MEMORY: Fraction(8 * GIB), f"{DRIVER}/multiprocessors": Fraction(66)},
    )
    charged = share_charge(result, gpu)
    assert charged is not None
    assert (charged.milli, charged.compute) == (500, 50)


_CAPACITY = st.integers(min_value=1 << 20, max_value=1 << 40)


@st.composite
def _device_and_shares(draw: st.DrawFn) -> tuple[Device, list[tuple[int, int]]]:
    """A shared GPU and shares that fit it together (memory and compute within capacity)."""
    memory = draw(_CAPACITY)
    compute = draw(st.sampled_from([100, 132, 7]))
    count = draw(st.integers(min_value=1, max_value=8))
    cuts = sorted(draw(st.lists(st.integers(0, memory), min_size=count, max_size=count)))
    parts = [b - a for a, b in zip([0, *cuts], cuts, strict=False)]
    used = sorted(draw(st.lists(st.integers(0, compute), min_size=count, max_size=count)))
    computes = [b - a for a, b in zip([0, *used], used, strict=False)]
    return _gpu("gpu-0", memory=memory, compute=compute), list(zip(parts, computes, strict=True))


@given(_device_and_shares())
def test_charged_milli_is_the_larger_fraction_and_at_most_one_gpu_per_share(case):
    device, shares = case
    size = device.capacity[MEMORY].value
    total = device.capacity[COMPUTE].value
    for memory, compute in shares:
        charged = share_charge(_share(device, memory, compute), device)
        assert charged is not None
        by_memory = math.ceil(Fraction(memory * 1000) / size)
        by_compute = math.floor(Fraction(compute * 100) / total) * 10
        assert charged.milli == min(1000, max(1, by_memory, by_compute))
        assert charged.memory == memory


@given(_device_and_shares())
def test_shares_led_by_memory_charge_a_gpu_at_most_once_over(case):
    """Shares whose compute fraction is at most their memory fraction (the agent's default
    split takes both alike) charge one GPU at most 1000 milli, plus at most one milli per
    share where memory rounds up (three equal thirds: 334 each)."""
    device, shares = case
    size = device.capacity[MEMORY].value
    total = device.capacity[COMPUTE].value
    led = [(m, min(c, math.floor(Fraction(m) * total / size))) for m, c in shares]
    charged = [share_charge(_share(device, m, c), device) for m, c in led]
    assert all(c is not None for c in charged)
    assert sum(c.milli for c in charged if c is not None) <= 1000 + len(led)


def test_shares_led_by_different_dimensions_may_charge_more_than_a_gpu_together():
    """As device-plugin shares are (DESIGN §12 charges each share on its own)."""
    gpu = _gpu("gpu-0", compute=100)
    one = share_charge(_share(gpu, 72 * GIB, 10), gpu)
    two = share_charge(_share(gpu, 8 * GIB, 90), gpu)
    assert one is not None
    assert two is not None
    assert (one.milli, two.milli) == (900, 900)
