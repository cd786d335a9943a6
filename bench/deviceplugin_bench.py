"""Device-plugin benchmark over the real unix-socket gRPC path (not a test).

Measures, through the kubelet emulator: Allocate p50/p99; GetPreferredAllocation p50/p99 on 8- and
16-GPU nodes (random available subsets and sizes, seeded, so the selector's memo is not what is
measured); Xid-to-ListAndWatch latency; and the agent's RSS against a process that only imports
the same libraries. Prints one table with the targets.

    .venv/bin/python bench/deviceplugin_bench.py [--samples N]
"""

from __future__ import annotations

import argparse
import logging
import random
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import psutil

from agent.inventory import discover
from agent.model import HEALTHY, UNHEALTHY
from agent.nvml.fixture import load_fixture
from agent.nvml.pynvml_backend import fake_backend
from deviceplugin.plugin import DevicePlugin
from deviceplugin.settings import PluginSettings
from deviceplugin.testing.kubelet import KubeletEmulator

ROOT = Path(__file__).resolve().parent.parent
Row = tuple[str, float, str, bool]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@contextmanager
def node(fixture: str, clock: Callable[[], float] = time.monotonic) -> Iterator[tuple[object, ...]]:
    kubelet = KubeletEmulator()
    kubelet.start()
    backend, fake = fake_backend(replace(load_fixture(fixture), events=()))
    inventory = discover(backend)
    settings = PluginSettings(device_plugin_dir=kubelet.plugin_dir, health_quiet_period_s=1.0)
    plugin = DevicePlugin(settings, backend, inventory, clock=clock, wait_timeout_s=0.5)
    plugin.start()
    try:
        kubelet.wait_for(lambda k: bool(k.devices("nvidia.com/gpu")), 10.0)
        yield kubelet, fake, inventory
    finally:
        plugin.stop()
        backend.close()
        kubelet.stop()
        shutil.rmtree(kubelet.plugin_dir, ignore_errors=True)


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def bench_allocate(samples: int) -> list[Row]:
    with node("dgx-a100") as (kubelet, _, inventory):
        assert isinstance(kubelet, KubeletEmulator)
        uuids = [g.uuid for g in inventory.gpus]  # type: ignore[attr-defined]
        times = []
        for n in range(samples):
            ids = uuids[n % 8 : n % 8 + 1 + n % 2]
            start = time.perf_counter()
            kubelet.allocate("nvidia.com/gpu", ids)
            times.append((time.perf_counter() - start) * 1000)
    p50, p99 = percentiles(times)
    return [("Allocate p50 (ms)", p50, "", True), ("Allocate p99 (ms)", p99, "< 2", p99 < 2)]


def bench_preferred(fixture: str, samples: int) -> list[Row]:
    rng = random.Random(42)
    with node(fixture) as (kubelet, _, inventory):
        assert isinstance(kubelet, KubeletEmulator)
        uuids = [g.uuid for g in inventory.gpus]  # type: ignore[attr-defined]
        times = []
        for _ in range(samples):
            available = rng.sample(uuids, rng.randint(2, len(uuids)))
            size = rng.randint(1, len(available) - 1)
            start = time.perf_counter()
            kubelet.preferred("nvidia.com/gpu", available, [], size)
            times.append((time.perf_counter() - start) * 1000)
    p50, p99 = percentiles(times)
    label = f"GetPreferredAllocation {len(uuids)} GPUs ({fixture})"
    target = "< 20" if len(uuids) >= 16 else ""
    return [(f"{label} p50 (ms)", p50, "", True), (f"{label} p99 (ms)", p99, target, p99 < 20)]


def health_is(uuid: str, health: str) -> Callable[[KubeletEmulator], bool]:
    return lambda k: k.devices("nvidia.com/gpu")[uuid].health == health


def bench_xid(samples: int) -> list[Row]:
    clock = Clock()
    with node("dgx-a100", clock) as (kubelet, fake, inventory):
        assert isinstance(kubelet, KubeletEmulator)
        times = []
        for n in range(samples):
            gpu = n % 8
            uuid = inventory.gpus[gpu].uuid  # type: ignore[attr-defined]
            start = time.perf_counter()
            fake.emit_xid(gpu, 94)  # type: ignore[attr-defined]
            seen = kubelet.wait_for(health_is(uuid, UNHEALTHY), 5.0)
            times.append((time.perf_counter() - start) * 1000 if seen else float("inf"))
            clock.now += 2.0  # past the quiet period: recovers
            kubelet.wait_for(health_is(uuid, HEALTHY), 5.0)
    p50, p99 = percentiles(times)
    return [("Xid -> ListAndWatch p50 (ms)", p50, "", True),
            ("Xid -> ListAndWatch p99 (ms)", p99, "< 100", p99 < 100)]  # fmt: skip


def rss_mib(command: list[str], ready: Callable[[], bool], settle_s: float = 1.0) -> float:
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not ready() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(settle_s)
        return psutil.Process(proc.pid).memory_info().rss / 2**20
    finally:
        proc.terminate()
        proc.wait(10)


def bench_rss() -> list[Row]:
    kubelet = KubeletEmulator()
    kubelet.start()
    try:
        agent = rss_mib(
            [sys.executable, "-m", "agent.cli", "run", "--nvml-fixture", "dgx-a100-mig",
             "--allow-fake-gpus",
             "--device-plugin-dir", str(kubelet.plugin_dir), "--no-publish",
             "--node-labels", "off", "--metrics-address", "127.0.0.1:0"],
            lambda: len(kubelet.resources()) == 5,
        )  # fmt: skip
    finally:
        kubelet.stop()
        shutil.rmtree(kubelet.plugin_dir, ignore_errors=True)
    imports = (  # what the agent process imports (the runner's services and the NVML layer)
        "import agent.cli.main, agent.cli.run, agent.inventory, agent.nvml.pynvml_backend, "
        "agent.nvml.fake_pynvml, deviceplugin.plugin; import time; time.sleep(60)"
    )
    baseline = rss_mib([sys.executable, "-c", imports], lambda: True, settle_s=2.0)
    return [("agent RSS, dgx-a100-mig (MiB)", agent, "< 150", agent < 150),
            ("imports-only process RSS (MiB)", baseline, "", True),
            ("agent RSS above imports (MiB)", agent - baseline, "", True)]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    rows = bench_allocate(args.samples)
    rows += bench_preferred("dgx-a100", args.samples)
    rows += bench_preferred("dgx-2", args.samples)
    rows += bench_preferred("pcie-16x-nvlink-pairs", args.samples)
    rows += bench_xid(min(args.samples, 100))
    rows += bench_rss()
    width = max(len(r[0]) for r in rows)
    print(f"{'measure':<{width}}  {'value':>9}  {'target':>7}  ok")
    for name, value, target, ok in rows:
        print(f"{name:<{width}}  {value:>9.2f}  {target:>7}  {'yes' if ok else 'NO'}")
    return 0 if all(r[3] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
