"""Topology-publisher benchmark (not a test): the real agent process against fake kubelet and API.

Starts, in this process, the fake API server (real HTTP), the fake PodResources server (real unix
socket) and the kubelet device-plugin emulator; then runs `gputopo-agent run` as a subprocess with
the device plugin, publisher and metrics on a fixture. Measures:

1. publish latency: from a PodResources change (a pod takes or frees a GPU) to the changed
   NodeResourceTopology being stored by the API server, p50/p99/max (target < 1 s);
2. idle CPU: the agent process's CPU over a quiet period, in % of one core (target < 1%), and the
   writes the API server saw meanwhile (target 0).

    .venv/bin/python bench/publish_bench.py [--samples 40] [--idle-seconds 20] [--fixture dgx-h100]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.nrt import decode  # noqa: E402
from agent.nvml.fixture import load_fixture  # noqa: E402
from deviceplugin.testing.kubelet import KubeletEmulator  # noqa: E402
from deviceplugin.testing.podresources_server import FakePodResourcesServer  # noqa: E402
from tests.builders.topology import allocatable_of, gpu_pod  # noqa: E402
from tests.fakeapi import FakeApiServer  # noqa: E402

NODE = "bench-node"


def wait_until(
    predicate: Callable[[], bool], timeout_s: float, tick_s: float = 0.002
) -> float | None:
    """Seconds until `predicate()` held, or None on timeout."""
    start = time.monotonic()
    ticker = threading.Event()
    while time.monotonic() - start < timeout_s:
        if predicate():
            return time.monotonic() - start
        ticker.wait(tick_s)
    return None


def gpu_free(fake: FakeApiServer, index: int) -> int | None:
    obj = fake.get_object("noderesourcetopologies", NODE)
    if obj is None:
        return None
    return decode(obj).gpu_counts(index)["nvidia.com/gpu"].available


def start_agent(
    fake: FakeApiServer, podres: FakePodResourcesServer, plugin_dir: Path, fixture: str
) -> subprocess.Popen[bytes]:
    folder = Path(tempfile.mkdtemp(prefix="publish-bench-", dir="/tmp"))
    kubeconfig = fake.write_kubeconfig(folder / "kubeconfig")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUTOPO_") and k != "NODE_NAME"}
    args = [
        sys.executable, "-m", "agent.cli", "run", "--node-name", NODE, "--nvml-fixture", fixture,
        "--allow-fake-gpus",
        "--kubeconfig", str(kubeconfig), "--pod-resources-socket", str(podres.socket),
        "--metrics-address", "127.0.0.1:0",
        "--kubelet-config", str(folder / "absent-kubelet-config.yaml"),
    ]  # fmt: skip
    args += ["--device-plugin-dir", str(plugin_dir)] if plugin_dir else ["--no-device-plugin"]
    log = (folder / "agent.log").open("wb")
    return subprocess.Popen(args, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def measure_latency(
    fake: FakeApiServer, podres: FakePodResourcesServer, fixture: str, samples: int
) -> list[float]:
    inventory = load_fixture(fixture).inventory
    uuid = str(inventory.gpus[0].uuid)
    latencies = []
    pause = random.Random(42)
    for n in range(samples):
        want = 0 if n % 2 == 0 else 1
        if want == 0:
            podres.set_pod(gpu_pod("bench", f"pod-{n}", uuid))
        else:
            podres.remove_pod("bench", f"pod-{n - 1}")
        seconds = wait_until(lambda want=want: gpu_free(fake, 0) == want, timeout_s=10)
        if seconds is None:
            raise SystemExit(f"sample {n}: the change never reached the API server")
        latencies.append(seconds)
        time.sleep(pause.uniform(0.05, 0.75))  # changes arrive at random phases of the agent's poll
    return latencies


def measure_idle(
    agent: subprocess.Popen[bytes], fake: FakeApiServer, seconds: float
) -> dict[str, Any]:
    proc = psutil.Process(agent.pid)
    fake.clear_requests()
    before, start = proc.cpu_times(), time.monotonic()
    time.sleep(seconds)
    after, wall = proc.cpu_times(), time.monotonic() - start
    cpu = (after.user + after.system) - (before.user + before.system)
    return {
        "idleCpuPercentOfOneCore": round(100 * cpu / wall, 3),
        "idleSeconds": round(wall, 1),
        "apiWritesWhileIdle": len(fake.writes()),
        "apiRequestsWhileIdle": len(fake.requests),
        "rssMiB": round(proc.memory_info().rss / 2**20, 1),
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument("--fixture", default="dgx-h100")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--no-device-plugin", action="store_true", help="publisher and metrics only"
    )
    args = parser.parse_args(argv)
    inventory = load_fixture(args.fixture).inventory
    with FakeApiServer() as fake, FakePodResourcesServer() as podres, KubeletEmulator() as kubelet:
        fake.add_node(NODE)
        podres.set_allocatable(replace(allocatable_of(inventory)))
        plugin_dir = None if args.no_device_plugin else kubelet.plugin_dir
        agent = start_agent(fake, podres, plugin_dir, args.fixture)
        try:
            started = wait_until(lambda: gpu_free(fake, 0) == 1, timeout_s=60, tick_s=0.05)
            if started is None:
                raise SystemExit(
                    "the agent never published (see its log under /tmp/publish-bench-*)"
                )
            time.sleep(2.0)  # let start-up settle (registration, first metrics refresh)
            latencies = measure_latency(fake, podres, args.fixture, args.samples)
            idle = measure_idle(agent, fake, args.idle_seconds)
        finally:
            agent.terminate()
            agent.wait(timeout=15)
    result = {
        "fixture": args.fixture,
        "devicePlugin": not args.no_device_plugin,
        "samples": len(latencies),
        "startupToFirstPublishSeconds": round(started, 2),
        "publishLatencySeconds": {
            "p50": round(statistics.median(latencies), 3),
            "p99": round(percentile(latencies, 0.99), 3),
            "max": round(max(latencies), 3),
            "target": "< 1.0",
        },
        **idle,
        "idleCpuTarget": "< 1%",
    }
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
