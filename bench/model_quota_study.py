"""Quotas per GPU model on the Alibaba trace's mixed models (G2, T4, P100, V100, G3): two tenants
with plain guarantees, with the same guarantees per model, and with one tenant capped on T4s.

Run: `.venv/bin/python bench/model_quota_study.py [--seed 1,2] [--policy gputopo] [--jobs N]
[--node-share F]`.

Event mode on the living-cluster replay of `openb_pod_list_gpuspec25.csv` (a quarter of its pods
name the models they accept: T4, G2, P100, V100M16|V100M32) at the studies' settings (`replay.py`:
load 2000 from second 10,000,000, half of each kind of node, node order by the seed), with the
shipped `preemption:` block (`--jobs N`: the first N arrivals only; `--node-share F`: F of each
kind of node). The jobs are split over
tenants `t1` and `t2` by a stable hash of their names (`simulate --tenants 50,50`). Three trees:

* `plain`: each tenant `min` 50 % of the GPUs (`nvidia.com/gpu`), borrowing the rest;
* `per model`: the same, and `min` 50 % of each model's GPUs (`nvidia.com/gpu@<model>`): a tenant
  reclaims on a model's nodes only while within its guarantee there;
* `t2 T4 cap`: `plain`, and `t2` capped at 10 % of the T4 GPUs (`max nvidia.com/gpu@T4`).

Every tree caps each tenant at each model's GPUs (binding nothing), so GPU-hours are counted per
model. Reported per tree and tenant (mean over seeds): pods started of arrived, p99 wait (s),
GPU-hours per model, and the pods evicted by reclaim and by preemption.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from living_cluster import TRACE_DIR, traces_root

from scheduler.quota import QueueSpec, read_queue
from scheduler.sim.events import run_events
from scheduler.sim.protocol import RunResult
from scheduler.sim.replay import STUDY_LOAD, STUDY_NODES, STUDY_START, node_share, read_replay
from scheduler.sim.tenants import assign_tenants
from scheduler.sim.workload import ClusterSpec, Workload, load_cluster

GPU = "nvidia.com/gpu"
TREES = ("plain", "per model", "t2 T4 cap")


def gpus_by_model(spec: ClusterSpec) -> dict[str, int]:
    out: dict[str, int] = {}
    for group in spec.groups:
        out[group.model] = out.get(group.model, 0) + group.count * group.gpus
    return out


def tree(name: str, spec: ClusterSpec) -> tuple[QueueSpec, ...]:
    models = gpus_by_model(spec)
    specs = []
    for tenant in ("t1", "t2"):
        low: dict[str, int] = {GPU: spec.gpu_count // 2}
        top = {f"{GPU}@{m}": n for m, n in models.items()}  # binds nothing: GPU-h per model
        if name == "per model":
            low |= {f"{GPU}@{m}": n // 2 for m, n in models.items()}
        if name == "t2 T4 cap" and tenant == "t2":
            top[f"{GPU}@T4"] = models["T4"] // 10
        body = {"min": low, "max": top}
        specs.append(read_queue({"metadata": {"name": tenant}, "spec": body}))
    return tuple(specs)


def one(spec: ClusterSpec, jobs: Workload, name: str, seed: int, policy: str) -> RunResult:
    workload = replace(jobs, queues=tree(name, spec))
    return run_events(spec, workload, policy, seed, shuffle_nodes=True)


def show(name: str, runs: Sequence[RunResult], models: Sequence[str]) -> None:
    evicted = [r.preemption.by_reason if r.preemption else {} for r in runs]
    reclaim = statistics.fmean(e.get("reclaim", 0) for e in evicted)
    preempt = statistics.fmean(e.get("preempt", 0) for e in evicted)
    print(f"\n{name}: pods evicted by reclaim {reclaim:,.1f}, by preemption {preempt:,.1f}")
    print(
        f"  {'tenant':<7}{'started':>16}{'p99 wait s':>12}"
        + "".join(f"{m + ' GPU-h':>14}" for m in models)
    )
    for i, tenant in enumerate(q.name for q in runs[0].queues):
        queues = [r.queues[i] for r in runs]
        started = statistics.fmean(q.pods_started for q in queues)
        waits = [q.wait_p99 for q in queues if q.wait_p99 is not None]
        wait = f"{statistics.fmean(waits):,.0f}" if waits else "-"
        hours = [
            statistics.fmean(q.model_gpu_seconds.get(f"{GPU}@{m}", 0.0) for q in queues) / 3600
            for m in models
        ]
        cells = "".join(f"{h:>14,.0f}" for h in hours)
        print(f"  {tenant:<7}{f'{started:,.0f}/{queues[0].pods:,}':>16}{wait:>12}{cells}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", default="1,2")
    parser.add_argument("--policy", default="gputopo")
    parser.add_argument("--trees", default=",".join(TREES))
    parser.add_argument("--jobs", type=int, default=0, help="the first N arrivals only (0: all)")
    parser.add_argument("--node-share", type=float, default=STUDY_NODES)
    args = parser.parse_args(argv)
    root = traces_root() / TRACE_DIR
    spec = node_share(load_cluster(str(root / "openb_node_list_gpu_node.csv")), args.node_share)
    replay = read_replay(root / "openb_pod_list_gpuspec25.csv", load=STUDY_LOAD, start=STUDY_START)
    split = assign_tenants(replay.workload.jobs, 2)
    jobs = replace(replay.workload, jobs=split[: args.jobs] if args.jobs else split)
    models = sorted(gpus_by_model(spec))
    seeds = [int(s) for s in args.seed.split(",")]
    counts = ", ".join(f"{m} {n}" for m, n in sorted(gpus_by_model(spec).items()))
    print(f"{spec.gpu_count} GPUs ({counts}), {len(jobs.jobs)} pods, seeds {args.seed}")
    for name in args.trees.split(","):
        show(name, [one(spec, jobs, name, seed, args.policy) for seed in seeds], models)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
