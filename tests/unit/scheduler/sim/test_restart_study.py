"""`bench/restart_study.py`: the three ways on a tiny run, and its sign test."""

from __future__ import annotations

import pytest

from scheduler.sim.generate import Size
from tests.builders.benchscripts import load_bench


def test_a_tiny_study_prints_every_way_against_no_restart(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench = load_bench("restart_study")
    argv = ["--seeds", "1-2", "--sim-seeds", "1,2", "--generated-jobs", "40"]
    assert bench.main([*argv, "--generated-nodes", "3", "--jobs", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("gputopo, a restart halfway through the arrivals; workloads 1-2")
    rows = {line.split()[0]: line for line in lines[2:5]}
    assert list(rows) == ["none", "prior", "running"]
    assert "than" not in rows["none"]
    assert "than none: " in rows["prior"]
    assert "; than prior: " in rows["running"]
    assert lines[5].startswith("12 runs, ")


def test_the_restart_falls_between_the_first_and_last_arrival() -> None:
    bench = load_bench("restart_study")
    size = Size(jobs=40, gpu_nodes=3, cpu_nodes=1)
    jobs = bench.generate(3, size).workload.jobs
    assert jobs[0].arrival < bench.halfway(3, size) < jobs[-1].arrival


@pytest.mark.parametrize(
    ("lower", "higher", "p"), [(0, 0, 1.0), (5, 5, 1.0), (0, 6, 0.03125), (10, 0, 2 / 1024)]
)
def test_the_sign_test_is_two_sided(lower: int, higher: int, p: float) -> None:
    assert load_bench("restart_study").sign_test(lower, higher) == pytest.approx(p)
