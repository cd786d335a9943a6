"""`gputopo-scheduler` as a process: `--version`, help without references outside the
repository, names the API would reject refused before connecting, and an API server that cannot
be reached as one line naming it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.dispatch import package_version
from tests.fakeapi import FakeApiServer

ROOT = Path(__file__).resolve().parents[4]
SCHEDULER = [sys.executable, "-m", "scheduler.cli"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUTOPO_")}
    return subprocess.run(
        [*SCHEDULER, *args], capture_output=True, text=True, timeout=60, cwd=ROOT, env=env
    )


@pytest.mark.parametrize(
    ("args", "prog"),
    [
        pytest.param(["--version"], "gputopo-scheduler", id="gputopo-scheduler"),
        pytest.param(["run", "--version"], "gputopo-scheduler run", id="run"),
    ],
)
def test_version(args, prog) -> None:
    done = run(*args)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"{prog} {package_version()}\n"


@pytest.mark.parametrize("args", [["--help"], ["run", "--help"]])
def test_help_shows_defaults_and_nothing_outside_the_repository(args) -> None:
    done = run(*args)
    assert done.returncode == 0, done.stderr
    assert "DESIGN" not in done.stdout
    assert "§" not in done.stdout
    if args[0] == "run":
        assert "(default gputopo-scheduler)" in " ".join(done.stdout.split())


@pytest.mark.parametrize(
    ("flag", "value", "problem"),
    [
        pytest.param("--scheduler-name", "GPU Scheduler", "not a valid name (RFC 1123", id="name"),
        pytest.param("--scheduler-name", "s" * 254, "254 characters, at most 253", id="long"),
        pytest.param("--leader-elect-namespace", "Team_A", "not a valid name", id="namespace"),
    ],
)
def test_a_name_the_api_would_reject_is_refused_before_connecting(
    flag, value, problem, tmp_path
) -> None:
    with FakeApiServer() as fake:
        kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig")
        done = run("run", "--kubeconfig", str(kubeconfig), flag, value)
        requests = list(fake.requests)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(f"gputopo-scheduler run: {flag}: {value!r}: {problem}")
    assert done.stderr.count("\n") == 1
    assert requests == []


def test_an_unreachable_api_server_is_one_line_naming_it(tmp_path) -> None:
    with FakeApiServer() as fake:
        kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig")
        server = fake.host
        fake.down()
        done = run("run", "--kubeconfig", str(kubeconfig), "--metrics-address", "127.0.0.1:0")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"gputopo-scheduler run: API server {server} unreachable: Connection refused\n"
    )
