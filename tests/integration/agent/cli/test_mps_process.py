"""`gputopo-agent mps` as a real process (fake NVML, the stand-in control daemon): it serves,
answers `/readyz` by its daemons, and on SIGTERM quits them and exits 0."""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request

from agent.mps.layout import MpsLayout
from agent.mps.status import down_reason
from tests.builders.mps import StandInControl, stand_in_control, wait_until
from tests.builders.process import CommandProcess, module_argv


def _mps(control: StandInControl) -> CommandProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUTOPO_")}
    args = [
        "mps", "--nvml-fixture=single-t4", f"--mps-root={control.mps_root}",
        f"--control={control.path}", f"--users={os.geteuid()}", "--metrics-address=127.0.0.1:0",
    ]  # fmt: skip
    return CommandProcess(module_argv("agent.cli", *args), env)


def _readyz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_it_serves_until_sigterm_then_quits_its_daemon_and_exits_0():
    control = stand_in_control()
    process = _mps(control)
    try:
        status_file = MpsLayout(control.mps_root).status_file
        wait_until(lambda: down_reason(status_file, time.time()) is None, 20)
        assert _readyz(process.port()) == (200, "ok\n")
        assert process.stop() == 0, process.lines
        assert [c["command"] for c in control.records("command")] == ["quit"]
        assert any("received SIGTERM: stopping" in line for line in process.lines)
        assert "stopped" in (down_reason(status_file, time.time()) or "")
    finally:
        process.stop()
        control.remove()


def test_readyz_names_the_user_whose_daemon_is_down():
    control = stand_in_control()
    control.crash()
    process = _mps(control)
    try:
        port, down = process.port(), f"uid {os.geteuid()}: exited with status 3"
        replies: list[tuple[int, str]] = []
        wait_until(lambda: replies.append(_readyz(port)) or down in replies[-1][1], 20)
        assert replies[-1][0] == 503
    finally:
        process.stop()
        control.remove()
