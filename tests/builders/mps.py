"""A stand-in `nvidia-cuda-mps-control`: a shell script that records how it was run.

`-f` (the control daemon in the foreground) records `start` with its uid, gid, pid and the
environment it was given, then runs until a `quit` command arrives (or exits 3 at once while the
`crash` switch is on). Without arguments it reads one command from stdin, like the real client,
records it with its uid and pipe directory, and answers `quit` by telling the daemon of that pipe
directory to exit. Everything lands in `record.log` (one `key=value ...` line per event), written
world-readable so a daemon running as another user can append to it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agent.mps.layout import MpsUser

_SCRIPT = """#!/bin/sh
REC={dir}/record.log
if [ "$1" = "-f" ]; then
  echo "event=start uid=$(id -u) gid=$(id -g) groups=$(id -G | tr ' ' ,) pid=$$ \\
pipe=$CUDA_MPS_PIPE_DIRECTORY log=$CUDA_MPS_LOG_DIRECTORY \\
visible=${{CUDA_VISIBLE_DEVICES-unset}} secret=${{GPUTOPO_TEST_SECRET-unset}}" >> "$REC"
  if [ -e {dir}/crash ]; then exit 3; fi
  while [ ! -e "$CUDA_MPS_PIPE_DIRECTORY/quit" ] && [ -d {dir} ]; do sleep 0.02; done
  rm -f "$CUDA_MPS_PIPE_DIRECTORY/quit"
  echo "event=exit uid=$(id -u) pid=$$" >> "$REC"
  exit 0
fi
read -r cmd
echo "event=command command=$cmd uid=$(id -u) pipe=$CUDA_MPS_PIPE_DIRECTORY" >> "$REC"
if [ "$cmd" = quit ]; then touch "$CUDA_MPS_PIPE_DIRECTORY/quit"; fi
"""


@dataclass
class StandInControl:
    dir: Path

    @property
    def path(self) -> str:
        return str(self.dir / "nvidia-cuda-mps-control")

    @property
    def mps_root(self) -> Path:
        return self.dir / "mps"

    def crash(self, on: bool = True) -> None:
        """While on, every daemon start exits at once with status 3."""
        switch = self.dir / "crash"
        switch.touch() if on else switch.unlink(missing_ok=True)

    def records(self, event: str | None = None) -> list[dict[str, str]]:
        log = self.dir / "record.log"
        lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
        found = [dict(part.split("=", 1) for part in line.split()) for line in lines]
        return [r for r in found if event is None or r["event"] == event]

    def remove(self) -> None:
        """Delete the directory (a daemon still running sees it gone and exits) and kill any
        daemon that has not recorded its exit."""
        running = {r["pid"] for r in self.records("start")} - {
            r["pid"] for r in self.records("exit")
        }
        shutil.rmtree(self.dir, ignore_errors=True)
        for pid in running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


def stand_in_control() -> StandInControl:
    """A fresh stand-in in its own directory under /tmp (traversable by every user)."""
    root = Path(tempfile.mkdtemp(prefix="gputopo-mps-", dir="/tmp"))
    os.chmod(root, 0o755)
    script = root / "nvidia-cuda-mps-control"
    script.write_text(_SCRIPT.format(dir=root), encoding="utf-8")
    os.chmod(script, 0o755)
    log = root / "record.log"
    log.touch()
    os.chmod(log, 0o666)
    return StandInControl(root)


def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Wait (real time) for a real child process to get somewhere; AssertionError on timeout."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s")
        time.sleep(0.01)


class FakeMounter:
    """An `agent.mps.shm.Mounter` for tests without CAP_SYS_ADMIN: records each tmpfs it is
    asked for and creates the directory with the mode the options name (what a tmpfs's root
    would show); daemons start as their user directly (no namespace of their own)."""

    def __init__(self) -> None:
        self.mounts: dict[Path, str] = {}
        self.remounts: list[Path] = []

    def is_mount(self, path: Path) -> bool:
        return path in self.mounts

    def mount_tmpfs(self, path: Path, options: str, *, remount: bool) -> None:
        fields = dict(o.partition("=")[::2] for o in options.split(","))
        if not {"size", "mode", "uid", "gid"} <= set(fields):
            raise NotImplementedError(f"a tmpfs without size, mode, uid and gid: {options}")
        if remount:
            self.remounts.append(path)
        self.mounts[path] = options
        os.chmod(path, int(fields["mode"], 8))

    def daemon_prefix(self, shm: Path, user: MpsUser) -> list[str] | None:
        return None
