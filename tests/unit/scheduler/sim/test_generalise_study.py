"""`bench/generalise_study.py`: tuning and judging seeds never overlap; a tiny run prints both
tables and its runtime."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.builders.benchscripts import load_bench


def _bench() -> ModuleType:
    return load_bench("generalise_study")


def test_disjoint_ranges_are_taken() -> None:
    assert _bench().seed_ranges("1-3", "4,6") == ([1, 2, 3], [4, 6])


@pytest.mark.parametrize(
    ("tuning", "judging", "shared"),
    [
        pytest.param("1-10", "5-20", r"\(5, 6, 7, 8, 9, \.\.\.\)", id="ranges overlap"),
        pytest.param("1,2,3", "3", r"\(3\)", id="one seed in both"),
    ],
)
def test_overlapping_ranges_are_refused(tuning: str, judging: str, shared: str) -> None:
    with pytest.raises(ValueError, match=rf"share seeds {shared}: a policy must be judged"):
        _bench().seed_ranges(tuning, judging)


def test_the_command_refuses_overlap_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _bench().main(["--tuning", "1-2", "--judging", "2-3"])
    assert exit_info.value.code == 2
    assert "--tuning 1-2 and --judging 2-3 share seeds (2)" in capsys.readouterr().err


def test_a_tiny_study_prints_both_ranges_and_its_runtime(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--tuning", "1", "--judging", "2", "--generated-jobs", "15", "--generated-nodes", "2"]
    assert _bench().main([*argv, "--beside", "none", "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "## tuning workloads (seeds 1; 15 jobs, 2 GPU nodes, 1 CPU nodes, load 1.2)" in out
    assert "## judging workloads (seeds 2;" in out
    assert [line.split()[0] for line in out.splitlines() if line.startswith("gen-")] == (
        ["gen-1/" + out.split("gen-1/")[1].split()[0]] * 5
        + ["gen-2/" + out.split("gen-2/")[1].split()[0]] * 5
    )
    assert out.rstrip().endswith("s on 1 processes")
