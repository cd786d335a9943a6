"""What a new user runs first, through the installed console scripts (`.venv/bin/...`): kubectl
finds `kubectl gputopo` once that folder is on PATH, a mistyped flag prefix is an error in every
command, and a Queue no scheduler has reported on says so."""

from __future__ import annotations

import os
import subprocess
from importlib import metadata
from pathlib import Path

import pytest

from tests.builders.commands import BIN, ROOT, clean_env, command, empty_dir, run_command
from tests.builders.render import kubectl_path
from tests.fakeapi import FakeApiServer

KUBECTL = kubectl_path()
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="no kubectl binary on this machine")


def test_kubectl_gputopo_is_an_installed_console_script() -> None:
    (entry,) = metadata.entry_points(group="console_scripts", name="kubectl-gputopo")
    assert entry.value == "agent.cli.kubectl:main"
    assert os.access(command("kubectl-gputopo"), os.X_OK)
    assert Path(command("kubectl-gputopo")).parent == BIN


def _kubectl(*args: str, path: str, kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    assert KUBECTL is not None
    env = clean_env({"PATH": path, "KUBECONFIG": str(kubeconfig)})
    argv = [KUBECTL, *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)


@needs_kubectl
def test_kubectl_finds_the_plugin_only_with_the_venv_on_path(fake_api: FakeApiServer) -> None:
    kubeconfig = fake_api.write_kubeconfig(empty_dir() / "kubeconfig")
    assert KUBECTL is not None
    kubectl_dir = str(Path(KUBECTL).parent)
    without = _kubectl("gputopo", "queues", path=kubectl_dir, kubeconfig=kubeconfig)
    assert without.returncode != 0
    assert 'unknown command "gputopo" for "kubectl"' in without.stderr
    with_venv = _kubectl(
        "gputopo", "queues", path=f"{BIN}{os.pathsep}{kubectl_dir}", kubeconfig=kubeconfig
    )
    assert (with_venv.returncode, with_venv.stderr) == (0, "")
    assert with_venv.stdout.startswith("no queues: ")


@pytest.mark.parametrize(
    ("name", "args", "line"),
    [
        pytest.param(
            "gputopo-agent",
            ["run", "--nvml-fixtur", "single-t4", "--oneshot", "--dry-run"],
            "gputopo-agent run: unrecognized arguments: --nvml-fixtur single-t4",
            id="agent run",
        ),
        pytest.param(
            "kubectl-gputopo",
            ["nodes", "--kubeconf", "/nonexistent"],
            "kubectl gputopo: unrecognized arguments: --kubeconf /nonexistent",
            id="kubectl gputopo",
        ),
        pytest.param(
            "gputopo-scheduler",
            ["simulate", "--polic", "spread"],
            "gputopo-scheduler simulate: unrecognized arguments: --polic spread",
            id="scheduler simulate",
        ),
    ],
)
def test_a_prefix_of_a_flag_is_refused_in_one_line(name: str, args: list[str], line: str) -> None:
    """One command per console script; tests/unit/agent/test_dispatch.py checks every parser."""
    done = run_command(name, *args)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", line + "\n")


def test_a_queue_no_scheduler_has_reported_on_says_so(fake_api: FakeApiServer) -> None:
    fake_api.put_object(
        "queues",
        {
            "apiVersion": "scheduling.gputopo.io/v1alpha1",
            "kind": "Queue",
            "metadata": {"name": "team-a"},
            "spec": {"min": {"nvidia.com/gpu": 8}},
        },
    )
    kubeconfig = fake_api.write_kubeconfig(empty_dir() / "kubeconfig")
    done = run_command("kubectl-gputopo", "queues", "--kubeconfig", str(kubeconfig))
    assert (done.returncode, done.stderr) == (0, "")
    row = next(line for line in done.stdout.splitlines() if line.split()[:1] == ["team-a"])
    assert row.split()[1:4] == ["8", "-", "-"]
    assert row.endswith("unknown: no status yet")
