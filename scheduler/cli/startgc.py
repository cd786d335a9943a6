"""The cyclic garbage collector while the scheduler process starts (`run` asks; tests do not).

A start lists every node and pod at once: millions of small containers (the JSON dicts and the
cache entries built from them), nearly all acyclic and all kept. Meanwhile the cyclic collector
walks the growing heap again and again, each time its oldest generation grows by a quarter
(measured at 5,000 nodes and 10,000 pending pods: 0.5 s of about 2 s of CPU before the first
bind, on a shared 2-core machine).

`StartupGc` switches the collector off from the start until every collection has synced, then
freezes what is alive (`gc.freeze`: the warm cache moves to the permanent generation, which later
collections skip, so the steady state does not walk it either) and switches the collector on
again, with full passes ten times rarer than CPython's default (`STEADY_THRESHOLDS`). Frozen
objects are still freed when their last reference goes (a pod's old object when its update
comes); only a reference cycle that was alive at the freeze and dies later is never
collected (the runtime's own objects live as long as the process). A start that has not synced
after `limit` seconds (`check`) switches the collector on without freezing. The collector is
the process's: one `StartupGc` per process, and only where the process is the scheduler (a test
process leaves it alone).

Why full passes rarer: once serving, every decision allocates containers the memos keep (verdicts,
node states, their derived views), so the collector's oldest generation keeps growing, and a full
pass walks all of it and everything it refers to, scattered over the heap. At 40,000 nodes a pass
over what 20,000 decisions left took about 0.1 s, stalled the decision it fell in (the 75-105 ms
`max ms` of `bench/scheduler_bench.py`'s share pairs) and came every 7,000-10,000 decisions, two
to three times in those 20,000. With a full pass at most once per 100 middle-generation passes
(700,000 net allocations) none came in them: the collector's time fell from 0.26-0.35 s to
0.15-0.18 s without share pods and from 0.38-0.50 s to 0.22-0.27 s with them, and the slowest
decision from 75-105 ms to 11-19 ms. The young generations keep CPython's thresholds: larger ones
cost more (2,000 to 10,000 objects: 0.24-0.44 s), each pass walking objects no longer in cache.
Cyclic garbage, rare here (objects are freed by their counts), waits longer for its pass.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable

STEADY_THRESHOLDS = (700, 10, 100)
"""`gc.set_threshold` once the scheduler serves: CPython's defaults but for the oldest generation,
a full pass after 100 middle ones (default 10). Module docstring."""


class StartupGc:
    """`active=False`: leaves the collector alone (a runtime in a test process)."""

    def __init__(
        self,
        *,
        active: bool = True,
        limit: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._active, self._limit, self._clock = active, limit, clock
        self._lock = threading.Lock()
        self._paused_at: float | None = None  # None: not paused by this object
        self._frozen = False
        self._thresholds: tuple[int, int, int] | None = None  # the process's, while ours are set

    def pause(self) -> None:
        """Switch the collector off (the start begins); nothing when it is off already."""
        with self._lock:
            if self._active and gc.isenabled():
                gc.disable()
                self._paused_at = self._clock()

    def synced(self, *, freeze: bool = True) -> None:
        """Every collection is in the cache: freeze what is alive and switch the collector on,
        with `STEADY_THRESHOLDS`."""
        with self._lock:
            if self._paused_at is None:
                return
            if freeze:
                gc.freeze()
                self._frozen = True
            self._thresholds = gc.get_threshold()
            gc.set_threshold(*STEADY_THRESHOLDS)
            gc.enable()
            self._paused_at = None

    def check(self) -> None:
        """Called while the start waits: past `limit`, the collector goes on without freezing."""
        with self._lock:
            overdue = self._paused_at is not None and self._clock() - self._paused_at > self._limit
        if overdue:
            self.synced(freeze=False)

    def release(self) -> None:
        """The scheduler stops: the collector on with the process's thresholds, what was frozen
        collectable again."""
        self.synced(freeze=False)
        with self._lock:
            if self._frozen:
                gc.unfreeze()
                self._frozen = False
            if self._thresholds is not None:
                gc.set_threshold(*self._thresholds)
                self._thresholds = None
