"""Reclaim end to end (not a test): a within-guarantee pod created -> victim evicted -> pod bound.

The fake API server (real HTTP) runs in a child process with N ready 8-GPU nodes and two Queues,
`a` and `b`, each guaranteed half the GPUs and capped at all of them. Queue `a` borrows every GPU:
one 1-GPU pod per GPU, bound at creation (`spec.nodeName`), grace 0, so a victim is gone as soon
as it is deleted and the figure is the scheduler's own path. This process runs the real scheduler
`Runtime` (informers, cache, queue, loop, victim search, eviction writes, binder) with the real
`kubernetes` client. Then, one at a time, R pods of queue `b` (1 GPU, within its guarantee) are
created; each must reclaim a GPU from `a`. The clock runs from the create request to the
scheduler's own `201` for the binding (its `binds_total{result="bound"}` count); the child then
checks that no node holds more GPUs than it has and that `a` kept at least its guarantee.

    .venv/bin/python bench/reclaim_bench.py [--nodes 50] [--reclaims 200] [--json]

Prints p50, p90, p99 and max seconds per reclaim, the evictions counted by the scheduler
(`preemption_victims_total{reason="reclaim"}`), and the check. Target: p99 < 2 s.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_bind_bench import SCHEDULER, _runtime, _wait
from scheduler_bench import percentile

GPU = "nvidia.com/gpu"
QUEUE = ("scheduling.gputopo.io", "v1alpha1", "queues")


def _pod(name: str, namespace: str, node: str | None) -> dict[str, Any]:
    resources = {GPU: "1", "cpu": "1", "memory": "1Gi"}
    spec: dict[str, Any] = {
        "schedulerName": SCHEDULER,
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "main",
                "image": "busybox:1.36",
                "resources": {"limits": resources, "requests": resources},
            }
        ],
    }
    if node is not None:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


def _setup(fake: Any, nodes: int) -> None:
    from kubernetes import client

    capacity = {"cpu": "128", "memory": "1Ti", "pods": "110", GPU: "8"}
    half = nodes * 4
    with fake.api_client() as api:
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        for team in ("a", "b"):
            core.create_namespace({"metadata": {"name": f"team-{team}"}}, _preload_content=False)
            spec = {"min": {GPU: half}, "max": {GPU: 2 * half}, "namespaces": [f"team-{team}"]}
            custom.create_cluster_custom_object(*QUEUE, {"metadata": {"name": team}, "spec": spec})
        for i in range(nodes):
            fake.add_node(f"node-{i:03d}", capacity=capacity)
            for g in range(8):
                body = _pod(f"a-{i:03d}-{g}", "team-a", f"node-{i:03d}")
                core.create_namespaced_pod("team-a", body, _preload_content=False)


def _check(fake: Any, nodes: int) -> dict[str, Any]:
    used: dict[str, int] = {}
    per_team = {"team-a": 0, "team-b": 0}
    for team in per_team:
        for pod in fake.list_objects("pods", team):
            node = (pod.get("spec") or {}).get("nodeName")
            if node and not pod["metadata"].get("deletionTimestamp"):
                used[node] = used.get(node, 0) + 1
                per_team[team] += 1
    over = sorted(n for n, g in used.items() if g > 8)
    return {
        "gpusA": per_team["team-a"],
        "gpusB": per_team["team-b"],
        "guaranteeA": nodes * 4,
        "overcommittedNodes": over,
    }


def serve_fake(nodes: int, conn: Connection) -> None:
    """The child: the fake API server, queue `a` borrowing every GPU; driven through `conn`."""
    from kubernetes import client

    from tests.fakeapi import FakeApiServer

    fake = FakeApiServer(history_limit=200_000).start()
    _setup(fake, nodes)
    conn.send(fake.port)
    with fake.api_client() as api:
        core = client.CoreV1Api(api)
        while True:
            command, arg = conn.recv()
            if command == "pod":
                core.create_namespaced_pod("team-b", _pod(arg, "team-b", None))
                conn.send("created")
            elif command == "check":
                conn.send(_check(fake, nodes))
            else:
                fake.stop()
                conn.send("stopped")
                return


def _sample(runtime: Any, name: str, labels: dict[str, str]) -> float:
    return float(runtime.metrics.registry.get_sample_value(name, labels) or 0.0)


def _bound(runtime: Any) -> float:
    return _sample(runtime, "gputopo_scheduler_binds_total", {"result": "bound"})


def run(nodes: int, reclaims: int) -> dict[str, Any]:
    if reclaims > nodes * 4:
        raise SystemExit("--reclaims must not exceed queue b's guarantee (4 GPUs per node)")
    parent, child = multiprocessing.Pipe()
    server = multiprocessing.Process(target=serve_fake, args=(nodes, child), daemon=True)
    server.start()
    runtime = _runtime(parent.recv())
    runtime.start()
    try:
        _wait(lambda: runtime.ready() and len(runtime.cache.pods) >= nodes * 8, 120)
        seconds = []
        for i in range(reclaims):
            bound = _bound(runtime)
            start = time.monotonic()
            parent.send(("pod", f"b-{i:04d}"))
            parent.recv()
            took = _wait(
                lambda b=bound: (
                    _sample(runtime, "gputopo_scheduler_binds_total", {"result": "bound"}) > b
                ),
                30,
                0.001,
            )
            if took is None:
                raise SystemExit(f"reclaim {i} did not bind within 30 s")
            seconds.append(time.monotonic() - start)
        victims = _sample(
            runtime, "gputopo_scheduler_preemption_victims_total", {"reason": "reclaim"}
        )
        parent.send(("check", None))
        check = parent.recv()
    finally:
        runtime.stop()
        parent.send(("stop", None))
        parent.recv()
        server.join(10)
    return {
        "nodes": nodes,
        "reclaims": reclaims,
        "p50Seconds": round(statistics.median(seconds), 4),
        "p90Seconds": round(percentile(seconds, 0.90), 4),
        "p99Seconds": round(percentile(seconds, 0.99), 4),
        "maxSeconds": round(max(seconds), 4),
        "victims": victims,
        "check": check,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--reclaims", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.nodes, args.reclaims)
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"{result['reclaims']} reclaims on {result['nodes']} nodes × 8 GPUs: "
        f"p50 {result['p50Seconds']:.3f} s, p90 {result['p90Seconds']:.3f} s, "
        f"p99 {result['p99Seconds']:.3f} s, max {result['maxSeconds']:.3f} s "
        f"(target p99 < 2 s); victims {result['victims']:.0f}; check {result['check']}"
    )


if __name__ == "__main__":
    main()
