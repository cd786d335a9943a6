"""The simulator's plots (`--plot`): allocation against arrived demand for the protocol (with a
zoom on the 90-130 % range where policies part), allocation and fragmentation over time for
events; titles name what was compared. matplotlib is optional and loaded only here, only for
`--plot`; `plot_problem` checks a target before any run."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from scheduler.sim.metrics import TIMELINE_POINTS
from scheduler.sim.protocol import RunResult
from scheduler.sim.report import by_policy

__all__ = [
    "PLOT_FORMATS",
    "ZOOM",
    "event_settings",
    "last_arrival_hours",
    "mean_timeline",
    "plot_problem",
    "plot_runs",
    "plot_title",
    "timeline_axis",
]


def _mean_curve(runs: Sequence[RunResult]) -> tuple[list[int], list[float]]:
    points = sorted({k for r in runs for k in r.allocation})
    xs, ys = [], []
    for k in points:
        values = [r.allocation[k] for r in runs if k in r.allocation]
        xs.append(k)
        ys.append(statistics.fmean(values))
    return xs, ys


def mean_timeline(runs: Sequence[RunResult]) -> tuple[list[float], list[float], list[float]]:
    """Hours since the first arrival, and allocation and fragmentation (mean over seeds) at the
    instants every run sampled: the arrival window and on to the last departure."""
    samples = [r.timeline for r in runs if r.timeline]
    if not samples:
        return [], [], []
    common = set.intersection(*({s.time for s in run} for run in samples))
    by_time = [{s.time: s for s in run} for run in samples]
    times = sorted(common)
    start = samples[0][0].time
    hours = [(t - start) / 3600 for t in times]
    alloc = [statistics.fmean(run[t].allocation for run in by_time) for t in times]
    frag = [statistics.fmean(run[t].fragmentation for run in by_time) for t in times]
    return hours, alloc, frag


def timeline_axis(runs: Sequence[RunResult]) -> tuple[float, float]:
    """The time axis of an event-mode plot, in hours since the first arrival: to the end of the
    longest run (its makespan, the last departure), so no run's end is cut off."""
    ends = [(r.timeline[-1].time - r.timeline[0].time) / 3600 for r in runs if r.timeline]
    ends += [r.figures.makespan / 3600 for r in runs if r.figures and r.figures.makespan]
    return 0.0, max(ends, default=0.0)


def last_arrival_hours(runs: Sequence[RunResult]) -> float | None:
    """Where the arrival window (util%, frag over time%) ends, in hours since the first arrival:
    its last instant is the timeline's sample `TIMELINE_POINTS`."""
    windows = [r.timeline for r in runs if len(r.timeline) > TIMELINE_POINTS]
    if not windows:
        return None
    return (windows[0][TIMELINE_POINTS].time - windows[0][0].time) / 3600


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
    """Protocol: allocation vs arrived demand; events: allocation and fragmentation vs time from
    the first arrival to the last departure (the arrival window's end marked). One line per
    policy (mean over seeds)."""
    import matplotlib  # optional dependency: loaded only for --plot

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if runs and runs[0].mean_allocation is not None:
        _plot_timeline(plt, runs, path, title)
        return
    fig, (whole, zoom) = plt.subplots(1, 2, figsize=(11, 4.8))
    curves = {policy: _mean_curve(group) for policy, group in by_policy(runs).items()}
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
    for policy, group in by_policy(runs).items():
        hours, alloc, frag = mean_timeline(group)
        top.plot(hours, alloc, label=policy, linewidth=1.2)
        bottom.plot(hours, frag, label=policy, linewidth=1.2)
    top.set_ylabel("GPU allocation (%)")
    bottom.set_ylabel("fragmentation (% of GPUs)")
    bottom.set_xlabel("hours since the first arrival")
    fig.suptitle(title or "allocation and fragmentation to the last departure", fontsize=10)
    last_arrival = last_arrival_hours(runs)
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
        ax.set_xlim(*timeline_axis(runs))
        if last_arrival is not None:
            ax.axvline(last_arrival, color="grey", linestyle="--", linewidth=0.8)
    if last_arrival is not None:
        top.annotate(
            " last arrival", (last_arrival, 1.0), xycoords=("data", "axes fraction"), va="top"
        )
    top.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
