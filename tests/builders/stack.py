"""The whole stack on one fake API server, each part serving its `/metrics`: a real agent
(`gputopo-agent run`'s services on the dgx-h100 fixture GPUs, the kubelet emulator, a fake
PodResources server) publishing its node's NRT, and a real scheduler placing pods from it."""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.cli import config as agent_config
from agent.cli.run import SERVICE_FACTORIES, open_node, start_services, stop_services
from agent.cli.services import AgentContext
from agent.metrics import AgentMetrics
from agent.nvml.fixture import load_fixture
from deviceplugin.testing.kubelet import KubeletEmulator
from deviceplugin.testing.podresources_server import FakePodResourcesServer
from scheduler.cli.runtime import Runtime
from tests.builders.agentnode import NODE, NODE_CAPACITY
from tests.builders.scheduler import running, wait_for
from tests.builders.topology import allocatable_of
from tests.fakeapi import FakeApiServer

FIXTURE = "dgx-h100"


@dataclass
class Stack:
    fake: FakeApiServer
    agent: AgentContext
    kubelet: KubeletEmulator
    scheduler: Runtime

    @property
    def agent_port(self) -> int:
        port: int = self.agent.services[-1].server.port  # type: ignore[attr-defined]
        return port

    @property
    def scheduler_port(self) -> int:
        return self.scheduler.server.port

    @property
    def fake_nvml(self) -> Any:
        """The fixture's fake pynvml module (`emit_xid`, `set_lost`, ...)."""
        return self.agent.backend.nvml  # type: ignore[attr-defined]


def _agent_config(fake: FakeApiServer, kubelet: KubeletEmulator, podresources: Path) -> Any:
    folder = Path(tempfile.mkdtemp(dir="/tmp"))
    kubeconfig = fake.write_kubeconfig(folder / "kubeconfig")
    argv = [
        "--node-name", NODE, "--nvml-fixture", FIXTURE, "--allow-fake-gpus",
        "--kubeconfig", str(kubeconfig), "--share-record", str(folder / "shares.json"),
        "--device-plugin-dir", str(kubelet.plugin_dir),
        "--pod-resources-socket", str(podresources),
        "--metrics-address", "127.0.0.1:0", "--kubelet-config", "/nonexistent/config.yaml",
    ]  # fmt: skip
    return agent_config.load(argv, {})


@contextmanager
def running_agent(
    fake: FakeApiServer, kubelet: KubeletEmulator, podresources: Path
) -> Iterator[Any]:
    """`gputopo-agent run`'s services on the fixture GPUs, for `NODE` on `fake`; stopped on exit."""
    cfg = _agent_config(fake, kubelet, podresources)
    backend, inventory = open_node(cfg)
    ctx = AgentContext(
        config=cfg,
        backend=backend,
        inventory=inventory,
        stop=threading.Event(),
        metrics=AgentMetrics("test"),
    )
    try:
        start_services(ctx, SERVICE_FACTORIES)
        yield ctx
    finally:
        stop_services(ctx.services)
        backend.close()


@contextmanager
def running_stack(fake: FakeApiServer) -> Iterator[Stack]:
    """Node `NODE` on `fake`, its agent started and its NRT published, then the scheduler
    started and synced. Everything stops on exit."""
    fake.add_node(NODE, capacity=NODE_CAPACITY)
    with ExitStack() as stack:
        kubelet = stack.enter_context(KubeletEmulator())
        podresources = stack.enter_context(FakePodResourcesServer())
        podresources.set_allocatable(allocatable_of(load_fixture(FIXTURE).inventory))
        agent = stack.enter_context(running_agent(fake, kubelet, podresources.socket))
        wait_for(lambda: fake.get_object("noderesourcetopologies", NODE), 10, "the NRT published")
        scheduler = stack.enter_context(running(fake))
        yield Stack(fake=fake, agent=agent, kubelet=kubelet, scheduler=scheduler)
