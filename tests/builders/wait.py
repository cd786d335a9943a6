"""Polling for what a real process or server gets to in its own time (no scheduler imports:
the GPU tier uses it on a machine that carries only the agent's dependencies)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(
    predicate: Callable[[], Any], timeout: float, what: str, *, interval_s: float = 0.01
) -> Any:
    """Poll `predicate` every `interval_s` until truthy, and return its value; AssertionError
    naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval_s)
