"""Issue 11 item 9: `gputopo-agent run` never serves the kubelet and then dies.

The real agent process, with node labels on (the default): without Kubernetes credentials it keeps
its device-plugin sockets and answers the kubelet emulator, logs the failure once and says it in
`/readyz`; without a `kubelet.sock` it logs once that it waits for the kubelet, and where.
"""

from __future__ import annotations

import socket
import subprocess

import pytest

from deviceplugin.kubelet_api import KUBELET_SOCKET
from deviceplugin.testing.kubelet import KubeletEmulator
from tests.builders.agentnode import NODE
from tests.builders.commands import AgentProcess, empty_dir, readyz, wait_for

CREDENTIALS = "no usable Kubernetes credentials"
PLURAL = "noderesourcetopologies"


@pytest.mark.parametrize(
    "credentials",
    [
        pytest.param(["--kubeconfig", "/nonexistent/kubeconfig"], id="missing kubeconfig file"),
        pytest.param([], id="not in a cluster, no ~/.kube/config"),
    ],
)
def test_without_credentials_it_keeps_serving_the_kubelet(credentials) -> None:
    missing_podresources = empty_dir() / "kubelet.sock"
    with KubeletEmulator() as kubelet:
        agent = AgentProcess(
            "--nvml-fixture", "dgx-a100", "--allow-fake-gpus",
            "--device-plugin-dir", str(kubelet.plugin_dir),
            "--pod-resources-socket", str(missing_podresources),
            "--metrics-address", "127.0.0.1:0", "--kubelet-config", "/nonexistent/config.yaml",
            *credentials, home=empty_dir(),
        )  # fmt: skip
        try:
            port = agent.port()
            registered = kubelet.wait_for(lambda k: len(k.devices("nvidia.com/gpu")) == 8, 30.0)
            assert registered, "\n".join(agent.lines)
            with pytest.raises(subprocess.TimeoutExpired):
                agent.proc.wait(timeout=4.0)  # still running seconds after the API side failed
            assert kubelet.connected("nvidia.com/gpu")
            device = sorted(kubelet.devices("nvidia.com/gpu"))[0]
            response = kubelet.allocate("nvidia.com/gpu", [device])
            assert len(response.container_responses) == 1
            status, body = readyz(port)
        finally:
            code = agent.stop()
    assert code == 0, "\n".join(agent.lines)
    assert status == 503
    assert body.startswith("not ready: NodeResourceTopology not published yet: " + CREDENTIALS)
    warnings = [line for line in agent.logged(CREDENTIALS) if " WARNING " in line]
    assert len(warnings) == 1, agent.lines  # retried with backoff, logged once
    assert len(agent.logged("stopped serving nvidia.com/gpu")) == 1  # only at SIGTERM


def test_without_a_kubelet_it_says_it_waits_and_where(fake_api_with_crd) -> None:
    kubeconfig = fake_api_with_crd.write_kubeconfig(empty_dir() / "kubeconfig")
    plugin_dir = empty_dir()
    kubelet_socket = plugin_dir / KUBELET_SOCKET
    agent = AgentProcess(
        "--nvml-fixture", "dgx-a100", "--allow-fake-gpus", "--device-plugin-dir", str(plugin_dir),
        "--pod-resources-socket", str(empty_dir() / "kubelet.sock"),
        "--metrics-address", "127.0.0.1:0", "--kubelet-config", "/nonexistent/config.yaml",
        "--kubeconfig", str(kubeconfig), home=empty_dir(),
    )  # fmt: skip
    try:
        port = agent.port()
        assert wait_for(lambda: agent.logged("waiting for the kubelet"), 10.0), agent.lines
        published = wait_for(lambda: fake_api_with_crd.get_object(PLURAL, NODE), 20.0)
        assert published, agent.lines
        # The object is stored a moment before the agent records its own write: wait for the
        # one reason left, then read the answer the test asserts on.
        waiting_only = (503, f"not ready: waiting for the kubelet: no {kubelet_socket}\n")
        wait_for(lambda: readyz(port) == waiting_only, 10.0)
        status, body = readyz(port)
        with KubeletEmulator(plugin_dir) as kubelet:
            registered = kubelet.wait_for(lambda k: len(k.devices("nvidia.com/gpu")) == 8, 30.0)
            ready = wait_for(lambda: readyz(port)[0] == 200, 10.0)
    finally:
        code = agent.stop()
    assert code == 0, "\n".join(agent.lines)
    assert (status, body) == (503, f"not ready: waiting for the kubelet: no {kubelet_socket}\n")
    (waiting,) = agent.logged("waiting for the kubelet")
    assert f"no {kubelet_socket} yet" in waiting
    assert registered, agent.lines
    assert ready


def test_a_service_that_cannot_be_built_refuses_the_start_before_serving() -> None:
    with socket.socket() as taken, KubeletEmulator() as kubelet:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        agent = AgentProcess(
            "--nvml-fixture", "dgx-a100", "--allow-fake-gpus",
            "--device-plugin-dir", str(kubelet.plugin_dir),
            "--pod-resources-socket", str(empty_dir() / "kubelet.sock"), "--dry-run",
            "--metrics-address", address, "--kubelet-config", "/nonexistent/config.yaml",
            home=empty_dir(),
        )  # fmt: skip
        agent.proc.wait(timeout=30)
        code = agent.stop()
    assert code == 1
    assert agent.lines[-1].startswith(f"gputopo-agent run: --metrics-address {address}: ")
    assert "Address already in use" in agent.lines[-1]
    assert kubelet.registrations == []
    assert not agent.logged("serving nvidia.com/gpu")  # no device-plugin socket, ever
