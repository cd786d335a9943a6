"""`bench/day_before_study.py`: two answers to "which policy is lower" compared workload by
workload; the chooser; the day's runs shared with `generalise_study.py --history`."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import pytest

from tests.builders.benchscripts import load_bench

pytest.importorskip("scipy")


def _bench() -> ModuleType:
    return load_bench("day_before_study")


def test_the_simulator_seeds_split_in_two_halves() -> None:
    assert _bench().halves([1, 2, 3, 4, 5]) == ([1, 2], [3, 4, 5])
    with pytest.raises(ValueError, match="--sim-seeds 7: two or more to split"):
        _bench().halves([7])


def test_one_simulator_seed_is_refused_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _bench().main(["--seeds", "1", "--sim-seeds", "3"])
    assert exit_info.value.code == 2
    assert "--sim-seeds 3: two or more to split" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("other", "rho", "same"),
    [
        pytest.param({"a": -5.0, "b": 1.0, "c": 9.0}, 1.0, 3, id="same order and signs"),
        pytest.param({"a": 3.0, "b": 2.0, "c": -1.0}, -1.0, 1, id="reversed"),
        pytest.param({"a": 0.0, "b": 0.0, "c": 0.0}, None, 0, id="no difference anywhere"),
    ],
)
def test_two_answers_agree_by_rank_and_by_sign(
    other: dict[str, float], rho: float | None, same: int
) -> None:
    one = {"a": -2.0, "b": 4.0, "c": 8.0}
    found, agreeing = _bench().agreement(one, other)
    assert agreeing == same
    assert found == (rho if rho is None else pytest.approx(rho))


def test_a_tie_agrees_only_with_a_tie() -> None:
    assert _bench().agreement({"a": 0.0, "b": 1.0}, {"a": 0.0, "b": -1.0})[1] == 1
    assert _bench().agreement({"a": 0.0, "b": 1.0}, {"a": 2.0, "b": 1.0})[1] == 1


TINY = ["--generated-jobs", "15", "--generated-nodes", "2", "--jobs", "1"]


def test_a_tiny_study_compares_both_ways_and_pairs_the_chooser(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["--seeds", "1-3", "--sim-seeds", "1,2", "--before-sim-seeds", "1", *TINY]
    assert _bench().main([*argv, "--cache", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "# 3 workloads (seeds 1-3; 15 jobs, 2 GPU nodes" in out
    assert "the same day at simulator seeds 1 against 2 (rho: Spearman" in out
    assert "which policy is lower, the day before against the day:" in out
    pairs = r"gputopo-fgd rho \S+, same \d/3; gputopo-bestfit rho \S+, same \d/3; fgd-bestfit"
    for figure in ("mean wait", "makespan"):
        assert len(re.findall(rf"  {figure}: {pairs} rho \S+, same \d/3", out)) == 2  # both ways
    picked = re.search(
        r"picked gputopo (\d), fgd (\d), bestfit (\d); the day's lowest on \d of 3",
        out,
    )
    assert picked is not None
    assert sum(int(n) for n in picked.groups()) == 3
    assert re.search(r"  mean wait: gputopo rho \S+; fgd rho \S+; bestfit rho \S+\n", out)
    assert "the day's lowest of the three on each workload, known only after it: mean wait " in out
    assert "chooser paired with each peer, workload by workload (difference chooser - peer;" in out
    assert "  vs bestfit over 3 workloads: mean wait " in out
    assert "27 runs computed, 0 from the cache" in out  # 3 x 3 x 2 of the day, 3 x 3 before
    assert len(list(tmp_path.glob("gen?-day-1-*.json"))) == 9


def test_the_days_runs_are_generalise_studys_with_the_day_before(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cache = ["--cache", str(tmp_path)]
    study = load_bench("generalise_study")
    assert study.main(["--tuning", "none", "--judging", "4", "--sim-seeds", "1,2", "--history",
                       "--beside", "none", *TINY, *cache]) == 0  # fmt: skip
    capsys.readouterr()
    argv = ["--seeds", "4", "--sim-seeds", "1,2", "--before-sim-seeds", "1,2", *TINY, *cache]
    assert _bench().main(argv) == 0
    assert "6 runs computed, 6 from the cache" in capsys.readouterr().out  # the day before's
    assert _bench().main(argv) == 0
    assert "0 runs computed, 12 from the cache" in capsys.readouterr().out
