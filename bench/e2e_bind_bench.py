"""End-to-end scheduler benchmark (not a test): watch -> decide -> bind against the fake API server.

The fake API server (real HTTP) runs in a child process with N ready GPU nodes; this process runs
the real scheduler `Runtime` (informers, cache, queue, loop, binder, reporter) with the real
`kubernetes` client. Once the scheduler's cache is warm, the child stores P pending pods at once;
the clock runs from then until the scheduler has bound all P (its own count of `201` answers),
and the child then checks that every pod is bound and no node holds more GPUs than it has.

    .venv/bin/python bench/e2e_bind_bench.py [--nodes 1000] [--pods 2000] [--json]

Prints bound pods per second, the time to the first and the last bind, the scheduler process's
CPU time over that span (on a shared machine wall time includes waiting for a core), and the
scheduler's attempt counts.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GPU = "nvidia.com/gpu"
SCHEDULER = "gputopo-scheduler"
SIZES = (1, 2, 4, 1, 1, 2)  # GPUs per pod, cycled


def _pod(i: int) -> dict[str, Any]:
    gpus = str(SIZES[i % len(SIZES)])
    resources = {GPU: gpus, "cpu": "1", "memory": "2Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"bench-{i:05d}", "namespace": "default"},
        "spec": {
            "schedulerName": SCHEDULER,
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.36",
                    "resources": {"limits": resources, "requests": resources},
                }
            ],
        },
        "status": {"phase": "Pending"},
    }


def _check(fake: Any, pods: int) -> dict[str, Any]:
    used: dict[str, int] = {}
    bound = 0
    for pod in fake.list_objects("pods", "default"):
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            bound += 1
            limits = pod["spec"]["containers"][0]["resources"]["limits"]
            used[node] = used.get(node, 0) + int(limits[GPU])
    over = sorted(n for n, g in used.items() if g > 8)
    return {"bound": bound, "expected": pods, "overcommittedNodes": over, "nodesUsed": len(used)}


def serve_fake(nodes: int, conn: Connection) -> None:
    """The child: a fake API server with `nodes` ready 8-GPU nodes, driven through `conn`."""
    from tests.fakeapi import FakeApiServer

    fake = FakeApiServer(history_limit=200_000).start()
    capacity = {"cpu": "128", "memory": "1Ti", "pods": "110", GPU: "8"}
    for i in range(nodes):
        fake.add_node(f"node-{(i * 7919) % nodes:04d}", capacity=capacity)
    conn.send(fake.port)
    while True:
        command, arg = conn.recv()
        if command == "pods":
            for i in range(arg):
                fake.put_object("pods", _pod(i))
            conn.send("created")
        elif command == "check":
            conn.send(_check(fake, arg))
        else:
            fake.stop()
            conn.send("stopped")
            return


def _runtime(port: int) -> Any:
    from kubernetes import client

    from scheduler.cli.run import RunSettings, Runtime
    from scheduler.config import load_config
    from scheduler.kubeapi.client import KubeClient

    configuration = client.Configuration(host=f"http://127.0.0.1:{port}")
    configuration.connection_pool_maxsize = 32
    kube = KubeClient(client.ApiClient(configuration), SCHEDULER, "bench")
    settings = RunSettings(
        kubeconfig=None,
        config=load_config(None),
        scheduler_name=SCHEDULER,
        leader_elect=False,
        leader_elect_namespace="default",
        metrics_address="127.0.0.1:0",
        log_format="text",
    )
    return Runtime(settings, kube)


def _wait(predicate: Any, timeout: float) -> float | None:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():
            return time.monotonic() - start
        time.sleep(0.002)
    return None


def run(nodes: int, pods: int, timeout: float) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=serve_fake, args=(nodes, child), daemon=True)
    proc.start()
    port = parent.recv()
    runtime = _runtime(port)
    runtime.start()
    try:
        if _wait(runtime.ready, 60) is None:
            raise SystemExit("the scheduler's cache did not sync within 60 s")
        sample = runtime.metrics.registry.get_sample_value

        def bound() -> float:
            return sample("gputopo_scheduler_binds_total", {"result": "bound"}) or 0.0

        start, cpu_start = time.monotonic(), time.process_time()
        parent.send(("pods", pods))
        first = _wait(lambda: bound() >= 1, timeout)
        last = _wait(lambda: bound() >= pods, timeout)
        cpu = time.process_time() - cpu_start
        parent.recv()
        elapsed = time.monotonic() - start if last is not None else None
        attempts = {
            r: sample("gputopo_scheduler_schedule_attempts_total", {"result": r}) or 0.0
            for r in ("scheduled", "unschedulable", "error")
        }
        cycle = "gputopo_scheduler_scheduling_cycle_duration_seconds"
        cycles = sample(f"{cycle}_count") or 1.0
        mean_cycle_ms = 1000 * (sample(f"{cycle}_sum") or 0.0) / cycles
    finally:
        runtime.stop()
        runtime.kube.close()
    parent.send(("check", pods))
    check = parent.recv()
    parent.send(("stop", None))
    parent.recv()
    proc.join(10)
    return {
        "nodes": nodes,
        "pods": pods,
        "seconds": None if elapsed is None else round(elapsed, 3),
        "boundPodsPerSecond": None if elapsed is None else round(pods / elapsed, 1),
        "firstBindSeconds": None if first is None else round(first, 3),
        "schedulerCpuSeconds": round(cpu, 3),
        "attempts": attempts,
        "meanCycleMs": round(mean_cycle_ms, 3),
        "check": check,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run(args.nodes, args.pods, args.timeout)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['pods']} pods on {result['nodes']} nodes: "
            f"{result['boundPodsPerSecond']} bound pods/s "
            f"(all bound in {result['seconds']} s, first after {result['firstBindSeconds']} s; "
            f"scheduler CPU {result['schedulerCpuSeconds']} s)"
        )
        print(f"attempts: {result['attempts']}, mean cycle {result['meanCycleMs']} ms")
        print(f"check: {result['check']}")
    ok = result["check"]["bound"] == result["pods"] and not result["check"]["overcommittedNodes"]
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
