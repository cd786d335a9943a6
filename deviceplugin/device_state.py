"""The live device state every server reads: resources advertised and which units are Unhealthy.

Writers (the health monitor, the MIG re-scan) replace whole values; readers take a consistent
snapshot. Every change bumps a version and wakes the ListAndWatch streams waiting on it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from deviceplugin.resources import Resource


@dataclass(frozen=True, slots=True)
class Snapshot:
    version: int
    resources: Mapping[str, Resource]
    unhealthy: frozenset[str]  # GPU and MIG UUIDs


class DeviceRegistry:
    def __init__(self, resources: Sequence[Resource] = ()) -> None:
        self._cond = threading.Condition()
        self._snapshot = Snapshot(0, {r.name: r for r in resources}, frozenset())

    def snapshot(self) -> Snapshot:
        return self._snapshot

    def resource(self, name: str) -> Resource | None:
        return self._snapshot.resources.get(name)

    @property
    def unhealthy(self) -> frozenset[str]:
        return self._snapshot.unhealthy

    def set_resources(self, resources: Sequence[Resource]) -> bool:
        """Replace the advertised resources; False (and no wake-up) when nothing changed."""
        new = {r.name: r for r in resources}
        with self._cond:
            old = self._snapshot
            if new == dict(old.resources):
                return False
            self._publish(Snapshot(old.version + 1, new, old.unhealthy))
            return True

    def set_unhealthy(self, unhealthy: frozenset[str]) -> bool:
        with self._cond:
            old = self._snapshot
            if unhealthy == old.unhealthy:
                return False
            self._publish(Snapshot(old.version + 1, old.resources, unhealthy))
            return True

    def _publish(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        self._cond.notify_all()

    def wait(
        self, since: int, timeout_s: float, cancelled: Callable[[], bool] = lambda: False
    ) -> Snapshot:
        """The snapshot once its version is not `since`, or `cancelled()`, or after `timeout_s`."""
        with self._cond:
            self._cond.wait_for(lambda: self._snapshot.version != since or cancelled(), timeout_s)
            return self._snapshot

    def wake(self) -> None:
        """Make every waiter re-check its `cancelled` (a stream is closing)."""
        with self._cond:
            self._cond.notify_all()
