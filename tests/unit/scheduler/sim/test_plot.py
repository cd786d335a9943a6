"""`scheduler.sim.plot`: the checks before a run, and both kinds of plot rendered to PNG."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scheduler.sim.events import run_events
from scheduler.sim.plot import PlotCaption, PlotError, check_plot_path, plot_runs
from scheduler.sim.protocol import run_protocol
from scheduler.sim.workload import load_cluster, load_workload
from tests.builders.sim import write_trace

PNG = b"\x89PNG\r\n\x1a\n"
CAPTION = PlotCaption(cluster="nodes.csv", workload="pods.csv", settings="inflated to 130 %")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        pytest.param("out.jpeg", "unknown extension '.jpeg' (.png, .svg, .pdf)", id="extension"),
        pytest.param("out", "unknown extension '(none)'", id="no extension"),
        pytest.param("missing/out.png", "no such directory", id="directory"),
    ],
)
def test_a_target_that_cannot_be_written_is_refused(tmp_path: Path, name: str, message: str):
    with pytest.raises(PlotError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_plot_path(tmp_path / name)


def test_a_writable_png_target_passes(tmp_path: Path):
    check_plot_path(tmp_path / "alloc.PNG")
    assert not (tmp_path / "alloc.PNG").exists()  # nothing is written before the run


def test_without_matplotlib_the_check_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)  # import fails
    with pytest.raises(PlotError, match=r"--plot needs matplotlib: pip install 'gputopo\[plot\]'"):
        check_plot_path(tmp_path / "alloc.png")


def _out(tmp_path: Path, name: str) -> Path:
    """Where a plot goes: GPUTOPO_PLOT_DIR when set (to look at it), else the test's tmp_path."""
    folder = os.environ.get("GPUTOPO_PLOT_DIR")
    return Path(folder) / name if folder else tmp_path / name


def test_protocol_plot_renders_with_its_zoom(tmp_path: Path):
    nodes, pods = write_trace(tmp_path, pods=60)
    spec, workload = load_cluster(str(nodes)), load_workload(str(pods))
    runs = [run_protocol(spec, workload, p, s) for p in ("gputopo", "fgd") for s in (1, 2)]
    png = _out(tmp_path, "protocol.png")
    plot_runs(runs, png, CAPTION)
    assert png.read_bytes()[:8] == PNG


def test_events_plot_renders(tmp_path: Path):
    spec, workload = load_cluster("default"), load_workload("default")
    runs = [run_events(spec, workload, p, 42) for p in ("gputopo", "spread")]
    png = _out(tmp_path, "events.png")
    plot_runs(runs, png, PlotCaption(cluster="default", workload="default", settings="as given"))
    assert png.read_bytes()[:8] == PNG
