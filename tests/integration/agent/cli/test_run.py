"""`gputopo-agent run` with every service: device plugin (kubelet emulator), publisher, metrics."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from agent.nrt import decode
from deviceplugin.testing.kubelet import KubeletEmulator
from tests.builders.agentnode import NODE
from tests.builders.commands import empty_dir, run_command
from tests.builders.stack import running_agent

ROOT = Path(__file__).resolve().parents[4]


def _wait(predicate, timeout_s: float = 5.0) -> bool:
    tick = threading.Event()
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        tick.wait(0.02)
    return True


def _scrape(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def test_all_services_publish_serve_metrics_and_react_to_health(
    fake_api_with_crd, podresources
) -> None:
    fake = fake_api_with_crd
    with (
        KubeletEmulator() as kubelet,
        running_agent(fake, kubelet, podresources.socket) as ctx,
    ):
        services, inventory = ctx.services, ctx.inventory
        assert [s.name for s in services] == ["device-plugin", "topology-publisher", "metrics"]
        assert _wait(lambda: fake.get_object("noderesourcetopologies", NODE) is not None)
        port = services[-1].server.port
        assert _wait(lambda: _scrape(port, "/readyz")[0] == 200)
        assert ctx.device_plugin is not None
        bad = str(inventory.gpus[3].uuid)
        started = time.monotonic()
        fake_nvml = ctx.backend.nvml  # type: ignore[attr-defined]  # the fixture's fake pynvml
        fake_nvml.set_lost(3)  # a reset-required Xid on a GPU that stays lost: Unhealthy
        fake_nvml.emit_xid(3, 79)
        assert _wait(
            lambda: (
                not decode(fake.get_object("noderesourcetopologies", NODE))
                .availability.gpus[3]
                .healthy
            ),
            1.0,
        )
        assert time.monotonic() - started < 1.0
        assert _wait(lambda: kubelet.connected("nvidia.com/gpu"))
        kubelet.allocate("nvidia.com/gpu", [str(inventory.gpus[0].uuid)])
        services[-1].refresh()
        status, body = _scrape(port, "/metrics")
        assert status == 200
        labels = f'gpu="3",model="NVIDIA H100 80GB HBM3",uuid="{bad}"'
        assert f"gputopo_agent_gpu_healthy{{{labels}}} 0.0" in body
        assert 'rpc_duration_seconds_count{code="OK",method="Allocate"' in body
        assert "gputopo_agent_publish_writes_total 2.0" in body


def test_counters_exist_at_zero_so_that_a_first_xid_is_an_increase(
    fake_api_with_crd, podresources
) -> None:
    """Prometheus' increase() needs a sample before the first event: a GPU's Xid 74 count and a
    resource's failed registrations are 0 from the start, not absent."""
    with (
        KubeletEmulator() as kubelet,
        running_agent(fake_api_with_crd, kubelet, podresources.socket) as ctx,
    ):
        sample = ctx.metrics.registry.get_sample_value
        xid = {"uuid": str(ctx.inventory.gpus[3].uuid), "xid": "74"}
        assert sample("gputopo_agent_xid_events_total", xid) == 0
        assert _wait(lambda: kubelet.connected("nvidia.com/gpu"))
        refused = {"resource": "nvidia.com/gpu", "result": "error"}
        assert sample("gputopo_agent_deviceplugin_registrations_total", refused) == 0
        ctx.backend.nvml.emit_xid(3, 74)  # type: ignore[attr-defined]  # the fake pynvml
        assert _wait(lambda: sample("gputopo_agent_xid_events_total", xid) == 1)


def _agent(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUTOPO_", "NODE_NAME"))}
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", "run", *args],
        capture_output=True, text=True, timeout=60, cwd=ROOT, env=env,
    )  # fmt: skip


