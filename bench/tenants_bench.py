"""Four tenants on the Alibaba default trace: hard quotas (max = min) beside borrowing.

Run: `.venv/bin/python bench/tenants_bench.py [--tenants 40,30,20,10] [--compress 1,10000]
[--policy gputopo]`.

Event mode (`scheduler.sim.events`) on `openb_node_list_gpu_node.csv` (6,212 GPUs) and
`openb_pod_list_default.csv`, the jobs split as `simulate --tenants` splits them (min = share of
the GPUs, a stable hash of the pod name picks the tenant). The trace as recorded (`--compress 1`)
never asks for more than ~1% of the GPUs at once, so quotas never bind; `--compress K` divides
every arrival time by K and keeps every duration, so more pods overlap (K = 10,000: ~80% of the
GPUs wanted at the peak, every pod arrived within 22 minutes), and `--extra P` adds a copy
(`<name>-copy`, same arrival and duration) of every pod whose index modulo 100 is below P, so the
demand passes the capacity and the quotas matter (P = 30: 1.3 × the trace, as the FGD protocol
inflates). Reported per run: mean and peak GPU
allocation, and per tenant its pods started, GPU-hours, peak GPUs, p99 wait and guarantee deficit.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.sim.events import run_events
from scheduler.sim.protocol import RunResult
from scheduler.sim.tenants import parse_shares, tenant_workload
from scheduler.sim.workload import ClusterSpec, Workload, load_cluster, load_workload

TRACE_DIR = "alibaba-cluster-trace-gpu-v2023"


def traces_root() -> Path:
    if os.environ.get("GPUTOPO_TRACES"):
        return Path(os.environ["GPUTOPO_TRACES"])
    return Path(__file__).resolve().parents[1].parent / "shared" / "traces"


def compressed(workload: Workload, factor: float, extra: int) -> Workload:
    jobs = [replace(j, arrival=j.arrival / factor) for j in workload.jobs]
    copies = [replace(j, name=f"{j.name}-copy") for i, j in enumerate(jobs) if i % 100 < extra]
    return replace(workload, jobs=tuple(jobs + copies))


def one(spec: ClusterSpec, base: Workload, shares: list[int], hard: bool, policy: str) -> RunResult:
    workload = tenant_workload(base, shares, spec.gpu_count, hard)
    return run_events(spec, workload, policy, 42)


def _hours(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 3600:,.1f}"


def show(label: str, runs: dict[str, RunResult]) -> None:
    print(f"\n{label}")
    for quota, run in runs.items():
        print(
            f"  {quota:<7} allocation mean {run.mean_allocation:.2f}%  peak "
            f"{run.peak_allocation:.2f}%  pods placed {run.pods_placed}/{run.pods_arrived}"
        )
    print(
        f"  {'tenant':<7}{'min GPUs':>9}"
        + "".join(f"{q + ' ' + c:>22}" for q in runs for c in ("p99 wait h", "deficit GPU-h"))
    )
    names = [q.name for q in next(iter(runs.values())).queues]
    for i, name in enumerate(names):
        cells = []
        for run in runs.values():
            q = run.queues[i]
            cells += [_hours(q.wait_p99), _hours(q.deficit_gpu_seconds)]
        min_gpus = next(iter(runs.values())).queues[i].min_gpus
        print(f"  {name:<7}{min_gpus:>9.0f}" + "".join(f"{c:>22}" for c in cells))
    for quota, run in runs.items():
        figures = ", ".join(
            f"{q.name} {q.pods_started}/{q.pods} started, peak {q.peak_gpus:.0f} GPUs, "
            f"{q.gpu_seconds / 3600:,.0f} GPU-h"
            for q in run.queues
        )
        print(f"  {quota}: {figures}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", default="40,30,20,10")
    parser.add_argument("--compress", default="1,10000", help="arrival-time divisors to run")
    parser.add_argument("--extra", type=int, default=30, help="percent of pods run twice")
    parser.add_argument("--policy", default="gputopo")
    args = parser.parse_args(argv)
    root = traces_root() / TRACE_DIR
    spec = load_cluster(str(root / "openb_node_list_gpu_node.csv"))
    trace = load_workload(str(root / "openb_pod_list_default.csv"))
    shares = parse_shares(args.tenants)
    print(f"{spec.gpu_count} GPUs, {len(trace.jobs)} pods, tenants {args.tenants}, {args.policy}")
    for factor in (float(f) for f in args.compress.split(",")):
        base = compressed(trace, factor, args.extra)
        runs = {
            "hard": one(spec, base, shares, True, args.policy),
            "borrow": one(spec, base, shares, False, args.policy),
        }
        show(f"arrivals / {factor:g}, {args.extra}% of pods twice", runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
