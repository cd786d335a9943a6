"""When the scheduler reads the agents' measured use (issue 47), and when a reading goes stale.

`LoadClock` is the runtime's side of `scheduler.placement.load`: it owns the wall clock (the
agents stamp readings in wall time), hands placement `now` with the `loadAware` settings, and
remembers per node when its oldest used reading turns stale, so the cache rebuilds exactly those
nodes then (a heap: O(log n) per node and reading, nothing per cycle while none expires).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass

from agent.nrt import DecodedTopology
from scheduler.placement.load import LoadAware, MeasuredUse, measured_use


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadView:
    """The settings and the time a node's measured use is judged by."""

    settings: LoadAware
    now: float

    def uses(self, nrt: DecodedTopology) -> list[MeasuredUse | None]:
        """Per GPU of `nrt`, its fresh reading (None: none, or stale)."""
        age = self.settings.max_age_s
        return [measured_use(g.load, now=self.now, max_age_s=age) for g in nrt.availability.gpus]


class LoadClock:
    def __init__(self, settings: LoadAware, wall: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self._wall = wall
        self._expiry: list[tuple[float, str]] = []
        self._due: dict[str, float] = {}

    def view(self) -> LoadView | None:
        return LoadView(settings=self.settings, now=self._wall()) if self.settings.shares else None

    def note(self, name: str, nrt: DecodedTopology | None, view: LoadView | None) -> None:
        """Remember when the first fresh reading of node `name` turns stale (a rebuild with the
        same readings pushes nothing new: the heap grows with readings, not with rebuilds)."""
        before = self._due.pop(name, None)
        if view is None or nrt is None:
            return
        age = view.settings.max_age_s
        stamps = [g.load.measured_at + age for g in nrt.availability.gpus if g.load is not None]
        fresh = [t for t in stamps if t >= view.now]
        if fresh:
            self._due[name] = min(fresh)
            if min(fresh) != before:
                heapq.heappush(self._expiry, (min(fresh), name))

    def stale(self) -> list[str]:
        """The nodes with a reading that went stale since they were built (each once)."""
        now, out = self._wall(), []
        while self._expiry and self._expiry[0][0] < now:
            when, name = heapq.heappop(self._expiry)
            if self._due.get(name) == when:
                del self._due[name]
                out.append(name)
        return out
