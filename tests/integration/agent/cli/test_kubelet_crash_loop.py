"""Issue 23 item 2: a kubelet that restarts every 8-12 s, on a fake clock.

The agent's topology service (PodResources client, `StateReader`, `RestartHold`, `Publisher`, the
real kubernetes client against the fake API server) runs on a `FakeClock` and is stepped as its
loop would step it. The fake PodResources server restarts every 8-12 s: down for 0.5-1.5 s, then a
new socket whose `List` answers no pods for 1-2 s; the device-plugin `kubelet.sock` is re-created
with it. A CPU-only pod is replaced every 1.5 s, so the kubelet's view never settles and every
hold runs into its cap, the way it did on the real kubelet; GPU pods come and go while the kubelet
is synced. After every step the NRT in the fake API server may not say more GPUs are free than are.
"""

from __future__ import annotations

import logging
import random
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agent.cli import config as agent_config
from agent.cli.publish_service import TopologyService
from agent.cli.run import open_node
from agent.cli.services import AgentContext
from agent.nrt import PLURAL
from deviceplugin.testing.podresources_server import FakePodResourcesServer
from tests.builders.agentnode import NODE, gpu_figures, serve_socket
from tests.builders.clock import FakeClock
from tests.builders.topology import allocatable_of, gpu_pod

RUN_S = 180.0
QUIET_S = 15.0  # at the end: no restart, no churn
CHURN_S = 1.5
GPU_CHANGE_S = 7.0


@dataclass
class Kubelet:
    """The fake kubelet as a schedule on the fake clock; `free` is the true free-GPU count."""

    server: FakePodResourcesServer
    plugin_socket: Path
    uuids: list[str]
    rng: random.Random
    clock: FakeClock
    held: dict[str, str] = field(default_factory=dict)  # GPU pod name -> GPU UUID
    next_restart: float = 0.0
    up_at: float | None = None  # while down: when the new kubelet serves
    restarts: int = 0
    churned: int = 0
    next_churn: float = 0.0
    next_gpu_change: float = 0.0

    @property
    def free(self) -> int:
        return len(self.uuids) - len(self.held)

    def tick(self, quiet: bool) -> None:
        now = self.clock()
        if self.up_at is not None and now >= self.up_at:
            self.up_at = None
            serve_socket(self.plugin_socket)
            self.server.start(unsynced_s=self.rng.uniform(1.0, 2.0))
        elif self.up_at is None and now >= self.next_restart and not quiet:
            self.server.stop()
            self.restarts += 1
            self.up_at = now + self.rng.uniform(0.5, 1.5)
            self.next_restart = now + self.rng.uniform(8.0, 12.0)
        if now >= self.next_churn and not quiet:
            self.server.remove_pod("web", f"batch-{self.churned}")
            self.churned += 1
            self.server.set_pod(gpu_pod("web", f"batch-{self.churned}"))
            self.next_churn = now + CHURN_S
        if now >= self.next_gpu_change and self.up_at is None and self.server.synced:
            self._change_gpu_pods()
            self.next_gpu_change = now + GPU_CHANGE_S

    def _change_gpu_pods(self) -> None:
        """A GPU pod ends, or a new one starts on a free GPU (2 to 6 GPUs held)."""
        if len(self.held) >= 6 or (len(self.held) > 2 and self.rng.random() < 0.5):
            name = self.rng.choice(sorted(self.held))
            del self.held[name]
            self.server.remove_pod("ml", name)
            return
        uuid = self.rng.choice([u for u in self.uuids if u not in self.held.values()])
        name = f"train-{uuid[-4:]}-{self.clock():.0f}"
        self.held[name] = uuid
        self.server.set_pod(gpu_pod("ml", name, uuid))


@pytest.fixture
def service(fake_api_with_crd):
    """(TopologyService on a fake clock, the clock, its PodResources server, the device-plugin
    dir, the GPU UUIDs)."""
    clock = FakeClock()
    folder = Path(tempfile.mkdtemp(dir="/tmp"))
    kubeconfig = fake_api_with_crd.write_kubeconfig(folder / "kc")
    argv = [
        "--node-name", NODE, "--nvml-fixture", "dgx-h100", "--no-device-plugin",
        "--kubeconfig", str(kubeconfig), "--device-plugin-dir", str(folder),
        "--pod-resources-socket", str(folder / "podres.sock"),
        "--kubelet-config", "/nonexistent/config.yaml",
    ]  # fmt: skip
    cfg = agent_config.load(argv, {})
    backend, inventory = open_node(cfg)
    ctx = AgentContext(config=cfg, backend=backend, inventory=inventory, stop=threading.Event())
    with FakePodResourcesServer(cfg.pod_resources_socket, clock=clock) as server:
        server.set_allocatable(allocatable_of(inventory))
        serve_socket(folder / "kubelet.sock")
        topology = TopologyService(ctx, clock=clock)
        try:
            yield topology, clock, server, folder, [str(g.uuid) for g in inventory.gpus]
        finally:
            topology.stop()
            backend.close()


@pytest.mark.parametrize("seed", [23, 11])
def test_a_crash_looping_kubelet_never_makes_the_nrt_say_more_gpus_are_free(
    service, fake_api_with_crd, caplog, seed: int
) -> None:
    caplog.set_level(logging.INFO, logger="agent.restart_hold")
    topology, clock, server, folder, uuids = service
    kubelet = Kubelet(server, folder / "kubelet.sock", uuids, random.Random(seed), clock)
    for i in range(4):
        kubelet.held[f"train-{i}"] = uuids[i]
        server.set_pod(gpu_pod("ml", f"train-{i}", uuids[i]))
    start = clock()
    kubelet.next_restart = start + 5.0
    over, samples, last = [], 0, None
    while clock() < start + RUN_S + QUIET_S:
        kubelet.tick(quiet=clock() >= start + RUN_S)
        delay = topology.publisher.step()
        obj = fake_api_with_crd.get_object(PLURAL, NODE)
        if obj is not None:
            samples, last = samples + 1, gpu_figures(obj)
            if max(last) > kubelet.free:
                over.append((round(clock() - start, 1), last, kubelet.free))
        clock.advance(delay)
    messages = [r.getMessage() for r in caplog.records]
    print(f"{samples} samples, {kubelet.restarts} restarts, over the true figure: {len(over)}")
    assert over == [], f"published more free GPUs than there are: {over[:5]}"
    assert samples >= RUN_S / topology.publisher.settings.poll_s
    assert kubelet.restarts >= RUN_S / 12
    assert last == (kubelet.free, kubelet.free), "the quiet end never published the truth"
    assert sum("cap now counts from here" in m for m in messages) >= 3, "no restart in a hold"
    assert any(", hold ended" in m for m in messages), "no hold ran into its cap"
