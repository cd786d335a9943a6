"""SIGTERM and SIGINT for the long-running commands, with no lock taken in the signal handler.

A Python signal handler runs on the main thread between two bytecodes, possibly while that
thread holds the lock inside a `threading.Event` (within `Event.wait`). A handler that calls
`Event.set()`, or logs, then waits for a lock its own thread holds: the process hangs and ignores
every later SIGTERM until it is killed (seen in CI: `gputopo-scheduler run` never logged
"stopping"). So the handler only appends the signal to a list; the main thread polls for it and
sets the stop event itself.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

__all__ = ["StopSignals"]


class StopSignals:
    """Install on the main thread; then `wait(stop)` there."""

    def __init__(self) -> None:
        self.received: list[int] = []

    def install(self) -> StopSignals:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._record)
        return self

    def _record(self, signum: int, _frame: FrameType | None) -> None:
        self.received.append(signum)  # list.append takes no lock a thread could hold

    def wait(self, stop: threading.Event, poll: float = 0.2) -> str | None:
        """Until `stop` is set or a signal arrives; then `stop` is set. The signal's name, if
        one ended the wait."""
        while not self.received and not stop.wait(poll):
            pass
        if not self.received:
            return None
        stop.set()
        return signal.Signals(self.received[0]).name
