"""`RestartHold`: what the agent counts as used right after a kubelet restart.

A restarted kubelet answers `List` with no pods for about a second, until it has re-synced them
from the API server. The hold keeps counting the pods that vanish in that window as holding their
devices (CPUs, memory) until the kubelet's view has settled; pods that appear count at once, so
availability may drop at any time but rises only on a settled view.

A kubelet that crash-loops restarts again while a hold is on (seen on a real kubelet: restarts
9-11 s apart, each hold still unsettled at the next). So a restart during a hold re-arms its cap,
which counts from the latest restart; and a hold that reaches its cap while the kubelet's view
still changes ends only on an answer listing at least as many pods as the kubelet did before the
restart, never on a shorter one, which may be a restart's empty window.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

from agent.availability import PodGrant, PodResourcesSnapshot
from agent.objkey import ObjectKey, object_key

log = logging.getLogger(__name__)

SETTLE_S = 2.0
"""A view the kubelet answered unchanged for this long has settled (its re-sync takes ~1 s)."""
MAX_HOLD_S = 10.0
"""The cap: a hold whose view keeps changing ends this long after the latest restart, on an answer
that lists no fewer pods than the kubelet did before it restarted."""


class RestartHold:
    """Hold increases of availability after a kubelet restart until its PodResources view settles.

    `restarted(why)` starts a hold, or re-arms the one on (the caller saw a new kubelet socket, or
    PodResources answer again after failing). `apply(snapshot)` returns the snapshot to count:
    outside a hold the kubelet's own; in a hold its pods plus every pod seen since the hold
    began. The hold ends once the kubelet answered the same pods for `settle_s`, or from
    `max_hold_s` after the latest restart on an answer that lists at least as many pods as the
    kubelet listed before the restart. Logged: the start, a re-arm, a hold going on past its cap
    (once), and the end.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        settle_s: float = SETTLE_S,
        max_hold_s: float = MAX_HOLD_S,
    ) -> None:
        self._clock = clock
        self._settle_s = settle_s
        self._max_hold_s = max_hold_s
        self._counted: dict[ObjectKey, PodGrant] = {}  # the pods the last answer counted
        self._listed = 0  # how many pods the kubelet's last answer listed
        self._began: float | None = None  # when the hold began; None: no hold
        self._armed = 0.0  # the latest restart: the cap counts from here
        self._before = 0  # pods the kubelet listed before its latest restart
        self._past_cap = False  # the hold went on past its cap (logged once)
        self._view: frozenset[PodGrant] | None = None  # the kubelet's pods, unchanged since...
        self._view_since = 0.0

    @property
    def holding(self) -> bool:
        return self._began is not None

    def restarted(self, why: str) -> None:
        """The kubelet restarted: its next answers may miss pods that still hold devices."""
        now = self._clock()
        self._view = None
        self._armed = now
        if self._began is not None:
            # the kubelet's last answer, unless it came in the empty window of a restart before
            self._before = self._listed or self._before
            log.info("%s during a hold: its %.0f s cap now counts from here", why, self._max_hold_s)
            return
        self._began, self._before = now, self._listed
        log.info(
            "%s: holding increases of free devices until the kubelet's PodResources view "
            "settles (cap: %.0f s after its latest restart)",
            why,
            self._max_hold_s,
        )

    def apply(self, snapshot: PodResourcesSnapshot) -> PodResourcesSnapshot:
        """The snapshot to count now (see the class docstring)."""
        fresh = {object_key(p.namespace, p.name): p for p in snapshot.pods}
        if self._began is not None:
            outcome = self._outcome(frozenset(snapshot.pods), len(fresh))
            if outcome is not None:
                self._end(outcome, fresh)
        self._listed = len(fresh)
        if self._began is None:
            self._counted = fresh
            return snapshot
        self._counted = {**self._counted, **fresh}
        return replace(snapshot, pods=tuple(self._counted.values()))

    def _outcome(self, view: frozenset[PodGrant], listed: int) -> str | None:
        """How the hold ends with this answer, or None while it goes on."""
        assert self._began is not None
        now = self._clock()
        if view != self._view:
            self._view, self._view_since = view, now
        if now - self._view_since >= self._settle_s:
            return f"settled after {now - self._began:.1f} s"
        if now - self._armed < self._max_hold_s:
            return None
        if listed >= self._before:
            return f"not settled after {now - self._began:.1f} s, hold ended"
        if not self._past_cap:
            self._past_cap = True
            log.info(
                "PodResources view still changing %.1f s after the kubelet's latest restart and "
                "listing %d pod(s), %d before it: the hold goes on until the view is steady for "
                "%.0f s or lists as many",
                now - self._armed,
                listed,
                self._before,
                self._settle_s,
            )
        return None

    def _end(self, outcome: str, fresh: Mapping[ObjectKey, PodGrant]) -> None:
        released = sorted(k for k in self._counted if k not in fresh)
        shown = ", ".join(released[:5]) + (", ..." if len(released) > 5 else "")
        log.info(
            "PodResources view %s: %d pod(s) it no longer lists released%s",
            outcome,
            len(released),
            f" ({shown})" if released else "",
        )
        self._began, self._view, self._past_cap = None, None, False
