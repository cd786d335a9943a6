"""A command of ours as a real process (`python -m MODULE ARGS...`, or an installed console script),
run from the repository root, with its stderr collected line by line, its metrics port read from
its log, and SIGTERM to stop it."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def module_argv(module: str, *args: str) -> list[str]:
    """`python -m module args...` with the interpreter running the tests."""
    return [sys.executable, "-m", module, *args]


class CommandProcess:
    def __init__(self, argv: Sequence[str], env: Mapping[str, str]) -> None:
        self.proc = subprocess.Popen(
            list(argv), cwd=ROOT, env=dict(env),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def logged(self, text: str) -> list[str]:
        return [line for line in list(self.lines) if text in line]

    def port(self, timeout_s: float = 30) -> int:
        """The port of `metrics on port N` in its log; AssertionError if it exits first."""
        tick, deadline = threading.Event(), time.monotonic() + timeout_s
        while not self.logged("metrics on port") and self.proc.poll() is None:
            assert time.monotonic() < deadline, "\n".join(self.lines)
            tick.wait(0.05)
        assert self.proc.poll() is None, "the command exited:\n" + "\n".join(self.lines)
        match = re.search(r"metrics on port (\d+)", self.logged("metrics on port")[0])
        assert match is not None
        return int(match.group(1))

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Stopped (SIGSTOP) for the block and continued (SIGCONT) after: it runs no code and
        keeps its sockets and its objects, as a process the kernel does not schedule."""
        self.proc.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> int:
        """SIGTERM, then its exit status (killed after 20 s); safe to call again."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a paused process would not act on SIGTERM
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=20)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=5)
            self._reader.join(timeout=5)
            if self.proc.stderr is not None:
                self.proc.stderr.close()
