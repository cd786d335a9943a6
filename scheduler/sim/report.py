"""Simulator output: a table per policy, the JSON document of DESIGN §8, and the allocation plot.

JSON (`--json`), one entry per policy and seed; ratios in percent of the cluster's GPU capacity:

```json
{"runs": [{"policy": "fgd", "seed": 42, "allocationRatio": {"100": 95.4, "130": 95.6},
           "fragmentedGpuShare": 4.4, "failedPods": {"1-gpu": 1391, "share": 1010},
           "decisionsPerSecond": 2600.0}]}
```

In event mode (workloads with arrival times) `allocationRatio` holds the time-weighted `mean` and
the `peak` instead of the protocol's 100/130 points, and each run adds `gangWaitSeconds`,
`jobsPlaced` and `jobsTotal`. A run with queues (a workload's `queues:` or `--tenants`) adds
`queues`, one entry per queue (see `scheduler.sim.queues` for what each figure means):

```json
{"name": "t1", "parent": null, "minGpus": 2484.0, "maxGpus": null, "pods": 3260,
 "podsStarted": 3260, "gpuSeconds": 1.2e9, "peakGpus": 3100.0,
 "waitSeconds": {"p50": 0.0, "p99": 3600.0}, "guaranteeDeficitGpuSeconds": 0.0}
```

The text table is followed by one row per policy, seed and queue.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from scheduler.sim.protocol import RunResult
from scheduler.sim.queues import QueueReport

__all__ = ["REPORT_POINTS", "format_table", "plot_runs", "runs_document"]

REPORT_POINTS = (100, 130)


def _run_document(run: RunResult) -> dict[str, Any]:
    ratios: dict[str, float | None]
    if run.mean_allocation is None:
        ratios = {str(k): run.allocation[k] for k in REPORT_POINTS if k in run.allocation}
    else:
        ratios = {"mean": run.mean_allocation, "peak": run.peak_allocation}
    doc: dict[str, Any] = {
        "policy": run.policy,
        "seed": run.seed,
        "allocationRatio": ratios,
        "fragmentedGpuShare": run.fragmented_share,
        "failedPods": dict(run.failed),
        "decisionsPerSecond": run.decisions_per_second,
    }
    if run.mean_allocation is not None:
        doc["gangWaitSeconds"] = run.gang_wait_seconds
        doc["jobsPlaced"] = run.jobs_placed
        doc["jobsTotal"] = run.jobs_total
    if run.queues:
        doc["queues"] = [_queue_document(q) for q in run.queues]
    return doc


def _queue_document(queue: QueueReport) -> dict[str, Any]:
    return {
        "name": queue.name,
        "parent": queue.parent,
        "minGpus": queue.min_gpus,
        "maxGpus": queue.max_gpus,
        "pods": queue.pods,
        "podsStarted": queue.pods_started,
        "gpuSeconds": queue.gpu_seconds,
        "peakGpus": queue.peak_gpus,
        "waitSeconds": {"p50": queue.wait_p50, "p99": queue.wait_p99},
        "guaranteeDeficitGpuSeconds": queue.deficit_gpu_seconds,
    }


def runs_document(runs: Iterable[RunResult]) -> dict[str, Any]:
    """The `--json` document."""
    return {"runs": [_run_document(r) for r in runs]}


def _mean_sd(values: Sequence[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.fmean(values):.2f} ± {statistics.stdev(values):.2f}"


def _by_policy(runs: Iterable[RunResult]) -> dict[str, list[RunResult]]:
    grouped: dict[str, list[RunResult]] = {}
    for run in runs:
        grouped.setdefault(run.policy, []).append(run)
    return grouped


def _row(policy: str, runs: Sequence[RunResult], points: Sequence[int]) -> list[str]:
    row = [policy, str(len(runs))]
    if runs[0].mean_allocation is not None:
        row.append(_mean_sd([r.mean_allocation or 0.0 for r in runs]))
        row.append(_mean_sd([r.peak_allocation or 0.0 for r in runs]))
    else:
        row.extend(_mean_sd([r.allocation[k] for r in runs if k in r.allocation]) for k in points)
    row.append(_mean_sd([r.fragmented_share for r in runs]))
    row.append(_mean_sd([float(r.fragmented_gpus) for r in runs]))
    waits = [r.gang_wait_seconds for r in runs if r.gang_wait_seconds is not None]
    row.append(_mean_sd(waits) if waits else "-")
    row.append(f"{statistics.fmean(r.jobs_placed for r in runs):.0f}/{runs[0].jobs_total}")
    row.append(f"{statistics.fmean(r.decisions_per_second for r in runs):,.0f}")
    return row


def format_table(runs: Sequence[RunResult]) -> str:
    """One row per policy (mean ± sd over seeds)."""
    if not runs:
        return "no runs\n"
    events = runs[0].mean_allocation is not None
    alloc = ["alloc mean%", "alloc peak%"] if events else [f"alloc@{k}%" for k in REPORT_POINTS]
    header = ["policy", "seeds", *alloc, "fragmented%", "fragmented GPUs", "gang wait s"]
    header += ["jobs placed", "decisions/s"]
    rows = [header] + [_row(p, rs, REPORT_POINTS) for p, rs in _by_policy(runs).items()]
    text = _columns(rows)
    if any(r.queues for r in runs):
        text += "\n" + _columns(_queue_rows(runs))
    return text


def _columns(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}".rstrip("0").rstrip(".")


_QUEUE_HEADER = (
    "policy",
    "seed",
    "queue",
    "min GPUs",
    "max GPUs",
    "pods started",
    "GPU-s",
    "peak GPUs",
    "wait p50 s",
    "wait p99 s",
    "deficit GPU-s",
)


def _queue_rows(runs: Sequence[RunResult]) -> list[list[str]]:
    rows = [list(_QUEUE_HEADER)]
    for run in runs:
        for q in run.queues:
            rows.append(
                [
                    run.policy,
                    str(run.seed),
                    q.name,
                    _figure(q.min_gpus),
                    _figure(q.max_gpus),
                    f"{q.pods_started}/{q.pods}",
                    _figure(q.gpu_seconds),
                    _figure(q.peak_gpus),
                    _figure(q.wait_p50),
                    _figure(q.wait_p99),
                    _figure(q.deficit_gpu_seconds),
                ]
            )
    return rows


def _mean_curve(runs: Sequence[RunResult]) -> tuple[list[int], list[float]]:
    points = sorted({k for r in runs for k in r.allocation})
    xs, ys = [], []
    for k in points:
        values = [r.allocation[k] for r in runs if k in r.allocation]
        xs.append(k)
        ys.append(statistics.fmean(values))
    return xs, ys


def plot_runs(runs: Sequence[RunResult], path: Path, title: str = "") -> None:
    """Allocation ratio vs arrived GPU demand, one line per policy (mean over seeds)."""
    import matplotlib  # optional dependency: loaded only for --plot

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for policy, group in _by_policy(runs).items():
        xs, ys = _mean_curve(group)
        ax.plot(xs, ys, label=policy, linewidth=1.5)
    ax.set_xlabel("arrived GPU demand (% of cluster GPU capacity)")
    ax.set_ylabel("GPU allocation ratio (%)")
    ax.set_title(title or "GPU allocation vs arrived demand")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
