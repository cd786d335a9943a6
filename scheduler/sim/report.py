"""Simulator output: a table per policy and the JSON document (the plots: `scheduler.sim.plot`).

JSON (`--json`), one entry per policy and seed; ratios in percent of the cluster's GPU capacity:

```json
{"runs": [{"policy": "fgd", "seed": 42, "allocationRatio": {"100": 95.4, "130": 95.6},
           "fragmentedGpuShare": 4.4, "failedPods": {"1-gpu": 1391, "share": 1010},
           "decisionsPerSecond": 2600.0}]}
```

In event mode (workloads with arrival times) `allocationRatio` holds the time-weighted `mean` and
the `peak` instead of the protocol's 100/130 points, and each run adds `gangWaitSeconds`,
`jobsPlaced`, `jobsTotal` and the living-cluster figures (`scheduler.sim.metrics`; every field is
defined in `scheduler/sim/README.md`):

```json
{"utilisation": 51.2, "fragmentationOverTime": 9.2, "longest8GpuWaitSeconds": 755.4,
 "waitSeconds": {"8-gpu": {"pods": 44, "started": 44, "p50": 0.0, "p99": 755.4,
                           "longest": 755.4}, "gang": {...}}}
```

A living-cluster replay of a trace adds a top-level `replay` object (`replay_document`).
A run with queues (a workload's `queues:` or `--tenants`) adds
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
from typing import Any

from scheduler.sim.metrics import ALL, ClassWaits
from scheduler.sim.protocol import RunResult
from scheduler.sim.queues import QueueReport
from scheduler.sim.replay import Replay

__all__ = [
    "REPORT_POINTS",
    "by_policy",
    "format_table",
    "replay_document",
    "runs_document",
]

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
        doc["utilisation"] = run.utilisation
        doc["fragmentationOverTime"] = run.fragmentation_mean
        doc["longest8GpuWaitSeconds"] = run.longest_8gpu_wait
        doc["waitSeconds"] = {name: _waits_document(w) for name, w in run.waits.items()}
        doc.update(_figures_document(run))
    if run.domains:
        doc["domains"] = {label: dict(figures) for label, figures in run.domains.items()}
    if run.gang_wait_p99:
        doc["gangWaitP99Seconds"] = {str(g): w for g, w in run.gang_wait_p99.items()}
    if run.queues:
        doc["queues"] = [_queue_document(q) for q in run.queues]
    if run.preemption is not None:
        p = run.preemption
        doc["preemption"] = {
            "holds": p.holds,
            "evictions": p.pods_evicted,
            "heldGpuSeconds": p.held_gpu_seconds,
            "victimSets": p.preemptions,
            "podsEvicted": p.pods_evicted,
            "gpuSecondsLost": p.gpu_seconds_lost,
            "partialGangs": p.partial_gangs,
            "evictionsWithoutStart": p.wasted,
            "podsEvictedByReason": dict(p.by_reason),
        }
    return doc


def _figures_document(run: RunResult) -> dict[str, Any]:
    f = run.figures
    if f is None:
        return {}
    return {
        "gpuWeightedWaitSeconds": f.gpu_weighted_wait,
        "meanCompletionSeconds": f.mean_completion,
        "meanSlowdown": f.mean_slowdown,
        "makespanSeconds": f.makespan,
    }


def _waits_document(waits: ClassWaits) -> dict[str, Any]:
    return {
        "pods": waits.pods,
        "started": waits.started,
        "mean": waits.mean,
        "p50": waits.p50,
        "p99": waits.p99,
        "longest": waits.longest,
    }


def replay_document(replay: Replay) -> dict[str, Any]:
    """What a living-cluster replay kept and left out (recorded seconds; `load` K)."""
    jobs = replay.workload.jobs
    return {
        "source": replay.workload.source,
        "podsInTrace": replay.pods_in_trace,
        "podsReplayed": sum(j.replicas for j in jobs),
        "neverRan": replay.never_ran,
        "endedBeforeStart": replay.before_start,
        "start": replay.start,
        "traceEnd": replay.trace_end,
        "load": replay.load,
        "gangs": replay.gangs,
        "arrivalWindowSeconds": jobs[-1].arrival - jobs[0].arrival if jobs else 0.0,
    }


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
        "gpuSecondsByModel": dict(queue.model_gpu_seconds),
    }


def runs_document(runs: Iterable[RunResult], replay: Replay | None = None) -> dict[str, Any]:
    """The `--json` document."""
    doc: dict[str, Any] = {"runs": [_run_document(r) for r in runs]}
    if replay is not None:
        doc["replay"] = replay_document(replay)
    return doc


def _mean_sd(values: Sequence[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.fmean(values):.2f} ± {statistics.stdev(values):.2f}"


def by_policy(runs: Iterable[RunResult]) -> dict[str, list[RunResult]]:
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
    if runs[0].mean_allocation is not None:
        row.append(_mean_sd([r.utilisation or 0.0 for r in runs]))
        row.append(_mean_sd([r.fragmentation_mean or 0.0 for r in runs]))
        longest = [r.longest_8gpu_wait for r in runs if r.longest_8gpu_wait is not None]
        row.append(_mean_sd(longest))
    return row


def format_table(runs: Sequence[RunResult]) -> str:
    """One row per policy (mean ± sd over seeds)."""
    if not runs:
        return "no runs\n"
    events = runs[0].mean_allocation is not None
    alloc = ["alloc mean%", "alloc peak%"] if events else [f"alloc@{k}%" for k in REPORT_POINTS]
    header = ["policy", "runs", *alloc, "fragmented%", "fragmented GPUs", "gang wait s"]
    header += ["jobs placed", "decisions/s"]
    if events:
        header += ["util%", "frag over time%", "8-GPU max wait s"]
    rows = [header] + [_row(p, rs, REPORT_POINTS) for p, rs in by_policy(runs).items()]
    text = _columns(rows)
    if events:
        text += "\n" + _columns(_figure_rows(runs))
        text += "\n" + _columns(_wait_rows(runs))
    if any(r.queues for r in runs):
        text += "\n" + _columns(_queue_rows(runs))
    if any(r.preemption is not None for r in runs):
        text += "\n" + _columns(_preemption_rows(runs))
    return text


_WAIT_HEADER = (
    "policy",
    "class",
    "pods",
    "started",
    "wait mean s",
    "wait p50 s",
    "wait p99 s",
    "longest s",
)
_FIGURE_HEADER = (
    "policy",
    "mean wait s",
    "GPU-weighted wait s",
    "mean JCT s",
    "mean slowdown",
    "makespan s",
)


def _figure_rows(runs: Sequence[RunResult]) -> list[list[str]]:
    """Per policy, the figures over every pod and job: mean ± sd over seeds."""
    rows = [list(_FIGURE_HEADER)]
    for policy, group in by_policy(runs).items():
        figures = [r.figures for r in group if r.figures is not None]
        means = [r.waits[ALL].mean for r in group if ALL in r.waits]
        rows.append(
            [
                policy,
                _mean_sd([m for m in means if m is not None]),
                _mean_sd([f.gpu_weighted_wait for f in figures if f.gpu_weighted_wait is not None]),
                _mean_sd([f.mean_completion for f in figures if f.mean_completion is not None]),
                _mean_sd([f.mean_slowdown for f in figures if f.mean_slowdown is not None]),
                _mean_sd([f.makespan for f in figures if f.makespan is not None]),
            ]
        )
    return rows


def _wait_rows(runs: Sequence[RunResult]) -> list[list[str]]:
    """Per policy and pod class: mean ± sd over seeds."""
    rows = [list(_WAIT_HEADER)]
    for policy, group in by_policy(runs).items():
        for name in group[0].waits:
            waits = [r.waits[name] for r in group if name in r.waits]
            rows.append(
                [
                    policy,
                    name,
                    str(waits[0].pods),
                    f"{statistics.fmean(w.started for w in waits):.0f}",
                    _mean_sd([w.mean for w in waits if w.mean is not None]),
                    _mean_sd([w.p50 for w in waits if w.p50 is not None]),
                    _mean_sd([w.p99 for w in waits if w.p99 is not None]),
                    _mean_sd([w.longest for w in waits if w.longest is not None]),
                ]
            )
    return rows


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


_PREEMPTION_HEADER = (
    "policy",
    "seed",
    "victim sets",
    "pods evicted",
    "GPU-s lost",
    "partial gangs",
    "evictions without start",
    "holds",
    "held GPU-s",
)


def _preemption_rows(runs: Sequence[RunResult]) -> list[list[str]]:
    rows = [list(_PREEMPTION_HEADER)]
    for run in runs:
        p = run.preemption
        if p is not None:
            cells = (
                p.preemptions,
                p.pods_evicted,
                p.gpu_seconds_lost,
                p.partial_gangs,
                p.wasted,
                p.holds,
                p.held_gpu_seconds,
            )
            rows.append([run.policy, str(run.seed), *(_figure(c) for c in cells)])
    return rows
