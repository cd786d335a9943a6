"""The versioned device state every resource plugin reads: what is advertised, what is Unhealthy.

`DeviceState` holds one immutable `DeviceStateView` at a time. Writers (the health monitor, the MIG
re-scan) replace whole values; readers take a consistent view. Every change bumps the version and
wakes the ListAndWatch streams waiting on it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from deviceplugin.resources import Resource


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceStateView:
    """One version of the device state; never changes once made."""

    version: int
    resources: Mapping[str, Resource]  # by resource name
    unhealthy: frozenset[str]  # GPU and MIG UUIDs


class DeviceState:
    """The current `DeviceStateView`, replaced under a lock; `wait` blocks for the next version."""

    def __init__(self, resources: Sequence[Resource] = ()) -> None:
        self._cond = threading.Condition()
        self._view = DeviceStateView(
            version=0, resources={r.name: r for r in resources}, unhealthy=frozenset()
        )

    def view(self) -> DeviceStateView:
        return self._view

    def resource(self, name: str) -> Resource | None:
        return self._view.resources.get(name)

    @property
    def unhealthy(self) -> frozenset[str]:
        return self._view.unhealthy

    def set_resources(self, resources: Sequence[Resource]) -> bool:
        """Replace the advertised resources; False (and no wake-up) when nothing changed."""
        new = {r.name: r for r in resources}
        with self._cond:
            old = self._view
            if new == dict(old.resources):
                return False
            self._publish(
                DeviceStateView(version=old.version + 1, resources=new, unhealthy=old.unhealthy)
            )
            return True

    def set_unhealthy(self, unhealthy: frozenset[str]) -> bool:
        with self._cond:
            old = self._view
            if unhealthy == old.unhealthy:
                return False
            self._publish(
                DeviceStateView(
                    version=old.version + 1, resources=old.resources, unhealthy=unhealthy
                )
            )
            return True

    def _publish(self, view: DeviceStateView) -> None:
        self._view = view
        self._cond.notify_all()

    def wait(
        self, since: int, timeout_s: float, cancelled: Callable[[], bool] = lambda: False
    ) -> DeviceStateView:
        """The view once its version is not `since`, or `cancelled()`, or after `timeout_s`."""
        with self._cond:
            self._cond.wait_for(lambda: self._view.version != since or cancelled(), timeout_s)
            return self._view

    def wake(self) -> None:
        """Make every waiter re-check its `cancelled` (a stream is closing)."""
        with self._cond:
            self._cond.notify_all()
