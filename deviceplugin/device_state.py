"""The versioned device state every resource plugin reads: what is advertised, what is Unhealthy.

`DeviceState` holds one immutable `DeviceStateView` at a time. Writers (the health monitor, the MIG
re-scan, the MPS status watch) replace whole values; readers take a consistent view. Every change
bumps the version and wakes the ListAndWatch streams waiting on it.

Two kinds of Unhealthy: `unhealthy` names GPU / MIG units (an Xid; every resource on that unit),
`down` names whole resources with the reason (MPS not serving: every replica, whatever its GPU).
`mps_down` is that reason itself, the one reading of the MPS status file, which the DRA driver's
shares read as well (they are no resource of the device plugin's).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from deviceplugin.errors import DeviceUnavailableError
from deviceplugin.resources import Resource


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceStateView:
    """One version of the device state; never changes once made."""

    version: int
    resources: Mapping[str, Resource]  # by resource name
    unhealthy: frozenset[str]  # GPU and MIG UUIDs
    down: Mapping[str, str] = field(default_factory=dict)  # resource name -> why all Unhealthy
    mps_down: str | None = None  # why MPS does not serve (watched under sharing.mps only)


def down_error(name: str, reason: str) -> DeviceUnavailableError:
    """What Allocate of a resource marked down answers (FAILED_PRECONDITION)."""
    return DeviceUnavailableError(f"every device of {name} is Unhealthy: {reason}")


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
            self._publish(replace(old, version=old.version + 1, resources=new))
            return True

    def set_unhealthy(self, unhealthy: frozenset[str]) -> bool:
        with self._cond:
            old = self._view
            if unhealthy == old.unhealthy:
                return False
            self._publish(replace(old, version=old.version + 1, unhealthy=unhealthy))
            return True

    def set_down(self, down: Mapping[str, str], mps_down: str | None = None) -> bool:
        """Replace the resources marked down (name -> reason) and why MPS does not serve (None
        while it serves); False when nothing changed."""
        with self._cond:
            old = self._view
            if dict(down) == dict(old.down) and mps_down == old.mps_down:
                return False
            new = replace(old, version=old.version + 1, down=dict(down), mps_down=mps_down)
            self._publish(new)
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
