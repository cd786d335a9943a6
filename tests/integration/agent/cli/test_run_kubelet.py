"""`gputopo-agent run` as a process: registers with the kubelet, SIGTERM removes its sockets."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys

import pytest

from deviceplugin.testing.kubelet import KubeletEmulator


def agent(*args: str) -> list[str]:
    return [sys.executable, "-m", "agent.cli", "run", "--node-name", "node-a", *args]


@pytest.fixture
def kubelet():
    with KubeletEmulator() as emulator:
        yield emulator
    shutil.rmtree(emulator.plugin_dir, ignore_errors=True)


def test_sigterm_stops_cleanly_and_removes_the_sockets(kubelet):
    command = agent(
        "--nvml-fixture", "dgx-a100", "--allow-fake-gpus",
        "--device-plugin-dir", str(kubelet.plugin_dir),
        "--no-publish", "--node-labels", "off", "--metrics-address", "127.0.0.1:0",
    )  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        registered = kubelet.wait_for(lambda k: len(k.devices("nvidia.com/gpu")) == 8, 20.0)
        assert registered, "the agent did not register"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "received SIGTERM" in err
    assert sorted(p.name for p in kubelet.plugin_dir.iterdir()) == [
        "kubelet.sock",
        "kubelet_internal_checkpoint",
    ]
    assert kubelet.wait_for(lambda k: not k.connected("nvidia.com/gpu"), 2.0)


@pytest.mark.parametrize(
    ("args", "code", "reason"),
    [
        pytest.param(
            ["--mig-strategy", "sometimes"], 2, "'sometimes' is not one of none, single, mixed",
            id="bad flag",
        ),
        pytest.param(
            ["--nvml-fixture", "dgx-a100-mig", "--allow-fake-gpus", "--mig-strategy", "single"], 1,
            "mig-strategy single: every GPU must be in MIG mode or none", id="single on mixed MIG",
        ),
    ],
)  # fmt: skip
def test_bad_input_exits_non_zero_with_one_line(kubelet, args, code, reason):
    command = agent(*args, "--device-plugin-dir", str(kubelet.plugin_dir), "--no-publish")
    done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == code
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("gputopo-agent run: ")
    assert reason in last
    assert "Traceback" not in done.stderr


def _run_without_a_kubelet(*args: str) -> subprocess.CompletedProcess[str]:
    command = agent("--nvml-fixture", "dgx-a100", "--no-publish", "--node-labels", "off",
                    "--metrics-address", "127.0.0.1:0", *args)  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_fixture_gpus_are_not_registered_with_a_kubelet_unless_allowed(kubelet):
    done = _run_without_a_kubelet("--device-plugin-dir", str(kubelet.plugin_dir))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(
        "gputopo-agent run: invalid configuration: --nvml-fixture dgx-a100: refusing to "
        f"register fake GPUs with the kubelet in {kubelet.plugin_dir}; pass --allow-fake-gpus"
    )
    assert "Traceback" not in done.stderr
    assert kubelet.registrations == []
    assert sorted(p.name for p in kubelet.plugin_dir.iterdir()) == [
        "kubelet.sock",
        "kubelet_internal_checkpoint",
    ]


def test_a_missing_device_plugin_dir_is_named_and_never_created(tmp_path):
    missing = tmp_path / "var" / "lib" / "kubelet" / "device-plugins"
    done = _run_without_a_kubelet("--allow-fake-gpus", "--device-plugin-dir", str(missing))
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        f"gputopo-agent run: device-plugin directory {missing} does not exist: the kubelet "
        "creates it; set --device-plugin-dir to the kubelet's (<root-dir>/device-plugins)"
    )
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "var").exists()
