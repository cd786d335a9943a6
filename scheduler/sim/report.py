"""Simulator output: a table per policy, the JSON document of DESIGN §8, and the allocation plot.

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
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from scheduler.sim.metrics import ClassWaits
from scheduler.sim.protocol import RunResult
from scheduler.sim.queues import QueueReport
from scheduler.sim.replay import Replay

__all__ = [
    "PLOT_FORMATS",
    "REPORT_POINTS",
    "event_settings",
    "format_table",
    "plot_problem",
    "plot_runs",
    "plot_title",
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
    if run.queues:
        doc["queues"] = [_queue_document(q) for q in run.queues]
    if run.preemption is not None:
        p = run.preemption
        doc["preemption"] = {
            "victimSets": p.preemptions,
            "podsEvicted": p.pods_evicted,
            "gpuSecondsLost": p.gpu_seconds_lost,
            "partialGangs": p.partial_gangs,
            "evictionsWithoutStart": p.wasted,
            "podsEvictedByReason": dict(p.by_reason),
        }
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
    text = _columns(rows)
    if events:
        text += "\n" + _columns(_wait_rows(runs))
    if any(r.queues for r in runs):
        text += "\n" + _columns(_queue_rows(runs))
    if any(r.preemption is not None for r in runs):
        text += "\n" + _columns(_preemption_rows(runs))
    return text


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


_PREEMPTION_HEADER = (
    "policy",
    "seed",
    "victim sets",
    "pods evicted",
    "GPU-s lost",
    "partial gangs",
    "evictions without start",
)


def _preemption_rows(runs: Sequence[RunResult]) -> list[list[str]]:
    rows = [list(_PREEMPTION_HEADER)]
    for run in runs:
        p = run.preemption
        if p is not None:
            cells = (p.preemptions, p.pods_evicted, p.gpu_seconds_lost, p.partial_gangs, p.wasted)
            rows.append([run.policy, str(run.seed), *(_figure(c) for c in cells)])
    return rows


def _mean_curve(runs: Sequence[RunResult]) -> tuple[list[int], list[float]]:
    points = sorted({k for r in runs for k in r.allocation})
    xs, ys = [], []
    for k in points:
        values = [r.allocation[k] for r in runs if k in r.allocation]
        xs.append(k)
        ys.append(statistics.fmean(values))
    return xs, ys


def _mean_timeline(runs: Sequence[RunResult]) -> tuple[list[float], list[float], list[float]]:
    """Hours since the first sample, and allocation and fragmentation (mean over seeds)."""
    samples = [r.timeline for r in runs if r.timeline]
    if not samples:
        return [], [], []
    points = min(len(s) for s in samples)
    start = samples[0][0].time
    hours = [(samples[0][i].time - start) / 3600 for i in range(points)]
    alloc = [statistics.fmean(s[i].allocation for s in samples) for i in range(points)]
    frag = [statistics.fmean(s[i].fragmentation for s in samples) for i in range(points)]
    return hours, alloc, frag


PLOT_FORMATS = ("png", "pdf", "svg")
ZOOM = (90, 130)  # % arrived demand: the protocol's range where policies part


def plot_problem(path: Path) -> str | None:
    """Why `--plot path` cannot be written, in one line (checked before any run), else None."""
    try:
        import matplotlib  # noqa: F401  (an optional dependency)
    except ImportError:
        return "matplotlib is not installed: pip install -e '.[plot]' (or pip install matplotlib)"
    suffix = path.suffix.lower().lstrip(".")
    if suffix not in PLOT_FORMATS:
        known = ", ".join(f".{f}" for f in PLOT_FORMATS)
        return f"{path}: unknown plot format {path.suffix or '(no extension)'!r} (use {known})"
    if not path.parent.is_dir():
        return f"{path}: directory {path.parent} does not exist"
    return None


def event_settings(inputs: Mapping[str, Any]) -> str:
    """Event mode's knobs that differ from their defaults, in words ("" when none does)."""
    parts = []
    if inputs.get("load", 1) != 1:
        parts.append(f"load {inputs['load']:g}")
    if inputs.get("replayStart") is not None:
        parts.append(f"from recorded second {inputs['replayStart']:,}")
    if inputs.get("nodeShare", 1) != 1:
        parts.append(f"node share {inputs['nodeShare']:g}")
    if inputs.get("gangWindow") is not None:
        parts.append(f"gang window {inputs['gangWindow']:g} s")
    if inputs.get("shuffleNodes"):
        parts.append("nodes ranked by the seed")
    return f", {', '.join(parts)}" if parts else ""


