"""What `gputopo-agent` and `kubectl gputopo` say, as processes: `--version` everywhere, help
with defaults and choices and no reference to files outside the repository, names the API would
reject refused before anything starts; each failure one line, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.dispatch import package_version

ROOT = Path(__file__).resolve().parents[4]
AGENT = [sys.executable, "-m", "agent.cli"]
KUBECTL = [sys.executable, "-m", "agent.cli.kubectl"]


def run(*command: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUTOPO_", "NODE_NAME"))}
    return subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)


@pytest.mark.parametrize(
    ("command", "prog"),
    [
        pytest.param([*AGENT, "--version"], "gputopo-agent", id="gputopo-agent"),
        pytest.param([*AGENT, "run", "--version"], "gputopo-agent run", id="run"),
        pytest.param([*AGENT, "inventory", "--version"], "gputopo-agent inventory", id="inventory"),
        pytest.param([*AGENT, "record", "--version"], "gputopo-agent record", id="record"),
        pytest.param([*KUBECTL, "--version"], "kubectl-gputopo", id="kubectl gputopo"),
        pytest.param([*KUBECTL, "nodes", "--version"], "kubectl-gputopo", id="kubectl nodes"),
    ],
)
def test_every_command_has_version(command, prog) -> None:
    done = run(*command)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"{prog} {package_version()}\n"


HELP = [
    pytest.param([*AGENT, "--help"], id="gputopo-agent"),
    pytest.param([*AGENT, "run", "--help"], id="run"),
    pytest.param([*AGENT, "inventory", "--help"], id="inventory"),
    pytest.param([*AGENT, "record", "--help"], id="record"),
    pytest.param([*KUBECTL, "--help"], id="kubectl gputopo"),
    pytest.param([*KUBECTL, "queue", "--help"], id="kubectl gputopo queue"),
]


@pytest.mark.parametrize("command", HELP)
def test_help_refers_to_nothing_outside_the_repository(command) -> None:
    done = run(*command)
    assert done.returncode == 0, done.stderr
    assert "DESIGN" not in done.stdout
    assert "§" not in done.stdout


def test_run_help_shows_defaults_and_choices() -> None:
    text = " ".join(run(*AGENT, "run", "--help").stdout.split())
    for shown in (
        "--mig-strategy {none,single,mixed}",
        "MIG strategy (default: mixed; env GPUTOPO_MIG_STRATEGY)",
        "--node-labels {on,off}",
        "(default: /var/lib/kubelet/device-plugins; env GPUTOPO_DEVICE_PLUGIN_DIR)",
        "--metrics-address HOST:PORT",
        "(default: false; env GPUTOPO_ALLOW_FAKE_GPUS)",
        "--topology-manager-scope {container,pod}",
    ):
        assert shown in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--node-name", "GPU_Node_1"],
            "gputopo-agent run: invalid configuration: flag --node-name: 'GPU_Node_1' is not a "
            "valid name (RFC 1123: lowercase letters, digits, '.' and '-', starting and ending "
            "with a letter or digit)",
            id="upper case and underscores",
        ),
        pytest.param(
            ["--node-name", "n" * 254],
            "gputopo-agent run: invalid configuration: flag --node-name: 254 characters, at most "
            "253 allowed",
            id="too long",
        ),
    ],
)
def test_a_node_name_the_api_would_reject_is_refused_before_starting(args, message) -> None:
    done = run(*AGENT, "run", "--oneshot", "--dry-run", "--nvml-fixture", "single-t4", *args)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == message + "\n"


def test_kubectl_with_no_arguments_lists_its_commands() -> None:
    done = run(*KUBECTL)
    assert (done.returncode, done.stderr) == (2, "")
    assert "commands:" in done.stdout
    assert "nodes" in done.stdout
    assert "queue " in done.stdout
