"""Simulator output: the header naming the inputs, a table per policy with the definitions of its
columns, and the JSON document (its shape is below and in `scheduler/sim/README.md`).

JSON (`--json`), one entry per policy and seed; ratios in percent of the cluster's GPU capacity:

```json
{"inputs": {"cluster": "...", "workload": "...", "policies": ["gputopo", "fgd"], "seeds": [42],
            "mode": "protocol", "inflate": 1.3, ...},
 "runs": [{"policy": "fgd", "seed": 42, "allocationRatio": {"100": 95.4, "130": 95.6},
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
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from scheduler.sim.metrics import ClassWaits
from scheduler.sim.protocol import RunResult
from scheduler.sim.queues import QueueReport
from scheduler.sim.replay import Replay

__all__ = [
    "COLUMNS",
    "REPORT_POINTS",
    "format_header",
    "format_table",
    "replay_document",
    "runs_document",
]

REPORT_POINTS = (100, 130)

# Every column of the text tables, as printed under them (the long form: scheduler/sim/README.md).
COLUMNS: dict[str, str] = {
    "seeds": "runs per policy; each figure is the mean ± sd over them",
    "alloc@100%": "GPU allocation (% of the cluster's GPU capacity) at 100 % arrived GPU demand",
    "alloc@130%": "the same at 130 % arrived demand (the protocol's end: nothing departs)",
    "alloc mean%": "GPU allocation (% of capacity), time-weighted over the whole run",
    "alloc peak%": "the highest GPU allocation during the run",
    "fragmented%": "free GPU capacity the typical pods cannot use (FGD's fragmentation), % of "
    "capacity, at the end (events: as the last job arrived)",
    "fragmented GPUs": "GPUs partly used (a share taken, the rest free) at that moment",
    "gang wait s": "mean seconds from a gang's arrival to its start (events only)",
    "jobs placed": "placed / total (protocol: pods, each tried once; events: jobs)",
    "decisions/s": "placement decisions per second spent deciding",
    "util%": "GPU allocation integrated from the first to the last arrival, % of capacity",
    "frag over time%": "fragmentation (as fragmented%) averaged over 101 samples of that window",
    "8-GPU max wait s": "the longest wait of a pod asking 8 whole GPUs",
    "class": "pod class: share (< 1 GPU), 1/2/4/8-gpu, gang (members of a gang), cpu, mig",
    "pods": "pods of that class that arrived",
    "started": "pods of that class that started",
    "wait p50 s": "median seconds from a job's arrival to its pod's start (pods that started)",
    "wait p99 s": "99th percentile of that wait (nearest rank)",
    "longest s": "the longest of that wait",
    "seed": "the run's seed (one row per run)",
    "queue": "a leaf queue (t1..tN with --tenants)",
    "min GPUs": "the queue's guarantee",
    "max GPUs": "the queue's cap (- none)",
    "pods started": "started / arrived pods of the queue",
    "GPU-s": "GPU-seconds the queue's pods ran",
    "peak GPUs": "the most GPUs the queue held at once",
    "deficit GPU-s": "GPU-seconds of within-guarantee work pending while below min",
}


def format_header(inputs: Mapping[str, Any]) -> str:
    """What was run, before the table: `inputs` as `runs_document` records them."""
    cluster, workload = inputs["cluster"], inputs["workload"]
    lines = [
        f"cluster:  {cluster['source']} ({cluster['nodes']:,} nodes, {cluster['gpus']:,} GPUs)",
        f"workload: {workload['source']} ({workload['jobs']:,} jobs, {workload['pods']:,} pods)",
        f"policies: {', '.join(inputs['policies'])}; seeds: "
        f"{', '.join(str(s) for s in inputs['seeds'])}",
        f"mode:     {inputs['mode']}; {settings_line(inputs)}",
    ]
    return "".join(f"{line}\n" for line in lines) + "\n"


def settings_line(inputs: Mapping[str, Any]) -> str:
    """The mode's settings in words: the protocol's inflation, or event mode's replay knobs."""
    if inputs["mode"] == "protocol":
        return (
            f"pods shuffled by the seed and inflated to {inputs['inflate'] * 100:g} % of GPU "
            "capacity, each tried once, nothing departs"
        )
    replay = inputs.get("replay") or {}
    parts = ["arrivals, durations and departures as given"]
    if replay:
        start = replay["start"]
        parts.append(f"load {replay['load']:g}")
        parts.append("from the first arrival" if start is None else f"from second {start:,}")
        parts.append(f"node share {replay['nodeShare']:g}")
        window = replay["gangWindow"]
        parts.append("no gangs" if window is None else f"gang window {window:g} s")
    if inputs.get("shuffleNodes"):
        parts.append("nodes ranked by the seed")
    return ", ".join(parts)


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
    if run.queues:
        doc["queues"] = [_queue_document(q) for q in run.queues]
    return doc


def _waits_document(waits: ClassWaits) -> dict[str, Any]:
    return {
        "pods": waits.pods,
        "started": waits.started,
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
    }


def runs_document(
    runs: Iterable[RunResult],
    replay: Replay | None = None,
    inputs: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The `--json` document; `inputs` (what `format_header` prints) first when given."""
    doc: dict[str, Any] = {} if inputs is None else {"inputs": dict(inputs)}
    doc["runs"] = [_run_document(r) for r in runs]
    if replay is not None:
        doc["replay"] = replay_document(replay)
    return doc


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
    header = ["policy", "seeds", *alloc, "fragmented%", "fragmented GPUs", "gang wait s"]
    header += ["jobs placed", "decisions/s"]
    if events:
        header += ["util%", "frag over time%", "8-GPU max wait s"]
    rows = [header] + [_row(p, rs, REPORT_POINTS) for p, rs in _by_policy(runs).items()]
    text = _columns(rows) + _legend(header)
    if events:
        text += "\n" + _columns(_wait_rows(runs)) + _legend(_WAIT_HEADER)
    if any(r.queues for r in runs):
        text += "\n" + _columns(_queue_rows(runs)) + _legend(_QUEUE_HEADER)
    return text


def _legend(header: Sequence[str]) -> str:
    """One line per column `COLUMNS` defines, indented under its table."""
    named = [name for name in header if name in COLUMNS]
    width = max((len(name) for name in named), default=0)
    return "".join(f"  {name.ljust(width)}  {COLUMNS[name]}\n" for name in named)


_WAIT_HEADER = ("policy", "class", "pods", "started", "wait p50 s", "wait p99 s", "longest s")


def _wait_rows(runs: Sequence[RunResult]) -> list[list[str]]:
    """Per policy and pod class: mean ± sd over seeds."""
    rows = [list(_WAIT_HEADER)]
    for policy, group in _by_policy(runs).items():
        for name in group[0].waits:
            waits = [r.waits[name] for r in group if name in r.waits]
            rows.append(
                [
                    policy,
                    name,
                    str(waits[0].pods),
                    f"{statistics.fmean(w.started for w in waits):.0f}",
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
