"""Nominations and starvation holds (DESIGN §11): capacity held for one unit, times passed in.

A *nomination* follows a victim choice: U's nodes are held for U while its victims terminate
(`terminating`: no new search for U meanwhile) and until U binds or is deleted (`release`), or
`nominationTimeoutSeconds` pass after its last victim is gone (`expire`). A *starvation hold*
holds the nodes `starvation_nodes` chose for a unit that waited too long, evicting nobody; at
most `maxStarvationHolds` at once, each for at most `starvationHoldSeconds`; a unit whose hold
ran out gets no new one for as long again (the next starving unit gets its turn), unless it
*renews* it: the same nodes, which drained while it held them (`take_hold` decides), and no
other unit refused a hold since it began. A hold gives way to a nomination of a higher
priority, or of reclaim, on any of its nodes.

`blocked(priority, unit)` is what placement must avoid for a unit of that priority: the nodes
held by *another* unit of at least that priority (an equal priority too: otherwise the units
queued behind a starving one would keep taking what its hold frees). It costs O(what is held)
and is None when nothing applies, so the common path costs nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from .model import PreemptionSettings

__all__ = ["LastHold", "Nominations"]


@dataclass(slots=True, kw_only=True)
class _Claim:
    """What one unit holds: a nomination (`victims` left to go) or a starvation hold."""

    unit: str
    priority: int
    nodes: dict[str, str]
    since: float
    hold: bool = False
    gpus: int = 0
    victims: set[str] = field(default_factory=set)
    last_gone: float | None = None
    used: int = 0  # a hold: milli-GPU in use on its nodes when it began
    mark: int = 0  # a hold: what its nodes must get under to renew it (`LastHold.mark`)


@dataclass(frozen=True, slots=True)
class LastHold:
    """A unit's hold that ran out: its nodes (pod key -> node), the milli-GPU in use on them
    when it began, and when it began; `mark`, the milli-GPU in use its nodes must get under for
    the next hold to renew it: when the hold it renewed began (drained over the last two holds),
    else `used`."""

    nodes: Mapping[str, str]
    used: int
    since: float
    mark: int


class Nominations:
    """Every nomination and starvation hold of one scheduler. Not thread-safe."""

    def __init__(self) -> None:
        self._claims: dict[str, _Claim] = {}
        self._victim_of: dict[str, str] = {}
        self._cooling: dict[str, float] = {}  # unit -> when its hold ran out
        self._last: dict[str, LastHold] = {}  # unit -> its hold that ran out
        self._wanted = -float("inf")  # when a unit was last refused a hold (all taken)
        self._held_seconds = 0.0  # GPU-seconds of holds that ended
        self._seen = 0.0  # the latest time given

    def __len__(self) -> int:
        return len(self._claims)

    def nominate(
        self,
        unit: str,
        priority: int,
        nodes: Mapping[str, str],
        victims: Iterable[str],
        now: float,
        *,
        reclaim: bool = False,
    ) -> list[str]:
        """Hold `nodes` (pod key -> node) for `unit` while `victims` (pod keys) terminate; it
        replaces what `unit` held. Returns the units whose starvation holds gave way."""
        self._saw(now)
        self._end(unit, now)
        claim = _Claim(unit=unit, priority=priority, nodes=dict(nodes), since=now)
        claim.victims.update(victims)
        if not claim.victims:
            claim.last_gone = now
        for pod in claim.victims:
            self._victim_of[pod] = unit
        taken = set(claim.nodes.values())
        ended = [
            c.unit
            for c in self._claims.values()
            if c.hold and (reclaim or c.priority < priority) and taken & set(c.nodes.values())
        ]
        for other in ended:
            self._end(other, now)
        self._claims[unit] = claim
        return ended

    def victim_gone(self, pod: str, now: float) -> str | None:
        """A victim pod is gone; returns the unit it made room for (None: not a victim)."""
        self._saw(now)
        unit = self._victim_of.pop(pod, None)
        claim = None if unit is None else self._claims.get(unit)
        if claim is None:
            return unit
        claim.victims.discard(pod)
        if not claim.victims:
            claim.last_gone = now
        return unit

    def terminating(self, unit: str) -> bool:
        """True while victims of `unit` are still there: `unit` must not search again."""
        claim = self._claims.get(unit)
        return claim is not None and bool(claim.victims)

    def nodes_of(self, unit: str) -> Mapping[str, str] | None:
        """The nodes held for `unit` (pod key -> node), None when it holds nothing."""
        claim = self._claims.get(unit)
        return None if claim is None else dict(claim.nodes)

    def release(self, unit: str, now: float | None = None, *, waits: bool = False) -> None:
        """`unit` bound or was deleted: what it held is free again. `now` ends a hold's
        GPU-seconds (default: the latest time this book was given). `waits`: it still waits
        (what it held ended, e.g. a hold that ran out): its turn and `previous` are kept."""
        if not waits:
            self._cooling.pop(unit, None)
            self._last.pop(unit, None)
        self._end(unit, self._seen if now is None else now)

    def _end(self, unit: str, now: float) -> None:
        claim = self._claims.pop(unit, None)
        if claim is None:
            return
        for pod in claim.victims:
            if self._victim_of.get(pod) == unit:
                del self._victim_of[pod]
        if claim.hold:
            self._held_seconds += claim.gpus * max(0.0, now - claim.since)

    def expire(self, now: float, settings: PreemptionSettings) -> list[str]:
        """Drop nominations whose last victim left more than `nomination_timeout` ago and holds
        older than `starvation_hold_seconds`; returns their units."""
        self._saw(now)
        out = []
        for claim in list(self._claims.values()):
            if claim.hold:
                if now - claim.since > settings.starvation_hold_seconds:
                    self._cooling[claim.unit] = now
                    self._last[claim.unit] = LastHold(
                        claim.nodes, claim.used, claim.since, claim.mark
                    )
                    out.append(claim.unit)
            elif (
                claim.last_gone is not None and now - claim.last_gone > settings.nomination_timeout
            ):
                out.append(claim.unit)
        for unit in out:
            self._end(unit, now)
        for unit, when in list(self._cooling.items()):
            if now - when > settings.starvation_hold_seconds:
                del self._cooling[unit]
        return out

    # -- starvation holds ------------------------------------------------------------------------
    def previous(self, unit: str) -> LastHold | None:
        """`unit`'s last hold, which ran out while it still waited (None: none)."""
        return self._last.get(unit)

    def hold(
        self,
        unit: str,
        priority: int,
        nodes: Mapping[str, str],
        gpus: int,
        now: float,
        settings: PreemptionSettings,
        *,
        used: int = 0,
        renew: bool = False,
        mark: int | None = None,
    ) -> bool:
        """Hold `nodes` for a starving `unit` (`gpus`: what the hold keeps idle, for the
        metric; `used`: milli-GPU in use on them now; `mark`: `LastHold.mark`, `used` when
        None). False when refused: `unit` already
        holds something, `max_starvation_holds` are taken (then no hold running now may be
        renewed), or its last hold ran out less than `starvation_hold_seconds` ago, unless
        this one `renew`s it (its nodes, drained meanwhile) and no unit was refused since."""
        self._saw(now)
        holds = sum(c.hold for c in self._claims.values())
        if unit in self._claims or not self._turn(unit, now, settings, renew=renew):
            return False
        if holds >= settings.max_starvation_holds:
            self._wanted = now
            return False
        self._last.pop(unit, None)
        self._claims[unit] = _Claim(
            unit=unit,
            priority=priority,
            nodes=dict(nodes),
            since=now,
            hold=True,
            gpus=gpus,
            used=used,
            mark=used if mark is None else mark,
        )
        return True

    def _turn(self, unit: str, now: float, settings: PreemptionSettings, *, renew: bool) -> bool:
        """May `unit` hold now: cooled down, or renewing a hold nobody else asked for since."""
        if now - self._cooling.get(unit, -float("inf")) > settings.starvation_hold_seconds:
            return True
        last = self._last.get(unit)
        return renew and last is not None and self._wanted < last.since

    def holds(self, unit: str) -> bool:
        """Does `unit` hold nodes against starvation now?"""
        claim = self._claims.get(unit)
        return claim is not None and claim.hold

    def held_gpu_seconds(self, now: float) -> float:
        """GPU-seconds held by starvation holds so far (ended and running), never decreasing."""
        self._saw(now)
        running = sum(c.gpus * max(0.0, now - c.since) for c in self._claims.values() if c.hold)
        return self._held_seconds + running

    def blocked(self, priority: int, unit: str) -> AbstractSet[str] | None:
        """Nodes that `unit` (of `priority`) must not be placed on: those held for another unit
        of at least that priority. None when there are none."""
        out: set[str] = set()
        for claim in self._claims.values():
            if claim.unit != unit and claim.priority >= priority:
                out.update(claim.nodes.values())
        return frozenset(out) if out else None

    def held_from(self, priority: int, unit: str) -> frozenset[str]:
        """The part of `blocked` that starvation holds make: the nodes held against starvation
        for another unit of at least `priority` (a hold gives way to a reclaim on its nodes,
        `nominate`; a nomination gives way to nothing)."""
        out: set[str] = set()
        for claim in self._claims.values():
            if claim.hold and claim.unit != unit and claim.priority >= priority:
                out.update(claim.nodes.values())
        return frozenset(out)

    def _saw(self, now: float) -> None:
        self._seen = max(self._seen, now)