def plot_title(inputs: Mapping[str, Any]) -> str:
    """What a plot compares: policies, cluster, workload, seeds, and the inflation (protocol) or
    the settings that shape a replay (events), one line each."""
    seeds = inputs["seeds"]
    seed_text = (
        f"seed {seeds[0]}" if len(seeds) == 1 else f"mean of seeds {','.join(map(str, seeds))}"
    )
    mode = (
        f"inflated to {inputs['inflate'] * 100:g} %"
        if inputs["mode"] == "protocol"
        else "events" + event_settings(inputs)
    )
    cluster, workload = (_input_name(inputs[k]) for k in ("cluster", "workload"))
    return (
        f"{' vs '.join(inputs['policies'])}\ncluster {cluster} × workload {workload}\n"
        f"{seed_text}; {mode}"
    )


def _input_name(ref: str) -> str:
    """A file's name, or `built-in <name>`."""
    path = Path(ref)
    return path.name if path.suffix or "/" in ref else f"built-in {ref}"


def plot_runs(runs: Sequence[RunResult], path: Path, title: str = "") -> None:
    """Protocol: allocation vs arrived demand; events: allocation and fragmentation vs time over
    the arrival window. One line per policy (mean over seeds)."""
    import matplotlib  # optional dependency: loaded only for --plot

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if runs and runs[0].mean_allocation is not None:
        _plot_timeline(plt, runs, path, title)
        return
    fig, (whole, zoom) = plt.subplots(1, 2, figsize=(11, 4.8))
    curves = {policy: _mean_curve(group) for policy, group in _by_policy(runs).items()}
    for policy, (xs, ys) in curves.items():
        whole.plot(xs, ys, label=policy, linewidth=1.5)
        zoom.plot(xs, ys, label=policy, linewidth=1.5)
    whole.set_title("whole run")
    zoom.set_title(f"zoom: {ZOOM[0]}–{ZOOM[1]} % arrived, where policies differ")
    zoom.set_xlim(*ZOOM)
    low = [y for xs, ys in curves.values() for x, y in zip(xs, ys, strict=True) if x >= ZOOM[0]]
    if low:
        zoom.set_ylim(max(0.0, min(low) - 1.0), min(100.0, max(low) + 0.5))
    for ax in (whole, zoom):
        ax.set_xlabel("arrived GPU demand (% of cluster GPU capacity)")
        ax.set_ylabel("GPUs allocated (% of capacity)")
        ax.grid(True, alpha=0.3)
    whole.legend()
    fig.suptitle(title or "GPU allocation vs arrived demand", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _plot_timeline(plt: Any, runs: Sequence[RunResult], path: Path, title: str) -> None:
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    for policy, group in _by_policy(runs).items():
        hours, alloc, frag = _mean_timeline(group)
        top.plot(hours, alloc, label=policy, linewidth=1.2)
        bottom.plot(hours, frag, label=policy, linewidth=1.2)
    top.set_ylabel("GPU allocation (%)")
    bottom.set_ylabel("fragmentation (% of GPUs)")
    bottom.set_xlabel("hours since the first arrival")
    fig.suptitle(title or "allocation and fragmentation over the arrival window", fontsize=10)
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
    top.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
