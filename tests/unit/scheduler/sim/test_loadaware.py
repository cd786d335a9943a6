"""The load-aware study (issue 47): the same workload with uneven real use, placed with
load-awareness off and on through the one decision API; every figure is printed."""

from __future__ import annotations

import pytest

from scheduler.cli.simulate import main
from scheduler.placement import default_scoring
from scheduler.sim.loadaware import run_load_study
from scheduler.sim.sharing import PodUse
from scheduler.sim.workload import WorkloadError, load_cluster, load_workload


def test_load_awareness_places_fewer_pods_where_use_would_exceed_memory() -> None:
    spec, workload = load_cluster("load"), load_workload("load")
    off, on = (
        run_load_study(spec, workload, default_scoring(), load_aware=aware)
        for aware in (False, True)
    )
    assert off.pods == on.pods == 96
    assert on.over_placements < off.over_placements
    assert on.gpus_over < off.gpus_over
    assert on.refused == on.measured_refusals > 0
    assert off.measured_refusals == 0
    assert on.placed + on.refused == off.placed + off.refused


def test_workload_pods_may_say_what_they_really_use(tmp_path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(
        "version: v1\njobs:\n  - name: a\n    pod: {gpuMemory: 10Gi, use: {memory: 30Gi, sm: 70}}\n"
    )
    assert load_workload(str(path)).jobs[0].pod.use == PodUse(memory=30 << 30, sm=70)
    path.write_text("version: v1\njobs:\n  - name: a\n    pod: {gpuMemory: 10Gi, use: {sm: 7}}\n")
    with pytest.raises(WorkloadError, match=r"jobs\[0\]\.pod\.use"):
        load_workload(str(path))


def test_the_cli_prints_every_figure_of_both_runs(capsys) -> None:
    assert main(["--load-aware"]) == 0
    out = capsys.readouterr().out
    assert "load-aware off" in out
    assert "load-aware on" in out
    for label in ("pods placed", "pods refused", "placements where real use exceeded"):
        assert label in out
