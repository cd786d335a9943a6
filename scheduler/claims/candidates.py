"""The devices of one node that could serve one request alternative, and why others cannot.

The stages, in order: the DeviceClass's selectors, the request's selectors (each in turn), the
device's taints against the request's tolerations, then availability (not held by another claim,
or for a shared device enough capacity left) and the capacity the request asks for. When fewer
devices than needed survive, the stage where the count fell short is the *miss*; `Miss.rank`
orders misses so the nearest one (furthest stage, most devices) is reported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from .errors import SelectorError
from .model import AllocationMode, Alternative, ClaimKey, Device, DeviceClass
from .selectors import Selectors
from .usage import Usage, consumption

__all__ = ["Candidate", "Candidates", "Miss", "StaticMemo", "candidates"]

_MEMO_LIMIT = 100_000
_AVAILABILITY = 50
"""The rank of a miss for devices in use: past every static stage (there are fewer than 50)."""


@dataclass(frozen=True, slots=True)
class Miss:
    """Why a request cannot be served on a node; `rank` = (stage, devices that got that far)."""

    text: str
    rank: tuple[int, int]


@dataclass(frozen=True, slots=True)
class Candidate:
    device: Device
    consumed: Mapping[str, Fraction] | None  # what a share takes (None: the device is exclusive)


@dataclass(frozen=True, slots=True)
class Candidates:
    """The usable devices (in node order) and how many are needed (All: every one of them)."""

    usable: tuple[Candidate, ...]
    need: int
    miss: Miss | None


StaticMemo = dict[tuple[object, ...], tuple[object, "tuple[Device, ...] | Miss"]]
"""What `candidates` keeps per node and request shape: the devices that pass the static stages
(selectors and taints), which depend on neither the claim nor what is in use."""


def candidates(
    claim: ClaimKey,
    alt: Alternative,
    classes: Mapping[str, DeviceClass],
    devices: Sequence[Device],
    usage: Usage,
    selectors: Selectors,
    where: str,
    memo: StaticMemo | None = None,
) -> Candidates:
    """Filter `devices` for `alt` of `claim`; `where` ends every reason ("on node n1").
    `memo` keeps the static stages' outcome per `devices` object and request shape."""
    head = f"claim {claim} request {alt.name}"
    key = (id(devices), alt.device_class, alt.selectors, alt.tolerations, alt.mode, alt.count)
    hit = None if memo is None else memo.get(key)
    if hit is not None and hit[0] is devices:
        passed = hit[1]
    else:
        passed = _static(alt, classes, devices, selectors, where)
        if memo is not None:
            if len(memo) >= _MEMO_LIMIT:
                memo.clear()
            memo[key] = (devices, passed)
    if isinstance(passed, Miss):
        return _missed(Miss(f"{head}: {passed.text}", passed.rank))
    return _usable(head, alt, passed, usage, where)


def _static(
    alt: Alternative,
    classes: Mapping[str, DeviceClass],
    devices: Sequence[Device],
    selectors: Selectors,
    where: str,
) -> tuple[Device, ...] | Miss:
    """The devices that pass the class's and the request's selectors and tolerate their taints,
    or the miss (its text without the claim and request)."""
    cls = classes.get(alt.device_class)
    if cls is None:
        return Miss(f"device class {alt.device_class} not found", (0, 0))
    pool = tuple(devices)
    stages: list[tuple[str, Callable[[Device], bool]]] = [
        (f"match class {cls.name}'s selector `{e}`", _selector(selectors, e)) for e in cls.selectors
    ] + [(f"match selector `{e}`", _selector(selectors, e)) for e in alt.selectors]
    stages.append(("tolerate their taints", lambda d: _tolerated(alt, d)))
    for stage, (words, keep) in enumerate(stages):
        try:
            kept = tuple(d for d in pool if keep(d))
        except SelectorError as exc:
            return Miss(f"{exc} {where}", (stage + 1, len(pool)))
        need = _need(alt)
        if len(kept) < need or not kept:
            return Miss(
                f"{len(kept)} of {max(need, 1)} devices {words} {where}", (stage + 1, len(kept))
            )
        pool = kept
    return pool


def _usable(
    head: str, alt: Alternative, pool: Sequence[Device], usage: Usage, where: str
) -> Candidates:
    usable = []
    for device in pool:
        found = _fits(alt, device, usage)
        if found is not None:
            usable.append(found)
    need = alt.count if alt.mode is AllocationMode.EXACT_COUNT else len(pool)
    if len(usable) >= need:
        return Candidates(tuple(usable), need, None)
    words = "free" if not alt.capacity else "free with the capacity asked"
    text = f"{head}: {len(usable)} of {need} matching devices are {words} {where}"
    return Candidates((), need, Miss(text, (_AVAILABILITY, len(usable))))


def _fits(alt: Alternative, device: Device, usage: Usage) -> Candidate | None:
    if alt.admin_access:
        return Candidate(device, None)
    if not alt.capacity and not device.allow_multiple_allocations:
        return Candidate(device, None) if usage.is_free(device) else None
    wanted = {_qualify(k, device): v for k, v in alt.capacity.items()}
    if not usage.is_free(device):
        return None
    if not device.allow_multiple_allocations:
        if any(k not in device.capacity or device.capacity[k].value < v for k, v in wanted.items()):
            return None
        return Candidate(device, None)
    taken = consumption(device, wanted)
    if taken is None or any(amount > usage.left(device, k) for k, amount in taken.items()):
        return None
    return Candidate(device, taken)


def _qualify(name: str, device: Device) -> str:
    return name if "/" in name else f"{device.id.driver}/{name}"


def _need(alt: Alternative) -> int:
    return alt.count if alt.mode is AllocationMode.EXACT_COUNT else 1


def _selector(selectors: Selectors, expression: str) -> Callable[[Device], bool]:
    return lambda device: selectors.matches(expression, device)


def _tolerated(alt: Alternative, device: Device) -> bool:
    return all(any(t.tolerates(taint) for t in alt.tolerations) for taint in device.taints)


def _missed(miss: Miss) -> Candidates:
    return Candidates((), 0, miss)
