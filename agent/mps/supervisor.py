"""Keep every user's MPS control daemon running, and say so in the status file.

`start()` starts each daemon; `step()` (called every `POLL_S` by `run`) notices a daemon that
exited, marks it down at once, and starts it again after a backoff: `initial_s`, doubled after
each failure up to `max_s`, back to `initial_s` once a daemon has stayed up `stable_s`. The status
file (`agent.mps.status`) is rewritten at every change and every `HEARTBEAT_S`; `stop()` quits
every daemon and writes them down. Time comes from `clock` (monotonic, for the backoff) and
`wall_clock` (the status file's timestamp, read by another process).
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from agent.mps.daemon import ControlDaemon
from agent.mps.metrics import MpsMetrics
from agent.mps.status import HEARTBEAT_S, DaemonStatus, MpsStatus, write_status

log = logging.getLogger(__name__)

POLL_S = 0.5
STOPPED = "the MPS supervisor stopped"


@dataclass(frozen=True, slots=True, kw_only=True)
class Backoff:
    initial_s: float = 1.0
    max_s: float = 60.0
    stable_s: float = 60.0  # up this long: the next failure starts from initial_s again

    def delay(self, failures: int) -> float:
        """The wait before the next start after `failures` (>= 1) failures in a row."""
        return float(min(self.max_s, self.initial_s * 2 ** max(0, failures - 1)))


@dataclass(slots=True)
class _Tracked:
    daemon: ControlDaemon
    up: bool = False
    started_at: float = 0.0
    failures: int = 0  # in a row
    restarts: int = 0
    retry_at: float = 0.0
    reason: str = "not started"


class Supervisor:
    def __init__(
        self,
        daemons: Sequence[ControlDaemon],
        *,
        status_path: Path,
        gpus: Sequence[str],
        backoff: Backoff | None = None,
        metrics: MpsMetrics | None = None,
        heartbeat: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._tracked = [_Tracked(d) for d in daemons]
        self.status_path, self.gpus = status_path, tuple(gpus)
        self.backoff = backoff or Backoff()
        self._metrics, self._heartbeat = metrics, heartbeat
        self._clock, self._wall = clock, wall_clock
        self._written_at: float | None = None

    def start(self) -> None:
        now = self._clock()
        for tracked in self._tracked:
            self._start(tracked, now)
        self._write()

    def step(self) -> None:
        """Notice exits, restart what is due, write the status if it changed or is due."""
        now, changed = self._clock(), False
        for tracked in self._tracked:
            if tracked.up:
                changed |= self._check(tracked, now)
            elif now >= tracked.retry_at:
                self._start(tracked, now)
                changed = True
        if changed or self._written_at is None or now - self._written_at >= HEARTBEAT_S:
            self._write()

    def stop(self) -> None:
        """Quit every daemon; the status file then says they are down."""
        for tracked in self._tracked:
            tracked.daemon.quit()
            tracked.up, tracked.reason = False, STOPPED
            self._observe(tracked)
        self._write()

    def run(self, stop: threading.Event, poll_s: float = POLL_S) -> None:
        """start(), step() every `poll_s` until `stop` is set, then stop()."""
        self.start()
        try:
            while not stop.wait(poll_s):
                self.step()
        finally:
            self.stop()

    def statuses(self) -> tuple[DaemonStatus, ...]:
        return tuple(
            DaemonStatus(uid=t.daemon.uid, up=t.up, restarts=t.restarts, reason=t.reason)
            for t in self._tracked
        )

    def _check(self, tracked: _Tracked, now: float) -> bool:
        code = tracked.daemon.exit_code()
        if code is None:
            if now - tracked.started_at >= self.backoff.stable_s:
                tracked.failures = 0
            return False
        self._down(tracked, now, f"exited with status {code}")
        return True

    def _start(self, tracked: _Tracked, now: float) -> None:
        again = tracked.failures > 0
        try:
            tracked.daemon.start()
        except (OSError, subprocess.SubprocessError) as exc:
            self._down(tracked, now, f"cannot start: {exc}")
            return
        tracked.up, tracked.started_at, tracked.reason = True, now, ""
        if again:
            tracked.restarts += 1
        self._observe(tracked, restarted=again)

    def _down(self, tracked: _Tracked, now: float, reason: str) -> None:
        tracked.failures += 1
        delay = self.backoff.delay(tracked.failures)
        tracked.up, tracked.reason, tracked.retry_at = False, reason, now + delay
        log.warning(
            "MPS control daemon for uid %d %s; shared GPUs Unhealthy; next start in %.0fs",
            tracked.daemon.uid,
            reason,
            delay,
        )
        self._observe(tracked)

    def _observe(self, tracked: _Tracked, *, restarted: bool = False) -> None:
        if self._metrics is not None:
            self._metrics.observe_daemon(tracked.daemon.uid, up=tracked.up, restarted=restarted)

    def _write(self) -> None:
        now = self._clock()
        status = MpsStatus(written_at=self._wall(), gpus=self.gpus, daemons=self.statuses())
        try:
            write_status(self.status_path, status)
        except OSError as exc:
            log.error("cannot write %s: %s", self.status_path, exc)
        self._written_at = now
        if self._heartbeat is not None:
            self._heartbeat()
