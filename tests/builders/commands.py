"""The installed commands (`gputopo-agent`, `gputopo-scheduler`, `kubectl-gputopo`) run as a user
runs them: the console scripts pip put next to the test interpreter (`.venv/bin/`), as processes,
with the environment cleaned of what would change their answers (`GPUTOPO_*`, `NODE_NAME`,
`KUBECONFIG`, `KUBERNETES_*`) and `HOME` at an empty folder (no `~/.kube/config`).

- `run_command(name, *args, env=...)`: run one to its end; `env` adds variables.
- `AgentProcess(*args)`: `gputopo-agent run --node-name NODE ...` left running, its stderr
  collected line by line; `port()` waits for its metrics server, `stop()` sends SIGTERM.
- `readyz(port)`: the agent's `/readyz` answer; `wait_for(predicate, timeout_s)`: poll it.
"""

from __future__ import annotations

import os
import subprocess
import sysconfig
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tests.builders.agentnode import NODE
from tests.builders.process import ROOT, CommandProcess

BIN = Path(sysconfig.get_path("scripts"))
"""Where pip installed the console scripts of the interpreter running the tests."""

_DROPPED = ("GPUTOPO_", "NODE_NAME", "KUBERNETES_", "KUBECONFIG")


def command(name: str) -> str:
    """The installed console script `name`; FileNotFoundError when pip did not install it."""
    path = BIN / name
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not installed (bash scripts/setup.sh installs it)")
    return str(path)


def empty_dir() -> Path:
    return Path(tempfile.mkdtemp(dir="/tmp"))


def clean_env(
    extra: Mapping[str, str] | None = None, *, home: Path | None = None
) -> dict[str, str]:
    """The test's environment without the variables the commands read, `HOME` empty, `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED)}
    env["HOME"] = str(home or empty_dir())
    return env | dict(extra or {})


def run_command(
    name: str, *args: str, env: Mapping[str, str] | None = None, timeout_s: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [command(name), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=ROOT,
        env=clean_env(env),
    )


def wait_for(predicate: Callable[[], Any], timeout_s: float) -> bool:
    tick, deadline = threading.Event(), time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        tick.wait(0.05)
    return True


def readyz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


class AgentProcess(CommandProcess):
    """`gputopo-agent run --node-name NODE ...` with its stderr collected line by line."""

    def __init__(self, *args: str, home: Path, node: str = NODE) -> None:
        argv = [command("gputopo-agent"), "run", "--node-name", node, *args]
        super().__init__(argv, clean_env(home=home))
