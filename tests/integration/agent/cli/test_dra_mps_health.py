"""DRA shares and MPS health, as `gputopo-agent run` wires them (DESIGN §12, §14): the device
plugin's MPS watch exists for DRA shares alone, and while its one reading of the status file says
MPS does not serve, the DRA driver taints every share (the whole GPUs stay healthy)."""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.cli import config as agent_config
from agent.cli.dra_service import DraService, dra_service
from agent.cli.run import device_plugin_service, open_node
from agent.cli.services import AgentContext
from agent.mps.layout import MpsLayout
from agent.mps.status import DaemonStatus, MpsStatus, write_status
from tests.builders.sharenode import share_config

NODE = "node-a"


class Node:
    """The agent's device plugin and DRA driver, built (not started) from a command line."""

    def __init__(self, folder: Path, mode: str, dra_gpus: str) -> None:
        self.mps_root = folder / "mps"
        self.mps_root.mkdir()
        argv = [
            "--node-name", NODE, "--nvml-fixture", "dgx-a100", "--allow-fake-gpus",
            "--config", str(share_config(folder, mode=mode)), "--mps-root", str(self.mps_root),
            "--dra-gpus", dra_gpus, "--device-plugin-dir", str(folder / "dp"),
            "--dra-registry-dir", str(folder / "reg"), "--dra-plugins-dir", str(folder / "plugins"),
            "--kubeconfig", str(folder / "missing"), "--host-root", str(folder / "host"),
        ]  # fmt: skip
        cfg = agent_config.load(argv, {})
        self.backend, inventory = open_node(cfg)
        self.ctx = AgentContext(
            config=cfg, backend=self.backend, inventory=inventory, stop=threading.Event()
        )
        self.plugin = device_plugin_service(self.ctx)
        service = dra_service(self.ctx)
        assert isinstance(service, DraService)
        self.dra = service

    def mps(self, *, up: bool) -> None:
        daemons = (DaemonStatus(uid=0, up=up, reason="" if up else "exited"),)
        status = MpsStatus(written_at=time.time(), gpus=(), daemons=daemons)
        write_status(MpsLayout(self.mps_root).status_file, status)


@pytest.fixture
def folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(dir="/tmp") as root:
        yield Path(root)


def test_with_every_shared_gpu_on_dra_mps_is_watched_and_its_outage_taints_the_shares(folder):
    node = Node(folder, "mps", "all")
    try:
        assert node.ctx.device_plugin is not None
        assert not node.ctx.device_plugin.device_state.view().resources  # nothing shared there
        watch = node.ctx.device_plugin.mps_watch
        assert watch is not None
        watch.poll()  # no status file: MPS is not running
        why = node.dra.unhealthy()
        assert sorted(why) == [d.name for d in node.dra.devices()]
        assert all("MPS is not running" in reason for reason in why.values())
        node.mps(up=True)
        watch.poll()
        assert node.dra.unhealthy() == {}
        node.mps(up=False)
        watch.poll()
        assert set(node.dra.unhealthy().values()) == {"MPS control daemon down for uid 0 (exited)"}
    finally:
        node.backend.close()


def test_under_time_slicing_no_watch_and_no_share_is_tainted(folder):
    node = Node(folder, "timeSlicing", "6,7")
    try:
        assert node.ctx.device_plugin is not None
        assert node.ctx.device_plugin.mps_watch is None
        assert all(d.shared for d in node.dra.devices())
        assert node.dra.unhealthy() == {}
    finally:
        node.backend.close()
