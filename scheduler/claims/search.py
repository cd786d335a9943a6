"""The backtracking search that fills every request of a pod's claims on one node.

Requests are filled in order (claims in the pod's order, requests in the claim's order); for each,
its alternatives in order (`firstAvailable`), and the devices as combinations in candidate order:
the first complete answer is the one the candidate order prefers most, so whoever orders the
candidates (first-fit, or `order` by topology) decides among the answers. Constraints
(`matchAttribute`, `distinctAttribute`) are checked as each device is taken; a shared device
(`allowMultipleAllocations`) may serve several requests while its capacity lasts; any other
device serves one; partitionable devices together take no more of their pool's shared counters
than are left (a shared one takes its counters once). The search gives up after `limit` steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import NamedTuple

from .candidates import Candidate, Candidates
from .errors import SearchLimitError
from .model import Alternative, AttrValue, Constraint, DeviceId
from .slices import CountersLeft, charge, counters_fit
from .usage import Usage

__all__ = ["Option", "Pick", "Slot", "search"]

DEFAULT_LIMIT = 20_000


@dataclass(frozen=True, slots=True)
class Option:
    alternative: Alternative
    candidates: Candidates


@dataclass(frozen=True, slots=True)
class Slot:
    """One request to fill: its claim's position in the pod, its options in order, and the
    claim's constraints."""

    claim: int
    options: tuple[Option, ...]
    constraints: tuple[Constraint, ...]


class Pick(NamedTuple):  # made for every device of every decision: a tuple is made fastest
    claim: int
    alternative: Alternative
    candidate: Candidate


def search(
    slots: Sequence[Slot],
    usage: Usage,
    limit: int = DEFAULT_LIMIT,
    counters: CountersLeft | None = None,
) -> list[Pick] | None:
    """The first answer in candidate order, or None when there is none; SearchLimitError past
    `limit` steps. `counters`: what the candidates' pools' shared counters have left (None
    or empty when no candidate consumes any)."""
    counted = bool(counters) and any(
        c.device.consumes for slot in slots for o in slot.options for c in o.candidates.usable
    )
    if len(slots) == 1 and not slots[0].constraints and not counted:
        return _single(slots[0], limit)
    run = _Run(slots, usage, limit, counters if counted else None)
    return list(run.picks) if run.fill(0) else None


def _single(slot: Slot, limit: int) -> list[Pick] | None:
    """One request under no constraint: the first option's first `need` candidates, as the
    general search finds them (each candidate fits on its own, and a device serves a request
    once, so any of them go together), after as many steps."""
    for option in slot.options:
        need = option.candidates.need
        if need > limit:
            raise SearchLimitError(f"no answer within {limit} steps")
        usable = option.candidates.usable
        if len(usable) >= need:
            return [Pick(slot.claim, option.alternative, cand) for cand in usable[:need]]
    return None


def applies(constraint: Constraint, request: str) -> bool:
    """A constraint naming `req` covers its subrequests `req/sub` too; none named: every one."""
    names = constraint.requests
    return not names or request in names or request.split("/", 1)[0] in names


class _Run:
    def __init__(
        self, slots: Sequence[Slot], usage: Usage, limit: int, counters: CountersLeft | None
    ) -> None:
        self.slots, self.usage, self.limit = slots, usage, limit
        self.steps = 0
        self.picks: list[Pick] = []
        self.taken: set[DeviceId] = set()
        self.extra: dict[DeviceId, dict[str, Fraction]] = {}
        self.values: dict[tuple[int, int], list[tuple[str, AttrValue]]] = {}
        self.counters: CountersLeft | None = None
        if counters is not None:  # a copy: the run takes from it as it picks
            self.counters = {
                pool: {name: dict(c) for name, c in sets.items()} for pool, sets in counters.items()
            }
        self.holds: dict[DeviceId, int] = {}
        """How many picks of this run hold each partitionable device (its counters are taken
        by the first)."""

    def fill(self, index: int) -> bool:
        if index == len(self.slots):
            return True
        for option in self.slots[index].options:
            if self._pick(index, option, 0, option.candidates.need):
                return True
        return False

    def _pick(self, index: int, option: Option, start: int, left: int) -> bool:
        if left == 0:
            return self.fill(index + 1)
        self.steps += 1
        if self.steps > self.limit:
            raise SearchLimitError(f"no answer within {self.limit} steps")
        usable = option.candidates.usable
        for pos in range(start, len(usable) - left + 1):
            cand = usable[pos]
            if not self._can_take(index, option.alternative, cand):
                continue
            self._take(index, option.alternative, cand)
            if self._pick(index, option, pos + 1, left - 1):
                return True
            self._untake(index, cand)
        return False

    def _can_take(self, index: int, alt: Alternative, cand: Candidate) -> bool:
        dev = cand.device.id
        if dev in self.taken:
            return False
        counters = self.counters
        if counters is not None and self._counts(cand) and not counters_fit(counters, cand.device):
            return False
        if cand.consumed is not None:
            extra = self.extra.get(dev, {})
            for name, amount in cand.consumed.items():
                if amount + extra.get(name, Fraction(0)) > self.usage.left(cand.device, name):
                    return False
        slot = self.slots[index]
        for pos, con in enumerate(slot.constraints):
            if not applies(con, alt.name):
                continue
            attr = con.match_attribute or con.distinct_attribute or ""
            if attr not in cand.device.attributes:
                return False
            value = _typed(cand.device.attributes[attr])
            seen = self.values.get((slot.claim, pos), [])
            if con.match_attribute is not None and seen and seen[0] != value:
                return False
            if con.distinct_attribute is not None and value in seen:
                return False
        return True

    def _take(self, index: int, alt: Alternative, cand: Candidate) -> None:
        self.picks.append(Pick(self.slots[index].claim, alt, cand))
        self._account(index, alt, cand, 1)

    def _untake(self, index: int, cand: Candidate) -> None:
        pick = self.picks.pop()
        self._account(index, pick.alternative, cand, -1)

    def _counts(self, cand: Candidate) -> bool:
        """Whether taking `cand` now takes its shared counters: a partitionable device not
        held by this run yet (nor, when shared, by an allocation already)."""
        dev = cand.device
        if not dev.consumes or self.holds.get(dev.id):
            return False
        return not (dev.allow_multiple_allocations and dev.id in self.usage.consumed)

    def _account(self, index: int, alt: Alternative, cand: Candidate, sign: int) -> None:
        dev = cand.device.id
        counters = self.counters
        if counters is not None and cand.device.consumes:
            if sign > 0:
                if self._counts(cand):
                    charge(counters, cand.device, -1)
                self.holds[dev] = self.holds.get(dev, 0) + 1
            else:
                self.holds[dev] -= 1
                if self._counts(cand):
                    charge(counters, cand.device, 1)
        if cand.consumed is None:
            if sign > 0:
                self.taken.add(dev)
            else:
                self.taken.discard(dev)
        else:
            extra = self.extra.setdefault(dev, {})
            for name, amount in cand.consumed.items():
                extra[name] = extra.get(name, Fraction(0)) + sign * amount
        slot = self.slots[index]
        for pos, con in enumerate(slot.constraints):
            if applies(con, alt.name):
                attr = con.match_attribute or con.distinct_attribute or ""
                seen = self.values.setdefault((slot.claim, pos), [])
                if sign > 0:
                    seen.append(_typed(cand.device.attributes[attr]))
                else:
                    seen.pop()


def _typed(value: AttrValue) -> tuple[str, AttrValue]:
    """A value with its type, so that true and 1 differ as they do in Kubernetes."""
    return type(value).__name__, value
