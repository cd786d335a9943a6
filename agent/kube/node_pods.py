"""The node's pods as the agent reads them from the API server.

`NodePods` lists the pods bound to this node and keeps the objects (the share usage reads them,
DESIGN §12); `TerminalPodFilter` answers the PodResources client's question "has this pod
finished?" from their phases, refreshing the list when an unseen pod shows up or after a TTL.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agent.errors import PublishError
from agent.podphase import TERMINAL_PHASES, pod_phases

__all__ = ["NodePods", "TerminalPodFilter"]

log = logging.getLogger(__name__)


class NodePods:
    """The node's pods as last listed: `phases()` (a TerminalPodFilter's source) lists them and
    keeps the objects in `last`, which the share usage reads (DESIGN §12); `missing(keys)` lists
    again, at most every `min_interval_s`, when the kubelet lists pods `last` lacks."""

    def __init__(
        self,
        list_pods: Callable[[], Iterable[Mapping[str, Any]]],
        *,
        clock: Callable[[], float] = time.monotonic,
        min_interval_s: float = 1.0,
    ) -> None:
        self._list_pods = list_pods
        self._clock = clock
        self._min_interval_s = min_interval_s
        self._listed_at = float("-inf")
        self.last: tuple[Mapping[str, Any], ...] = ()

    def phases(self) -> dict[tuple[str, str], str]:
        self._listed_at = self._clock()
        self.last = tuple(self._list_pods())
        return pod_phases(self.last)

    def missing(self, keys: Iterable[tuple[str, str]]) -> None:
        known = set(pod_phases(self.last))
        if self._clock() - self._listed_at < self._min_interval_s or set(keys) <= known:
            return
        try:
            self.phases()
        except PublishError as exc:
            log.debug("pods on the node not listed again: %s", exc)


class TerminalPodFilter:
    """`(namespace, name) -> bool` for the PodResources client: is the pod finished?

    The kubelet may still list finished pods; their phase comes from the API server
    (`phases()` lists the node's pods). The list is refreshed when an unseen pod shows up or
    after `ttl_s`, never more often than `min_interval_s`; while the API server is unreachable
    the last answer stands (unknown pods count as running).
    """

    def __init__(
        self,
        phases: Callable[[], Mapping[tuple[str, str], str]],
        *,
        clock: Callable[[], float] = time.monotonic,
        ttl_s: float = 60.0,
        min_interval_s: float = 5.0,
    ) -> None:
        self._phases_source = phases
        self._clock = clock
        self._ttl_s = ttl_s
        self._min_interval_s = min_interval_s
        self._phases: Mapping[tuple[str, str], str] = {}
        self._seen: set[tuple[str, str]] = set()
        self._refreshed = float("-inf")
        self._failed = False

    def __call__(self, namespace: str, name: str) -> bool:
        key = (namespace, name)
        now = self._clock()
        stale = now - self._refreshed >= self._ttl_s
        unseen = key not in self._seen and now - self._refreshed >= self._min_interval_s
        if stale or unseen:
            self._refresh(now)
        self._seen.add(key)
        return self._phases.get(key) in TERMINAL_PHASES

    def _refresh(self, now: float) -> None:
        self._refreshed = now
        try:
            self._phases = dict(self._phases_source())
        except PublishError as exc:
            level = logging.DEBUG if self._failed else logging.WARNING
            log.log(level, "pod phases unavailable, finished pods count as running: %s", exc)
            self._failed = True
            return
        self._failed = False
        self._seen = set(self._phases)
