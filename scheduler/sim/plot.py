"""The simulator's plots (`--plot FILE`), one line per policy, mean over the seeds.

* protocol: GPU allocation against arrived GPU demand, the whole range beside a zoom on
  90..130 % arrived demand, where the policies part;
* events: allocation and fragmentation against hours since the first arrival.

The title names what was compared (policies, cluster, workload) and how (seeds, inflation or
replay settings). matplotlib is optional (the `plot` extra): `check_plot_path` says before a run
whether a plot can be written at all.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scheduler.sim.protocol import RunResult

__all__ = ["PLOT_SUFFIXES", "PlotCaption", "PlotError", "check_plot_path", "plot_runs"]

PLOT_SUFFIXES = (".png", ".svg", ".pdf")
PLOT_EXTRA = "gputopo[plot]"
ZOOM = (90, 130)  # arrived demand (%) where the policies differ


class PlotError(ValueError):
    """A plot that cannot be written (the message is one line naming the cause)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PlotCaption:
    """What the plot compares: the inputs by name, and the settings line (seeds, inflation or
    replay settings)."""

    cluster: str
    workload: str
    settings: str


def check_plot_path(path: Path) -> None:
    """Raise `PlotError` unless a plot can be written to `path`: a known extension, an existing
    writable directory, matplotlib installed."""
    if path.suffix.lower() not in PLOT_SUFFIXES:
        known = ", ".join(PLOT_SUFFIXES)
        raise PlotError(f"--plot {path}: unknown extension {path.suffix or '(none)'!r} ({known})")
    folder = path.parent
    if not folder.is_dir():
        raise PlotError(f"--plot {path}: no such directory {folder}")
    if not os.access(folder, os.W_OK):
        raise PlotError(f"--plot {path}: cannot write in {folder}")
    try:
        import matplotlib  # noqa: F401  # optional dependency, only for --plot
    except ImportError:
        raise PlotError(f"--plot needs matplotlib: pip install '{PLOT_EXTRA}'") from None


def _by_policy(runs: Sequence[RunResult]) -> dict[str, list[RunResult]]:
    grouped: dict[str, list[RunResult]] = {}
    for run in runs:
        grouped.setdefault(run.policy, []).append(run)
    return grouped


def _title(runs: Sequence[RunResult], caption: PlotCaption, what: str) -> str:
    policies = " vs ".join(_by_policy(runs))
    seeds = [str(s) for s in dict.fromkeys(r.seed for r in runs)]
    seen = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {','.join(seeds)} (mean over seeds)"
    return (
        f"{what}: {policies}\n"
        f"cluster {caption.cluster}, workload {caption.workload}\n"
        f"{seen}; {caption.settings}"
    )


def _mean_curve(runs: Sequence[RunResult]) -> tuple[list[int], list[float]]:
    points = sorted({k for r in runs for k in r.allocation})
    ys = [statistics.fmean(r.allocation[k] for r in runs if k in r.allocation) for k in points]
    return points, ys


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


def plot_runs(runs: Sequence[RunResult], path: Path, caption: PlotCaption) -> None:
    """Write the plot of `runs` (protocol or events, by the runs' kind) to `path`."""
    import matplotlib  # optional dependency: loaded only for --plot

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if runs and runs[0].mean_allocation is not None:
        fig = _timeline_figure(plt, runs, caption)
    else:
        fig = _protocol_figure(plt, runs, caption)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _zoom_limits(curves: Sequence[tuple[list[int], list[float]]]) -> tuple[float, float] | None:
    inside = [y for xs, ys in curves for x, y in zip(xs, ys, strict=True) if ZOOM[0] <= x]
    if not inside:
        return None
    low, high = min(inside), max(inside)
    pad = max(0.25, (high - low) * 0.08)
    return low - pad, high + pad


def _protocol_figure(plt: Any, runs: Sequence[RunResult], caption: PlotCaption) -> Any:
    fig, (whole, zoom) = plt.subplots(1, 2, figsize=(12, 5.2), width_ratios=(1, 1.2))
    curves = {policy: _mean_curve(group) for policy, group in _by_policy(runs).items()}
    for policy, (xs, ys) in curves.items():
        whole.plot(xs, ys, label=policy, linewidth=1.4)
        zoom.plot(xs, ys, label=policy, linewidth=1.6)
    top = max((x for xs, _ in curves.values() for x in xs), default=ZOOM[1])
    zoom.set_xlim(ZOOM[0], max(ZOOM[1], top))
    limits = _zoom_limits(list(curves.values()))
    if limits is not None:
        zoom.set_ylim(*limits)
        whole.axvspan(ZOOM[0], max(ZOOM[1], top), color="0.9", zorder=0)
    whole.set_title("whole run (shaded: zoomed on the right)", fontsize=10)
    zoom.set_title(f"zoom: {ZOOM[0]}% arrived demand and above", fontsize=10)
    for ax in (whole, zoom):
        ax.set_xlabel("arrived GPU demand (% of cluster GPU capacity)")
        ax.grid(True, alpha=0.3)
    whole.set_ylabel("GPU allocation (% of cluster GPU capacity)")
    zoom.legend(loc="lower right")
    fig.suptitle(_title(runs, caption, "GPU allocation vs arrived demand"), fontsize=10)
    fig.tight_layout()
    return fig


def _timeline_figure(plt: Any, runs: Sequence[RunResult], caption: PlotCaption) -> Any:
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7.5), sharex=True)
    for policy, group in _by_policy(runs).items():
        hours, alloc, frag = _mean_timeline(group)
        top.plot(hours, alloc, label=policy, linewidth=1.2)
        bottom.plot(hours, frag, label=policy, linewidth=1.2)
    top.set_ylabel("GPU allocation (%)")
    bottom.set_ylabel("fragmentation (% of GPU capacity)")
    bottom.set_xlabel("hours since the first arrival")
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
    top.legend()
    title = _title(runs, caption, "allocation and fragmentation over the arrival window")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
