"""Preemption and reclaim in a living cluster: the same runs without and with them (DESIGN §11).

Run: `.venv/bin/python bench/preemption_sim.py [--seeds 1] [--tenants 40,30,20,10]
[--policy gputopo] [--json]`.

Two workloads, each split over tenant leaf queues as `simulate --tenants` splits them (min =
the share of the GPUs, max unlimited: every tenant may borrow), each run twice on the same seed:
`borrow` (no eviction) and `borrow+reclaim` (`scheduler.sim.evictions` with the default
`PreemptionSettings`: priority preemption inside a tenant, reclaim of borrowed GPUs by a tenant
within its guarantee):

* `builtin`: the built-in cluster and event workload (gangs, GPU shares, priorities);
* `trace`: the living replay of the Alibaba default trace at the study settings (`STUDY_LOAD`,
  `STUDY_START`, `STUDY_NODES`; priorities from `qos`), when the trace is present.

Reported per run: mean allocation, utilisation, pods placed, the longest wait of an 8-GPU pod,
the gang wait, victim sets, pods evicted, GPU-hours lost to eviction, gangs cut beyond their
spares (must be 0), evictions after which the preemptor did not start (must be 0), and per
tenant its p99 wait and guarantee deficit (GPU-hours owed but not given).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.preemption import PreemptionSettings
from scheduler.sim.events import run_events
from scheduler.sim.protocol import RunResult
from scheduler.sim.replay import STUDY_LOAD, STUDY_NODES, STUDY_START, node_share, read_replay
from scheduler.sim.report import runs_document
from scheduler.sim.tenants import parse_shares, tenant_workload
from scheduler.sim.workload import ClusterSpec, Workload, load_cluster, load_workload

TRACE_DIR = "alibaba-cluster-trace-gpu-v2023"
MODES: dict[str, PreemptionSettings | bool] = {
    "borrow": False,
    "borrow+reclaim": PreemptionSettings(),
}


def traces_root() -> Path:
    if os.environ.get("GPUTOPO_TRACES"):
        return Path(os.environ["GPUTOPO_TRACES"])
    return Path(__file__).resolve().parents[1].parent / "shared" / "traces"


def inputs() -> dict[str, tuple[ClusterSpec, Workload]]:
    out = {"builtin": (load_cluster("default"), load_workload("default"))}
    root = traces_root() / TRACE_DIR
    nodes, pods = root / "openb_node_list_gpu_node.csv", root / "openb_pod_list_default.csv"
    if nodes.exists() and pods.exists():
        replay = read_replay(pods, load=STUDY_LOAD, start=STUDY_START)
        out["trace"] = (node_share(load_cluster(str(nodes)), STUDY_NODES), replay.workload)
    return out


def _hours(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 3600:,.2f}"


def show(name: str, runs: dict[str, RunResult], seconds: dict[str, float]) -> None:
    print(f"\n{name}")
    for mode, run in runs.items():
        p = run.preemption
        figures = (
            f"alloc mean {run.mean_allocation:.2f}%  util {run.utilisation:.2f}%  "
            f"placed {run.pods_placed}/{run.pods_arrived}  8-GPU max wait "
            f"{_hours(run.longest_8gpu_wait)} h  gang wait {_hours(run.gang_wait_seconds)} h"
        )
        print(f"  {mode:<15} {figures}  ({seconds[mode]:.0f} s)")
        if p is not None:
            print(
                f"  {'':<15} victim sets {p.preemptions}  pods evicted {p.pods_evicted}  "
                f"GPU-h lost {_hours(p.gpu_seconds_lost)}  partial gangs {p.partial_gangs}  "
                f"evictions without start {p.wasted}  by reason {dict(p.by_reason)}"
            )
    print(
        f"  {'tenant':<8}" + "".join(f"{m + ' p99 wait h':>28}{'deficit GPU-h':>15}" for m in runs)
    )
    first = next(iter(runs.values()))
    for i, queue in enumerate(first.queues):
        cells = ""
        for run in runs.values():
            q = run.queues[i]
            cells += f"{_hours(q.wait_p99):>28}{_hours(q.deficit_gpu_seconds):>15}"
        print(f"  {queue.name:<8}{cells}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1")
    parser.add_argument("--tenants", default="40,30,20,10")
    parser.add_argument("--policy", default="gputopo")
    parser.add_argument("--only", help="builtin or trace (default: both)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    shares = parse_shares(args.tenants)
    documents: dict[str, Any] = {}
    for name, (spec, base) in inputs().items():
        if args.only and name != args.only:
            continue
        workload = tenant_workload(base, shares, spec.gpu_count, False)
        for seed in (int(s) for s in args.seeds.split(",")):
            runs, seconds = {}, {}
            for mode, settings in MODES.items():
                t0 = time.perf_counter()
                runs[mode] = run_events(spec, workload, args.policy, seed, preemption=settings)
                seconds[mode] = time.perf_counter() - t0
            show(f"{name}, seed {seed}, tenants {args.tenants}, {args.policy}", runs, seconds)
            documents[f"{name}/{seed}"] = {m: runs_document([r]) for m, r in runs.items()}
    if args.json:
        print(json.dumps(documents))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
