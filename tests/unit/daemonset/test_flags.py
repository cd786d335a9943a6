"""Container args use only flags the commands accept: DESIGN §1, and `run --help` when present."""

from __future__ import annotations

import importlib.util

import pytest

from tests.builders import manifests as checks
from tests.builders import render as r

# DESIGN §1: the flags users and scripts rely on (plus --log-format, which every command has).
DESIGN_FLAGS = {
    "gputopo-agent": {
        "--node-name",
        "--nvml-fixture",
        "--mig-strategy",
        "--config",
        "--device-plugin-dir",
        "--pod-resources-socket",
        "--kubelet-config",
        "--topology-manager-policy",
        "--topology-manager-scope",
        "--host-root",
        "--kubeconfig",
        "--metrics-address",
        "--node-labels",
        "--no-device-plugin",
        "--no-publish",
        "--oneshot",
        "--dry-run",
        "--log-format",
    },
    "gputopo-scheduler": {
        "--kubeconfig",
        "--config",
        "--scheduler-name",
        "--leader-elect",
        "--leader-elect-namespace",
        "--metrics-address",
        "--log-format",
    },
}

# command -> (module behind `<command> run`, its dispatcher)
RUN_MODULES = {
    "gputopo-agent": ("agent.cli.run", "agent.cli.main"),
    "gputopo-scheduler": ("scheduler.cli.run", "scheduler.cli.main"),
}

COMMANDS = [
    pytest.param("gputopo-agent", id="agent"),
    pytest.param("gputopo-scheduler", id="scheduler"),
]

# Flags that must never reach a production manifest: they swap in fakes or stop real work.
TEST_ONLY_FLAGS = {
    "--nvml-fixture",
    "--allow-fake-gpus",
    "--dry-run",
    "--oneshot",
    "--no-publish",
    "--no-device-plugin",
}


def _container_for(objects: tuple[r.Obj, ...], command: str) -> r.Obj:
    found = [
        c
        for o in objects
        for spec in r.pod_specs(o)
        for c in spec["containers"]
        if c.get("command") == [command]
    ]
    assert len(found) == 1, f"one container runs {command}"
    container: r.Obj = found[0]
    return container


@pytest.mark.parametrize("command", COMMANDS)
def test_args_use_only_design_flags(objects, command):
    container = _container_for(objects, command)
    assert container["args"][0] == "run"
    used = set(checks.parse_flags(container["args"]))
    assert used
    assert used - DESIGN_FLAGS[command] == set()
    positional = [a for a in container["args"][1:] if not a.startswith("--")]
    assert positional == []


@pytest.mark.parametrize("command", COMMANDS)
def test_no_test_only_flags_in_manifests(objects, command):
    used = set(checks.parse_flags(_container_for(objects, command)["args"]))
    assert used & TEST_ONLY_FLAGS == set()


def _help_text(command: str, capsys: pytest.CaptureFixture[str]) -> str:
    module, dispatcher = RUN_MODULES[command]
    if importlib.util.find_spec(module) is None:
        pytest.skip(
            f"{module} (`{command} run`) is not in the tree yet; checked against DESIGN §1 only"
        )
    main = importlib.import_module(dispatcher).main
    try:
        code = main(["run", "--help"])
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    assert code in (0, None), out.err
    return f"{out.out}{out.err}"


@pytest.mark.parametrize("command", COMMANDS)
def test_args_are_accepted_by_run_help(objects, command, capsys):
    accepted = checks.flags_in_help(_help_text(command, capsys))
    used = set(checks.parse_flags(_container_for(objects, command)["args"]))
    assert used - accepted == set()


def test_flags_in_help_reads_argparse_output():
    text = (
        "usage: x [-h] [--node-name NODE_NAME]\n"
        "  --host-root PATH   where /sys is read (default: /)\n"
        "  --no-publish\n"
    )
    assert checks.flags_in_help(text) == {"--node-name", "--host-root", "--no-publish"}
