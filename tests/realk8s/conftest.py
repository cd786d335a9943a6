"""Fixtures of the real-Kubernetes tier: one cluster for the session, the agent and the scheduler
as real processes under their ServiceAccounts. Skipped, with the reason, where the tier cannot
run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.builders.commands import empty_dir
from tests.builders.process import CommandProcess
from tests.builders.realk8s import Cluster, unavailable, wait_until

AGENT_CONFIG = """version: v1
sharing:
  timeSlicing:
    renameByDefault: true
    resources:
    - name: nvidia.com/gpu
      replicas: 4
      devices: [6, 7]
"""


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    if why := unavailable():
        pytest.skip(why)
    running = Cluster()
    running.start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="session")
def agent(cluster: Cluster) -> Iterator[CommandProcess]:
    """The agent on the real node: dgx-h100's 8 fixture GPUs, 6 whole and 2 time-sliced (x4)."""
    config_file = Path(empty_dir()) / "agent.yaml"
    config_file.write_text(AGENT_CONFIG)
    proc = cluster.start_agent(config_file=config_file)
    proc.port(timeout_s=60)
    cluster.node_agent = proc
    try:
        wait_until(
            lambda: (
                cluster.node_allocatable("nvidia.com/gpu") == 6
                and cluster.node_allocatable("nvidia.com/gpu.shared") == 8
            ),
            60,
            "the kubelet to advertise the agent's GPUs",
        )
    except AssertionError as exc:
        raise AssertionError(_not_advertised(cluster, proc, str(exc))) from None
    yield proc
    cluster.node_agent = None
    proc.stop()


def _not_advertised(cluster: Cluster, agent: CommandProcess, why: str) -> str:
    """What a session needs to tell why the kubelet did not advertise the agent's GPUs: the
    Node's figures, the agent's log and the kubelet's device-manager lines."""
    shown = {
        name: (cluster.node_allocatable(name), cluster.node_capacity(name))
        for name in ("nvidia.com/gpu", "nvidia.com/gpu.shared")
    }
    agent_lines = "\n".join(agent.lines[-40:])
    kubelet_lines = cluster.log_tail(
        "kubelet",
        40,
        containing=("device plugin", "nvidia.com", "registration", "Registration", "kubelet.sock"),
    )
    return (
        f"{why}\nthe Node's (allocatable, capacity): {shown}"
        f"\nagent exit status: {agent.proc.poll()}; its last lines:\n{agent_lines}"
        f"\nthe kubelet's device-manager lines:\n{kubelet_lines}"
    )


@pytest.fixture(scope="session")
def scheduler(cluster: Cluster) -> Iterator[CommandProcess]:
    proc = cluster.start_scheduler()
    proc.port(timeout_s=60)
    yield proc
    proc.stop()
