"""Retry waves over a backlog: what the scheduler's placement pays when room may have been freed.

A busy GPU cluster has every GPU taken and a queue of pods waiting. Each time room may have been
freed (a pod ends, a node joins), the scheduler tries every waiting pod again (`move_all_to_active`,
as kube-scheduler does), and a pod that fits nowhere is told why: every node's reason counted
(`Placer.decide`, as the runtime loop asks it). This bench fills `--nodes` nodes × 8 GPUs with
8-GPU pods, queues `--pending` GPU pods (the seeded mix of `scheduler_bench.random_pod` less its
cpu-only pods), then runs `--waves` waves: one running pod leaves, and every waiting pod is decided
in queue order, the ones that fit assumed where placement puts them.

Reported: per wave, the waiting pods decided, placed and refused; the placement time per decided
pod (mean, p50, p99, process CPU µs) and per wave (ms); and a digest of every decision (pod key and
outcome, in order), so two versions of the code are shown to decide alike. Placement is pure here:
no API writes, no preemption, no queue. Run it at two commits to compare them.

Run: `.venv/bin/python bench/backlog_bench.py [--nodes 5000] [--pending 2000] [--waves 20]`.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from scheduler_bench import make_cluster, percentile, random_pod, shipped_scoring, warm_heap_frozen

from scheduler.placement import Placer, PodRequest

GIB = 1 << 30


def waiting_pods(count: int, seed: int) -> list[PodRequest]:
    """`count` GPU pods (whole GPUs or shares) of the seeded mix, in queue order."""
    rng = random.Random(seed)
    pods: list[PodRequest] = []
    while len(pods) < count:
        pod = random_pod(rng, f"default/wait-{len(pods):06d}")
        if pod.gpus or pod.gpu_milli:
            pods.append(pod)
    return pods


def run(nodes: int, pending: int, waves: int, seed: int) -> dict[str, float | str]:
    cluster = make_cluster(nodes, max(1, nodes // 100))
    snapshot = cluster.snapshot
    placer = Placer(snapshot, shipped_scoring(nodes, plain=False))
    running = []
    for i in range(nodes):
        pod = PodRequest(key=f"default/full-{i:06d}", gpus=8, cpu_milli=8000, memory=64 * GIB)
        snapshot.assume_on(pod, f"node-{i:05d}")
        running.append(pod.key)
    waiting = waiting_pods(pending, seed)
    rng = random.Random(seed)
    digest = hashlib.sha256()
    per_pod: list[float] = []
    per_wave: list[float] = []
    placed = decided = 0
    with warm_heap_frozen():
        for _wave in range(waves):
            snapshot.forget(running.pop(rng.randrange(len(running))))
            still: list[PodRequest] = []
            wave_start = time.process_time()
            for pod in waiting:
                start = time.process_time()
                decision = placer.decide(pod)
                per_pod.append(time.process_time() - start)
                decided += 1
                digest.update(f"{pod.key}={decision.assignment!r};".encode())
                if decision.assignment is None:
                    still.append(pod)
                    continue
                snapshot.assume(pod, decision.assignment)
                running.append(pod.key)
                placed += 1
            per_wave.append(time.process_time() - wave_start)
            waiting = still
    return {
        "nodes": nodes,
        "decided": decided,
        "placed": placed,
        "mean_us": 1e6 * sum(per_pod) / max(1, len(per_pod)),
        "p50_us": 1e6 * percentile(per_pod, 0.50),
        "p99_us": 1e6 * percentile(per_pod, 0.99),
        "wave_ms": 1e3 * sum(per_wave) / max(1, len(per_wave)),
        "digest": digest.hexdigest()[:16],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="5000", help="comma-separated sizes (default 5000)")
    parser.add_argument("--pending", type=int, default=2000)
    parser.add_argument("--waves", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.nodes.split(",")]
    print(f"{args.pending} waiting GPU pods, {args.waves} waves (one 8-GPU pod leaves before each)")
    header = ("nodes", "decided", "placed", "mean µs", "p50 µs", "p99 µs", "per wave ms", "digest")
    print("".join(f"{h:>14}" for h in header[:-1]), f"{header[-1]:>18}")
    for nodes in sizes:
        row = run(nodes, args.pending, args.waves, args.seed)
        cells = [
            f"{row['nodes']:,}",
            f"{row['decided']:,}",
            f"{row['placed']:,}",
            f"{row['mean_us']:.1f}",
            f"{row['p50_us']:.1f}",
            f"{row['p99_us']:.1f}",
            f"{row['wave_ms']:.1f}",
            str(row["digest"]),
        ]
        print("".join(f"{c:>14}" for c in cells[:-1]), f"{cells[-1]:>18}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