def test_oneshot_publishes_once_without_a_kubelet(fake_api_with_crd) -> None:
    fake = fake_api_with_crd
    kubeconfig = fake.write_kubeconfig(Path(tempfile.mkdtemp(dir="/tmp")) / "kubeconfig")
    missing = Path(tempfile.mkdtemp(dir="/tmp")) / "kubelet.sock"
    done = _agent(
        "--oneshot", "--node-name", NODE, "--nvml-fixture", "dgx-a100-mig",
        "--kubeconfig", str(kubeconfig), "--pod-resources-socket", str(missing),
        "--kubelet-config", "/nonexistent", "--topology-manager-policy", "single-numa-node",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    decoded = decode(fake.get_object("noderesourcetopologies", NODE))
    assert decoded.availability.source == "none"
    assert decoded.topology_manager_policy == "single-numa-node"
    assert fake.get_object("nodes", NODE)["metadata"]["labels"]["nvidia.com/gpu.count"] == "8"


def test_oneshot_dry_run_prints_and_writes_nothing(fake_api_with_crd) -> None:
    missing = Path(tempfile.mkdtemp(dir="/tmp")) / "kubelet.sock"
    done = _agent("--oneshot", "--dry-run", "--node-name", "n1", "--nvml-fixture", "single-t4",
                  "--pod-resources-socket", str(missing), "--node-labels", "off")  # fmt: skip
    assert done.returncode == 0, done.stderr
    (doc,) = list(yaml.safe_load_all(done.stdout))
    assert decode(doc).inventory.gpus[0].product == "Tesla T4"
    assert fake_api_with_crd.writes() == []


def test_dry_run_says_it_would_update_labels(fake_api_with_crd) -> None:
    missing = Path(tempfile.mkdtemp(dir="/tmp")) / "kubelet.sock"
    done = _agent("--oneshot", "--dry-run", "--node-name", "n1", "--nvml-fixture", "single-t4",
                  "--pod-resources-socket", str(missing))  # fmt: skip
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if "labels" in line]
    assert "node n1 would update labels (--dry-run): ['nvidia.com/cuda.driver-version.full'" in line
    assert "updated" not in line
    assert fake_api_with_crd.writes() == []


@pytest.mark.parametrize(
    ("rename", "product"),
    [("", "Tesla-T4-SHARED"), ("    renameByDefault: true\n", "Tesla-T4")],
)
def test_oneshot_labels_the_configured_time_slicing_as_gfd_does(
    fake_api_with_crd, rename, product
) -> None:
    """The config file's sharing reaches the node's labels through the real client: replicas,
    strategy and GFD's `-SHARED` product (not when the replicas go under another name)."""
    fake = fake_api_with_crd
    folder = empty_dir()
    config = folder / "config.yaml"
    config.write_text(
        f"version: v1\nsharing:\n  timeSlicing:\n{rename}    resources:\n"
        "    - name: nvidia.com/gpu\n      replicas: 4\n"
    )
    done = _agent(
        "--oneshot", "--node-name", NODE, "--nvml-fixture", "single-t4", "--config", str(config),
        "--kubeconfig", str(fake.write_kubeconfig(folder / "kubeconfig")),
        "--pod-resources-socket", str(folder / "kubelet.sock"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    labels = fake.get_object("nodes", NODE)["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == product
    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert labels["nvidia.com/cuda.driver-version.full"] == "535.104.05"
    assert labels["nvidia.com/cuda.runtime-version.full"] == "12.2"


def test_oneshot_dry_run_previews_the_configured_time_slicing(fake_api_with_crd) -> None:
    """--oneshot starts no device plugin; its preview is still what the running agent publishes."""
    folder = empty_dir()
    config = folder / "config.yaml"
    config.write_text(
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        "    - name: nvidia.com/gpu\n      replicas: 4\n"
    )
    done = run_command(
        "gputopo-agent", "run", "--oneshot", "--dry-run", "--node-name", "n1",
        "--nvml-fixture", "single-t4", "--config", str(config), "--node-labels", "off",
        "--pod-resources-socket", str(folder / "kubelet.sock"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (doc,) = list(yaml.safe_load_all(done.stdout))
    (gpu,) = decode(doc).availability.gpus
    assert (str(gpu.sharing), gpu.shares) == ("timeSlicing", 4)
    assert fake_api_with_crd.writes() == []
