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
    wait_until(
        lambda: (
            cluster.node_allocatable("nvidia.com/gpu") == 6
            and cluster.node_allocatable("nvidia.com/gpu.shared") == 8
        ),
        60,
        "the kubelet to advertise the agent's GPUs",
    )
    yield proc
    cluster.node_agent = None
    proc.stop()


@pytest.fixture(scope="session")
def scheduler(cluster: Cluster) -> Iterator[CommandProcess]:
    proc = cluster.start_scheduler()
    proc.port(timeout_s=60)
    yield proc
    proc.stop()
