"""The scheduling queue: units (one pod, or one gang) in priority-then-age order.

A unit is in exactly one of these places:

    active         ready to be tried; popped highest priority first, then oldest
    backoff        failed with an error (bind conflict, API error); active again after a delay
                   that doubles per failure from `initial_backoff` up to `max_backoff`
    unschedulable  did not fit; active again on a cluster event that may free room
                   (`move_all_to_active`) or after `unschedulable_flush` seconds
    in flight      popped and being tried; an `add` meanwhile makes it active again when the
                   attempt ends, so news that arrived during the attempt is never lost

Active units wait in their leaf queue (DESIGN §10), each a heap by priority then age. With one
leaf holding work, `pop` takes its head; with several, `chooser` (the loop's: the order across
queues) picks the leaf from each leaf's head unit, called outside this queue's lock.

The queue knows units only by key, leaf and sort order; pods, gangs, gates and quotas are the
loop's business. Time comes from `clock`; `pop` blocks on a condition variable, never a sleep loop.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from agent.objkey import ObjectKey
from scheduler.quota import DEFAULT_QUEUE

Chooser = Callable[[Mapping[str, "tuple[UnitKey, int]"]], str]
"""Given each leaf's head unit (its key, and a version that changes whenever it is re-added),
the leaf to pop from."""


class UnitKind(StrEnum):
    POD = "pod"
    GANG = "gang"


class UnitKey(NamedTuple):
    """A pod, or the PodGroup of a gang, by its object key (a pod and a group may share one)."""

    kind: UnitKind
    key: ObjectKey

    def __str__(self) -> str:
        return self.kind + "/" + self.key  # str's own `+` (a StrEnum's format costs twice as much)


@dataclass(slots=True)
class _Unit:
    key: UnitKey
    priority: int
    created: float
    leaf: str = DEFAULT_QUEUE
    attempts: int = 0
    ready_at: float = 0.0
    where: str = "active"
    dirty: bool = False
    version: int = 0


@dataclass(order=True, slots=True)
class _Entry:
    sort: tuple[float, ...]
    seq: int
    key: UnitKey = field(compare=False)
    version: int = field(compare=False)


class SchedulingQueue:
    def __init__(
        self,
        clock: Callable[[], float],
        *,
        initial_backoff: float = 1.0,
        max_backoff: float = 10.0,
        unschedulable_flush: float = 60.0,
    ) -> None:
        self._clock = clock
        self._initial = initial_backoff
        self._max = max_backoff
        self._flush = unschedulable_flush
        self._units: dict[UnitKey, _Unit] = {}
        self._active: dict[str, list[_Entry]] = {}  # leaf queue -> its active units
        self.chooser: Chooser | None = None
        self._waiting: list[_Entry] = []  # backoff and unschedulable, by ready time
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._closed = False

    # -- producers -----------------------------------------------------------------------
    def add(self, key: UnitKey, priority: int, created: float, leaf: str = DEFAULT_QUEUE) -> None:
        """Add a unit or refresh it (new member, update): it becomes active unless backing off."""
        with self._cond:
            unit = self._units.get(key)
            if unit is None:
                unit = _Unit(key=key, priority=priority, created=created, leaf=leaf)
                self._units[key] = unit
                self._push_active(unit)
                return
            unit.priority, unit.created, unit.leaf = priority, created, leaf
            if unit.where == "in flight":
                unit.dirty = True
            elif unit.where == "unschedulable" or unit.where == "active":
                self._push_active(unit)

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Hold the queue while several units are added or moved, so that no `pop` takes one of
        them before the rest are in (a low-priority unit added first would otherwise jump the
        line). Callers may hold `cache.lock` around it; `pop` never takes that lock while
        holding this one."""
        with self._cond:
            yield

    def remove(self, key: UnitKey) -> None:
        with self._cond:
            unit = self._units.pop(key, None)
            if unit is not None:
                unit.version += 1

    def move_all_to_active(self) -> int:
        """A cluster event may have freed room: every unschedulable unit becomes active."""
        with self._cond:
            moved = [u for u in self._units.values() if u.where == "unschedulable"]
            for unit in moved:
                self._push_active(unit)
            for unit in self._units.values():
                if unit.where == "in flight":
                    unit.dirty = True
            return len(moved)

    def activate(self, keys: Iterable[UnitKey]) -> int:
        """These units' wait is over (a share lock they waited for was released): those backing
        off or parked become active now."""
        with self._cond:
            moved = [
                unit
                for key in keys
                if (unit := self._units.get(key)) is not None
                and unit.where in ("backoff", "unschedulable")
            ]
            for unit in moved:
                self._push_active(unit)
            return len(moved)

    # -- the consumer --------------------------------------------------------------------
    def pop(self, timeout: float) -> UnitKey | None:
        """The next unit to try, or None after `timeout` seconds (or when closed)."""
        deadline = self._clock() + timeout
        choice: tuple[str, UnitKey] | None = None
        while True:
            with self._cond:
                if self._closed:
                    return None
                self._promote_ready()
                if choice is not None and self._head(choice[0]) == choice[1]:
                    return self._take(choice[0])
                heads = self._heads()
                if len(heads) == 1 or (heads and self.chooser is None):
                    return self._take(next(iter(heads)))
                if not heads:
                    if not self._wait_until(deadline):
                        return None
                    continue
                tokens = {leaf: (key, self._units[key].version) for leaf, key in heads.items()}
            leaf = self.chooser(tokens) if self.chooser is not None else next(iter(heads))
            choice = (leaf, heads[leaf]) if leaf in heads else None

    def _wait_until(self, deadline: float) -> bool:
        """Wait for news (a unit, a timer); False when `deadline` passed."""
        wait = deadline - self._clock()
        if wait <= 0:
            return False
        if self._waiting:
            wait = min(wait, max(self._waiting[0].sort[0] - self._clock(), 0.0))
        self._cond.wait(wait if wait > 0 else 0.001)
        return True

    def done(self, key: UnitKey) -> None:
        """The attempt succeeded: forget the unit, unless news arrived while it was in flight."""
        with self._cond:
            unit = self._units.get(key)
            if unit is None:
                return
            if unit.dirty:
                unit.attempts = 0
                self._push_active(unit)
                return
            del self._units[key]
            unit.version += 1

    def unschedulable(self, key: UnitKey) -> None:
        """The unit did not fit; park it until a cluster event or the periodic flush."""
        self._park(key, "unschedulable", self._flush)

    def backoff(self, key: UnitKey) -> float:
        """The attempt failed with an error; retry after the unit's backoff. Returns the delay."""
        with self._cond:
            unit = self._units.get(key)
            if unit is None:
                return 0.0
            delay = min(self._initial * 2.0**unit.attempts, self._max)
        self._park(key, "backoff", delay)
        return delay

    def retry(self, key: UnitKey, priority: int, created: float) -> float:
        """An attempt that already ended (`done`) failed later (a bind): back the unit off."""
        with self._cond:
            if key not in self._units:
                self._units[key] = _Unit(
                    key=key, priority=priority, created=created, where="backoff"
                )
        return self.backoff(key)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # -- views for metrics and tests -----------------------------------------------------
    def counts(self) -> dict[str, int]:
        with self._cond:
            out = {"active": 0, "backoff": 0, "unschedulable": 0, "in flight": 0}
            for unit in self._units.values():
                out[unit.where] += 1
            return out

    def where(self, key: UnitKey) -> str | None:
        with self._cond:
            unit = self._units.get(key)
            return None if unit is None else unit.where

    # -- internals (callers hold the lock) -----------------------------------------------
    def _park(self, key: UnitKey, where: str, delay: float) -> None:
        with self._cond:
            unit = self._units.get(key)
            if unit is None:
                return
            unit.attempts += 1
            if unit.dirty and where == "unschedulable":
                self._push_active(unit)
                return
            unit.where, unit.dirty = where, False
            unit.version += 1
            unit.ready_at = self._clock() + delay
            heapq.heappush(
                self._waiting, _Entry((unit.ready_at,), next(self._seq), key, unit.version)
            )
            self._cond.notify_all()

    def _push_active(self, unit: _Unit) -> None:
        unit.where, unit.dirty = "active", False
        unit.version += 1
        sort = (-float(unit.priority), unit.created)
        heap = self._active.setdefault(unit.leaf, [])
        heapq.heappush(heap, _Entry(sort, next(self._seq), unit.key, unit.version))
        self._cond.notify_all()

    def _current(self, entry: _Entry) -> _Unit | None:
        unit = self._units.get(entry.key)
        return unit if unit is not None and unit.version == entry.version else None

    def _head(self, leaf: str) -> UnitKey | None:
        """The leaf's next active unit (stale entries dropped); an empty leaf is forgotten."""
        heap = self._active.get(leaf)
        while heap:
            unit = self._current(heap[0])
            if unit is not None and unit.leaf == leaf and unit.where == "active":
                return heap[0].key
            heapq.heappop(heap)
        self._active.pop(leaf, None)
        return None

    def _heads(self) -> dict[str, UnitKey]:
        heads = {leaf: self._head(leaf) for leaf in list(self._active)}
        return {leaf: key for leaf, key in heads.items() if key is not None}

    def _take(self, leaf: str) -> UnitKey:
        entry = heapq.heappop(self._active[leaf])
        unit = self._units[entry.key]
        unit.where, unit.dirty = "in flight", False
        return entry.key

    def _promote_ready(self) -> None:
        now = self._clock()
        while self._waiting and self._waiting[0].sort[0] <= now:
            entry = heapq.heappop(self._waiting)
            unit = self._current(entry)
            if unit is not None:
                self._push_active(unit)
