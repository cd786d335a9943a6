"""The devices of one node that could serve one request alternative, and why others cannot.

The stages, in order: the DeviceClass's selectors, the request's selectors (each in turn), the
device's taints against the request's tolerations, then availability (not held by another claim,
or for a shared device enough capacity left; for a partitionable device, enough of its pool's
shared counters left) and the capacity the request asks for. When fewer
devices than needed survive, the stage where the count fell short is the *miss*; `Miss.rank`
orders misses so the nearest one (furthest stage, most devices) is reported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import NamedTuple

from .errors import SelectorError
from .model import AllocationMode, Alternative, ClaimKey, Device, DeviceClass
from .selectors import Selectors
from .slices import CountersLeft, counters_fit
from .usage import Usage, consumption

__all__ = ["Candidate", "Candidates", "Miss", "StaticMemo", "candidates"]

_MEMO_LIMIT = 100_000
_SUPPORTED = "are in a valid pool"
_AVAILABILITY = 50
"""The rank of a miss for devices in use: past every static stage (there are fewer than 50)."""


@dataclass(frozen=True, slots=True)
class Miss:
    """Why a request cannot be served on a node; `rank` = (stage, devices that got that far)."""

    text: str
    rank: tuple[int, int]


class Candidate(NamedTuple):  # made for every device a decision takes: a tuple is made fastest
    device: Device
    consumed: Mapping[str, Fraction] | None  # what a share takes (None: the device is exclusive)


@dataclass(frozen=True, slots=True)
class Candidates:
    """The usable devices (in node order) and how many are needed (All: every one of them)."""

    usable: tuple[Candidate, ...]
    need: int
    miss: Miss | None


@dataclass(frozen=True, slots=True)
class _Stage:
    """One static stage run over every device the earlier stages kept: how many it kept, or the
    selector error it met (`error`, then `kept` is how many it was given)."""

    words: str
    kept: int
    error: str | None = None


@dataclass(frozen=True, slots=True)
class _Static:
    """The static stages' outcome for one node's devices and one request's class, selectors and
    tolerations (whatever its count): each stage, and the devices that pass them all (each as
    an exclusive candidate), or the miss no count avoids."""

    stages: tuple[_Stage, ...]
    passed: tuple[Candidate, ...]
    miss: Miss | None = None
    shared: bool = False  # some of `passed` allow several allocations

    def miss_for(self, need: int, where: str) -> Miss | None:
        """The first stage that keeps fewer than `need` devices (or none), or its error."""
        if self.miss is not None:
            return self.miss
        if 0 < need <= len(self.passed):
            return None  # every stage kept at least the devices that passed them all
        for stage, found in enumerate(self.stages):
            if found.error is not None:
                return Miss(f"{found.error} {where}", (stage + 1, found.kept))
            if found.kept < need or not found.kept:
                text = f"{found.kept} of {max(need, 1)} devices {found.words} {where}"
                return Miss(text, (stage + 1, found.kept))
        return None


StaticMemo = dict[tuple[object, ...], tuple[object, _Static]]
"""What `candidates` keeps per node and request shape: the devices that pass the static stages
(selectors and taints), which depend on neither the claim, the count nor what is in use."""


def candidates(
    claim: ClaimKey,
    alt: Alternative,
    classes: Mapping[str, DeviceClass],
    devices: Sequence[Device],
    usage: Usage,
    selectors: Selectors,
    where: str,
    memo: StaticMemo | None = None,
    counters: CountersLeft | None = None,
) -> Candidates:
    """Filter `devices` for `alt` of `claim`; `where` ends every reason ("on node n1").
    `memo` keeps the static stages' outcome per `devices` object and request shape; `counters`:
    what the shared counters of the devices' pools have left (None when no device consumes
    any)."""
    key = (id(devices), alt.device_class, alt.selectors, alt.tolerations)
    hit = None if memo is None else memo.get(key)
    if hit is not None and hit[0] is devices:
        passed = hit[1]
    else:
        passed = _static(alt, classes, devices, selectors)
        if memo is not None:
            if len(memo) >= _MEMO_LIMIT:
                memo.clear()
            memo[key] = (devices, passed)
    miss = passed.miss_for(_need(alt), where)
    if miss is not None:
        return _missed(Miss(f"claim {claim} request {alt.name}: {miss.text}", miss.rank))
    return _usable(claim, alt, passed.passed, passed.shared, usage, where, counters)


def _static(
    alt: Alternative,
    classes: Mapping[str, DeviceClass],
    devices: Sequence[Device],
    selectors: Selectors,
) -> _Static:
    """The class's and the request's selectors, then the taints, each over what the earlier
    stages kept (stopping at an error, or when none are left)."""
    cls = classes.get(alt.device_class)
    if cls is None:
        return _Static((), (), Miss(f"device class {alt.device_class} not found", (0, 0)))
    pool = tuple(devices)
    stages: list[tuple[str, Callable[[Device], bool]]] = [
        (f"match class {cls.name}'s selector `{e}`", _selector(selectors, e)) for e in cls.selectors
    ] + [(f"match selector `{e}`", _selector(selectors, e)) for e in alt.selectors]
    stages.append(("tolerate their taints", lambda d: _tolerated(alt, d)))
    stages.append((_SUPPORTED, lambda d: d.unsupported is None))
    done = []
    for words, keep in stages:
        try:
            kept = tuple(d for d in pool if keep(d))
        except SelectorError as exc:
            done.append(_Stage(words, len(pool), str(exc)))
            return _Static(tuple(done), ())
        done.append(_Stage(words, len(kept)))
        pool = kept
    shared = any(d.allow_multiple_allocations for d in pool)
    return _Static(tuple(done), tuple(Candidate(d, None) for d in pool), shared=shared)


def _usable(
    claim: ClaimKey,
    alt: Alternative,
    pool: Sequence[Candidate],
    shared: bool,
    usage: Usage,
    where: str,
    counters: CountersLeft | None = None,
) -> Candidates:
    """The candidates free for `alt` (`shared`: some of `pool` allow several allocations)."""
    if alt.capacity or alt.admin_access or shared:
        found = (_fits(alt, c.device, usage) for c in pool)
        usable = tuple(c for c in found if c is not None)
    else:  # the common case: whole devices, no capacity asked; free when nobody holds them
        exclusive, consumed = usage.exclusive, usage.consumed
        usable = tuple(
            c for c in pool if c.device.id not in exclusive and c.device.id not in consumed
        )
    need = alt.count if alt.mode is AllocationMode.EXACT_COUNT else len(pool)
    short = False
    if counters:
        free = len(usable)
        usable = tuple(c for c in usable if _counted(c, usage, counters))
        short = len(usable) < free
    if len(usable) >= need:
        return Candidates(usable, need, None)
    words = "free" if not alt.capacity else "free with the capacity asked"
    if short:
        words += " and within their pools' shared counters"
    text = f"claim {claim} request {alt.name}: {len(usable)} of {need} matching devices are"
    return Candidates((), need, Miss(f"{text} {words} {where}", (_AVAILABILITY, len(usable))))


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


def _counted(cand: Candidate, usage: Usage, counters: CountersLeft) -> bool:
    """Whether the shared counters the device consumes are left (a shared device in use has
    its counters taken already: a further share takes none)."""
    dev = cand.device
    if not dev.consumes or (dev.allow_multiple_allocations and dev.id in usage.consumed):
        return True
    return counters_fit(counters, dev)


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
