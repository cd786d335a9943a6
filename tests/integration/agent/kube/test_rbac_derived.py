"""The agent's ClusterRole grants exactly what the agent calls: derived from the fake API server's
authorization checks while the real agent runs `--oneshot` (a process) and `run` with the NRT
publisher and node labels (device plugin, kubelet emulator and PodResources over real gRPC), through
one periodic resync, serving shared GPUs: a share pod through the share lock (its Role in the
scheduler's namespace) and one placed by another scheduler (a Warning Event). `kubectl gputopo` is
left out: it runs with the user's credentials; so are the calls the test makes as the scheduler."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from kubernetes import client

from agent.cli import config as agent_config
from agent.cli.publish_service import TopologyService, metrics_service
from agent.cli.run import device_plugin_service, open_node, start_services, stop_services
from agent.cli.services import AgentContext
from agent.metrics import AgentMetrics
from agent.nvml.fixture import load_fixture
from agent.shares import DEFAULT_SHARE_LOCK_NAMESPACE
from deviceplugin.testing.admission import PodAdmitter
from deviceplugin.testing.kubelet import KubeletEmulator
from tests.builders import rbac
from tests.builders import render as r
from tests.builders.agentnode import NODE
from tests.builders.clock import FakeClock
from tests.builders.scheduler import wait_for
from tests.builders.sharenode import ShareScheduler, share_config, share_container, share_pod
from tests.builders.topology import gpu_pod

ROOT = Path(__file__).resolve().parents[4]
SA = "gputopo-agent"
RESYNC_S = 61.0  # past the publisher's 60 s resync: it reads the NRT and the Node back


@pytest.fixture(scope="module")
def objects() -> tuple[r.Obj, ...]:
    return r.render().objects


def _kubeconfig(fake) -> Path:
    return fake.write_kubeconfig(Path(tempfile.mkdtemp(dir="/tmp")) / "kubeconfig")


def _oneshot(fake, podresources) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUTOPO_", "NODE_NAME"))}
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli", "run", "--oneshot", "--node-name", NODE,
         "--nvml-fixture", "dgx-h100", "--kubeconfig", str(_kubeconfig(fake)),
         "--pod-resources-socket", str(podresources.socket), "--kubelet-config", "/nonexistent"],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def _run(fake, podresources, kubelet: KubeletEmulator) -> None:
    """`run` in this process with a fake clock for the publisher, so that it reaches a resync."""
    folder = Path(tempfile.mkdtemp(dir="/tmp"))
    argv = [
        "--node-name", NODE, "--nvml-fixture", "dgx-h100", "--allow-fake-gpus",
        "--config", str(share_config(folder, replicas=2)),
        "--share-record", str(folder / "state" / "shares.json"),
        "--kubeconfig", str(_kubeconfig(fake)),
        "--device-plugin-dir", str(kubelet.plugin_dir),
        "--pod-resources-socket", str(podresources.socket),
        "--metrics-address", "127.0.0.1:0", "--kubelet-config", "/nonexistent/config.yaml",
    ]  # fmt: skip
    cfg = agent_config.load(argv, {})
    backend, inventory = open_node(cfg)
    ctx = AgentContext(
        config=cfg, backend=backend, inventory=inventory, stop=threading.Event(),
        metrics=AgentMetrics("t"),
    )  # fmt: skip
    clock = FakeClock()
    topology = lambda c: TopologyService(c, clock=clock)  # noqa: E731
    try:
        start_services(ctx, (device_plugin_service, topology, metrics_service))
        writes = len(_patches(fake))
        wait_for(lambda: _first_write(fake, clock, writes), 30, "a first write")
        wait_for(lambda: _resynced(fake, clock), 30, "a resync that reads the NRT back")
        _shares(fake, podresources, kubelet)
    finally:
        stop_services(ctx.services)
        backend.close()


def _shares(fake, podresources, kubelet: KubeletEmulator) -> None:
    """A share pod placed through the lock, then one another scheduler placed."""
    assert kubelet.wait_for(lambda k: len(k.healthy("nvidia.com/gpu")) == 16, 10)
    fake.put_object("namespaces", {"metadata": {"name": DEFAULT_SHARE_LOCK_NAMESPACE}})
    api = fake.api_client()
    scheduler = ShareScheduler(client.CoreV1Api(api), client.CoordinationV1Api(api), node=NODE)
    admitter = PodAdmitter(kubelet, podresources)
    uuid = str(load_fixture("dgx-h100").inventory.gpus[1].uuid)
    placed = scheduler.place(share_pod("shared"), {"main": uuid})
    unplaced = scheduler.bind_unplaced(share_pod("unplaced", share_container("main", None)))
    admitted = admitter.admit(placed) + admitter.admit(unplaced)
    assert [a.error for a in admitted] == [None, None]
    scheduler.wait_released()
    api.close()


def _first_write(fake, clock: FakeClock, writes: int) -> bool:
    """A second of the publisher's time per look: a first attempt that failed (a slow API
    server under load) is retried after its backoff, which a clock that stands still never
    reaches."""
    clock.advance(1.0)
    return writes < len(_patches(fake))


def _patches(fake) -> list:
    return [c for c in fake.authorization_checks if c.verb == "patch"]


def _resynced(fake, clock: FakeClock) -> bool:
    """Move the publisher's clock past the next resync; True once one has read the NRT back (a
    resync that finds the node state changed writes instead, so this may take a few)."""
    clock.advance(RESYNC_S)
    return any(
        c.verb == "get" and c.resource == "noderesourcetopologies"
        for c in fake.authorization_checks
    )


def test_agent_role_grants_exactly_what_the_agent_calls(
    objects, fake_api_with_crd, podresources, inventory
) -> None:
    fake = fake_api_with_crd
    podresources.set_pod(gpu_pod("default", "train-0", str(inventory.gpus[0].uuid)))
    _oneshot(fake, podresources)
    with KubeletEmulator() as kubelet:
        _run(fake, podresources, kubelet)
    assert fake.get_object("noderesourcetopologies", NODE) is not None
    assert fake.get_object("nodes", NODE)["metadata"]["labels"]["nvidia.com/gpu.count"] == "8"
    namespace = rbac.service_account_namespace(objects, SA)
    agent_calls = [c for c in fake.authorization_checks if c.user == "fake-token"]
    used = rbac.used_permissions(agent_calls, namespace, DEFAULT_SHARE_LOCK_NAMESPACE)
    granted = rbac.effective_permissions(objects, SA, namespace)
    assert rbac.describe(granted) == rbac.describe(used)  # no more, no less
