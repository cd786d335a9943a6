"""Issue 11 item 3: after a kubelet restart the NRT never says more GPUs are free than are.

The agent runs in-process with every service (device plugin beside the kubelet emulator, the
topology publisher over the real kubernetes client against the fake API server). Each "kubelet
restart" re-creates the device-plugin `kubelet.sock` and restarts the fake PodResources server,
whose `List` then answers no pods for a second, as the real kubelet does. A watch records every
NRT the agent writes and a poller reads it every 50 ms; no sample may exceed the true figure.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kubernetes import client, watch

from agent.cli import config as agent_config
from agent.cli.run import SERVICE_FACTORIES, open_node, start_services, stop_services
from agent.cli.services import AgentContext
from agent.metrics import AgentMetrics
from deviceplugin.testing.kubelet import KubeletEmulator
from tests.builders.agentnode import NODE, gpu_figures
from tests.builders.commands import wait_for
from tests.builders.topology import gpu_pod

GROUP, VERSION, PLURAL = "topology.node.k8s.io", "v1alpha2", "noderesourcetopologies"
HOLD_LOGGER = "agent.restart_hold"


@dataclass
class Samples:
    """What the agent published, as `(time.time(), gpusFree, zone sum, how)` rows."""

    rows: list[tuple[float, int, int, str]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def watch(self, api_client: client.ApiClient) -> None:
        custom, since = client.CustomObjectsApi(api_client), {}
        while not self.stop.is_set():
            stream = watch.Watch().stream(
                custom.list_cluster_custom_object, GROUP, VERSION, PLURAL, timeout_seconds=1,
                **since,
            )  # fmt: skip
            for event in stream:
                obj = event["object"]
                since = {"resource_version": obj["metadata"]["resourceVersion"]}
                self.rows.append((time.time(), *gpu_figures(obj), "watch"))

    def poll(self, fake) -> None:
        while not self.stop.wait(0.05):
            obj = fake.get_object(PLURAL, NODE)
            if obj is not None:
                self.rows.append((time.time(), *gpu_figures(obj), "poll"))

    def last(self) -> int | None:
        return self.rows[-1][1] if self.rows else None


@dataclass
class Truth:
    """The true free-GPU count over time. A decrease counts from when the agent published it:
    until then the old (higher) figure is the bound a sample is held to."""

    changes: list[tuple[float, int]] = field(default_factory=list)

    def set(self, value: int) -> None:
        self.changes.append((time.time(), value))

    def bound(self, rows: list[tuple[float, int, int, str]]) -> list[tuple[float, int]]:
        bounds, previous = [], None
        for at, value in self.changes:
            if previous is not None and value < previous:
                at = next((t for t, free, _, _ in rows if t >= at and free <= value), float("inf"))
            bounds.append((at, value))
            previous = value
        return bounds

    def exceeded(self, rows: list[tuple[float, int, int, str]]) -> list[tuple[float, int, int]]:
        bounds = sorted(self.bound(rows))
        out = []
        for at, free, zones, _ in rows:
            in_effect = [v for t, v in bounds if t <= at]
            allowed = in_effect[-1] if in_effect else bounds[0][1]
            if max(free, zones) > allowed:
                out.append((at, free, allowed))
        return out


def hold_lines(caplog, word: str) -> list[logging.LogRecord]:
    return [r for r in list(caplog.records) if r.name == HOLD_LOGGER and word in r.getMessage()]


@pytest.fixture
def agent(fake_api_with_crd, podresources):
    kubeconfig = fake_api_with_crd.write_kubeconfig(Path(tempfile.mkdtemp(dir="/tmp")) / "kc")
    with KubeletEmulator() as kubelet:
        argv = [
            "--node-name", NODE, "--nvml-fixture", "dgx-h100", "--allow-fake-gpus",
            "--kubeconfig", str(kubeconfig),
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
        try:
            start_services(ctx, SERVICE_FACTORIES)
            yield kubelet, inventory
        finally:
            stop_services(ctx.services)
            backend.close()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_no_sample_exceeds_the_true_free_gpus_across_kubelet_restarts(
    agent, fake_api_with_crd, podresources, caplog
) -> None:
    caplog.set_level(logging.INFO, logger=HOLD_LOGGER)
    kubelet, inventory = agent
    fake, uuid = fake_api_with_crd, [str(g.uuid) for g in inventory.gpus]
    truth, samples = Truth(), Samples()
    for i in (0, 1):
        podresources.set_pod(gpu_pod("ml", f"train-{i}", uuid[i]))
    truth.set(6)
    assert wait_for(lambda: _published(fake) == 6, 20.0), "the agent never published 6 free"
    api_client = fake.api_client()
    threads = [
        threading.Thread(target=samples.watch, args=(api_client,), daemon=True),
        threading.Thread(target=samples.poll, args=(fake,), daemon=True),
    ]
    for thread in threads:
        thread.start()

    def until(predicate, timeout_s: float) -> None:
        """Wait; without a hold the damage is already in the samples: end the run early."""
        wait_for(lambda: predicate() or truth.exceeded(samples.rows), timeout_s)

    def restart(n: int, *, then=lambda: None) -> None:
        kubelet.restart()
        podresources.restart(down_s=0.3, unsynced_s=1.0)
        then()
        until(lambda: len(hold_lines(caplog, "settled")) >= n, 30.0)

    def train_1_ends() -> None:  # a pod really ends while the kubelet re-syncs
        podresources.remove_pod("ml", "train-1")
        truth.set(7)

    try:
        restart(1)  # nothing changes on the node
        restart(2, then=train_1_ends)
        until(lambda: samples.last() == 7, 10.0)
        kubelet.restart()
        podresources.restart(down_s=0.3, unsynced_s=1.0)
        until(lambda: len(hold_lines(caplog, "holding")) >= 3, 10.0)
        until(lambda: podresources.synced, 10.0)
        podresources.set_pod(gpu_pod("ml", "train-2", uuid[2]))  # a decrease during the hold
        truth.set(6)
        decreased = time.time()
        until(lambda: len(hold_lines(caplog, "settled")) >= 3, 30.0)
        restart(4)
        for name in ("train-0", "train-2"):
            podresources.remove_pod("ml", name)
        truth.set(8)
        freed = time.time()
        until(lambda: samples.last() == 8, 10.0)
    finally:
        samples.stop.set()
        for thread in threads:
            thread.join(timeout=5)
        api_client.close()

    over = truth.exceeded(samples.rows)
    counts = {how: sum(1 for r in samples.rows if r[3] == how) for how in ("watch", "poll")}
    print(f"samples {counts}, over the true figure: {len(over)}")
    assert over == [], f"published more free GPUs than there are: {over[:5]} ({counts})"
    assert counts["poll"] >= 100
    assert samples.last() == 8, "pods that ended were never freed"
    assert any(free == 7 for _, free, _, _ in samples.rows), "the GPU freed in a restart never was"
    assert podresources.restarts == 4
    starts, ends = hold_lines(caplog, "holding"), hold_lines(caplog, "settled")
    assert (len(starts), len(ends)) == (4, 4)
    decrease = next(t for t, free, _, _ in samples.rows if t >= decreased and free == 6)
    assert decrease < ends[2].created, "a decrease waited for the hold"
    published_free = next(t for t, free, _, _ in samples.rows if t >= freed and free == 8)
    assert published_free - freed < 5.0, "an increase with no kubelet restart was held"


def _published(fake) -> int | None:
    obj = fake.get_object(PLURAL, NODE)
    return None if obj is None else gpu_figures(obj)[0]
