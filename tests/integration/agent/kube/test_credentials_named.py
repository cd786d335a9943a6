"""Every command that talks to the API server names the kubeconfig file(s) it actually read when
the credentials are unusable: the installed commands as processes, one line, no traceback."""

from __future__ import annotations

import pytest

from tests.builders.commands import empty_dir, run_command
from tests.fakeapi import FakeApiServer

CREDENTIALS = "no usable Kubernetes credentials"
COMMANDS = [
    pytest.param("kubectl-gputopo", ["nodes"], "kubectl-gputopo", 1, id="kubectl gputopo"),
    pytest.param(
        "gputopo-agent",
        ["run", "--nvml-fixture", "single-t4", "--oneshot", "--node-name", "n1"],
        "gputopo-agent run",
        1,
        id="agent run --oneshot",
    ),
    pytest.param("gputopo-scheduler", ["run"], "gputopo-scheduler run", 2, id="scheduler run"),
]


def last_line(stderr: str) -> str:
    """The command's own line: the agent logs its start before it fails."""
    assert "Traceback" not in stderr
    return stderr.splitlines()[-1]


@pytest.mark.parametrize(("name", "args", "prog", "code"), COMMANDS)
def test_a_missing_kubeconfig_from_the_environment_is_named(name, args, prog, code) -> None:
    done = run_command(name, *args, env={"KUBECONFIG": "/nonexistent"})
    assert done.returncode == code
    assert last_line(done.stderr) == (
        f"{prog}: {CREDENTIALS} (kubeconfig /nonexistent from $KUBECONFIG): no such file"
    )


def test_a_kubeconfig_list_is_named_whole() -> None:
    """The commands share `agent.kube.connect`: the other cases run through kubectl-gputopo."""
    broken = empty_dir() / "broken"
    broken.write_text("clusters: [\n", encoding="utf-8")
    listed = f"/nonexistent:{broken}"
    done = run_command("kubectl-gputopo", "nodes", env={"KUBECONFIG": listed})
    assert (done.returncode, done.stderr.count("\n")) == (1, 1)
    line = last_line(done.stderr)
    assert line.startswith(
        f"kubectl-gputopo: {CREDENTIALS} (kubeconfig {listed} from $KUBECONFIG): "
    )
    assert f'in "{broken}", line 2' in line


def test_without_a_pod_or_a_kubeconfig_both_are_named() -> None:
    done = run_command("kubectl-gputopo", "nodes", env={"HOME": "/nonexistent"})
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"kubectl-gputopo: {CREDENTIALS} (not in a pod; kubeconfig /nonexistent/.kube/config): "
        "no such file\n"
    )


def test_a_context_is_looked_for_in_the_file_kubeconfig_names(fake_api: FakeApiServer) -> None:
    kubeconfig = fake_api.write_kubeconfig(empty_dir() / "kubeconfig")
    env = {"KUBECONFIG": str(kubeconfig)}
    done = run_command("kubectl-gputopo", "nodes", "--context", "nope", env=env)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"kubectl-gputopo: {CREDENTIALS} (kubeconfig {kubeconfig} from $KUBECONFIG, context nope):"
        " no context nope in it\n"
    )
    assert run_command("kubectl-gputopo", "nodes", env=env).returncode == 0
