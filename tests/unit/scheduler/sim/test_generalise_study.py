"""`bench/generalise_study.py`: tuning and judging seeds never overlap; a tiny run prints both
tables and its runtime; run figures are cached, `gputopo`'s against the code."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import pytest

from scheduler.sim.generalise import WorkloadFigures
from scheduler.sim.generate import Size
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


def test_a_range_may_join_several_spans() -> None:
    tuning, judging = _bench().seed_ranges("1-3,8", "101-102,190")
    assert (tuning, judging) == ([1, 2, 3, 8], [101, 102, 190])


@pytest.mark.parametrize("judging", ["5-3", "1-x", "2,,3"])
def test_a_span_that_is_not_n_or_n_to_m_is_named(
    judging: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _bench().main(["--tuning", "none", "--judging", judging])
    assert exit_info.value.code == 2
    assert f"seeds {judging!r}: " in capsys.readouterr().err


def test_either_range_may_be_none_but_not_both() -> None:
    assert _bench().seed_ranges("none", "4-5") == ([], [4, 5])
    with pytest.raises(ValueError, match="both none: nothing to run"):
        _bench().seed_ranges("none", "none")


def test_the_command_refuses_overlap_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _bench().main(["--tuning", "1-2", "--judging", "2-3"])
    assert exit_info.value.code == 2
    assert "--tuning 1-2 and --judging 2-3 share seeds (2)" in capsys.readouterr().err


TINY = ["--generated-jobs", "15", "--generated-nodes", "2", "--beside", "none", "--jobs", "1"]


def test_a_tiny_study_prints_both_ranges_and_its_runtime(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["--tuning", "1", "--judging", "2", "--sim-seeds", "1,2", *TINY]
    assert _bench().main([*argv, "--cache", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert (
        "## tuning workloads (seeds 1; 15 jobs, 2 GPU nodes, 1 CPU nodes, load 1.2; "
        "simulator seeds 1,2; known in advance: fgd: this day's own typical pods)" in out
    )
    assert "## judging workloads (seeds 2;" in out
    assert [line.split()[0] for line in out.splitlines() if line.startswith("gen-")] == (
        ["gen-1/" + out.split("gen-1/")[1].split()[0]] * 5
        + ["gen-2/" + out.split("gen-2/")[1].split()[0]] * 5
    )
    assert "gputopo paired with each peer, workload by workload" in out
    assert "  vs spread over 1 workloads: mean wait " in out
    assert "generated runs: 20 computed, 0 from the cache; their compute time " in out
    assert out.rstrip().endswith("s on 1 processes")
    assert len(list(tmp_path.glob("*.json"))) == 20


def _one_workload_cached(cache: Path) -> list[str]:
    """A tiny study of judging workload 3 alone at simulator seed 1, its runs cached in `cache`."""
    return ["--tuning", "none", "--judging", "3", "--sim-seeds", "1", *TINY, "--cache", str(cache)]


def test_a_second_run_reads_the_cache_and_recomputes_on_request(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = _one_workload_cached(tmp_path)
    assert _bench().main(argv) == 0
    first = capsys.readouterr().out
    assert _bench().main(argv) == 0
    second = capsys.readouterr().out
    assert "generated runs: 0 computed, 5 from the cache;" in second
    assert first.split("generated runs")[0] == second.split("generated runs")[0]
    assert _bench().main([*argv, "--recompute", "fgd,spread"]) == 0
    assert "generated runs: 2 computed, 3 from the cache;" in capsys.readouterr().out


def test_with_history_only_fgd_and_gputopo_run_again(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = _one_workload_cached(tmp_path)
    assert _bench().main(argv) == 0
    capsys.readouterr()
    assert _bench().main([*argv, "--history"]) == 0
    out = capsys.readouterr().out
    assert "known in advance: the day before)" in out
    assert "generated runs: 2 computed, 3 from the cache;" in out
    history = sorted(p.name.split("-")[2] for p in tmp_path.glob("*-history-*.json"))
    assert history == ["fgd", "gputopo"]


def _figures(policy: str) -> WorkloadFigures:
    return WorkloadFigures(
        workload="gen-9/steady", policy=policy, mean_wait=5.0, makespan=50.0, class_p50={}
    )


def test_gputopo_is_cached_against_the_code_and_the_peers_are_flagged(tmp_path: Path) -> None:
    bench = _bench()
    key = {"seed": 9, "size": Size(jobs=10), "sim_seed": 1, "config": None}
    mine, peer = bench.RunKey(policy="gputopo", **key), bench.RunKey(policy="fgd", **key)
    before = bench.Cache(tmp_path, "a" * 64, "c" * 64, frozenset())
    before.store(mine, _figures("gputopo"), 1.5)
    before.store(peer, _figures("fgd"), 2.5)
    after = bench.Cache(tmp_path, "b" * 64, "c" * 64, frozenset())
    assert after.load(mine) is None
    assert after.load(peer) == (_figures("fgd"), 2.5)
    assert (after.hits, after.stale) == (1, 1)
    other_config = bench.Cache(tmp_path, "a" * 64, "d" * 64, frozenset())
    assert other_config.load(mine) is None
    assert other_config.load(peer) is None


def test_the_code_digest_follows_the_code(tmp_path: Path) -> None:
    bench = _bench()
    (tmp_path / "scheduler").mkdir()
    (tmp_path / "agent").mkdir()
    (tmp_path / "scheduler" / "a.py").write_text("x = 1\n")
    first = bench.code_digest(tmp_path)
    (tmp_path / "scheduler" / "notes.md").write_text("not code\n")
    assert bench.code_digest(tmp_path) == first
    (tmp_path / "agent" / "b.yaml").write_text("y: 2\n")
    assert bench.code_digest(tmp_path) != first


def _paired(waits: Sequence[tuple[float, float]], peer: str = "fgd") -> str:
    """The paired text of workloads where gputopo and `peer` have these mean waits (the
    makespans the same)."""
    outcomes = {
        f"gen-{i}/steady": [
            WorkloadFigures(
                workload=f"gen-{i}/steady", policy=p, mean_wait=w, makespan=5_000.0, class_p50={}
            )
            for p, w in (("gputopo", mine), (peer, theirs))
        ]
        for i, (mine, theirs) in enumerate(waits)
    }
    return str(_bench().paired_text(outcomes, peers=(peer,)))


def test_a_subject_lower_on_every_workload_is_told_apart() -> None:
    text = _paired([(900.0 + 10 * i, 1_000.0 + 10 * i) for i in range(8)])
    line = text.splitlines()[1]
    assert line.startswith("  vs fgd over 8 workloads: mean wait -100 s (-9.7%; -100 to -100 s)")
    # all 8 lower: sign test p = 2 / 2**8 = 0.0078
    assert "lower; lower on 8, higher on 0, sign test p 0.01;" in line
    assert line.endswith(
        "makespan +0 s (+0.0%; +0 to +0 s): not told apart; lower on 0, "
        "higher on 0, sign test p 1.00"
    )


def test_differences_that_cancel_are_not_told_apart() -> None:
    line = _paired([(1_000.0, 1_100.0), (1_100.0, 1_000.0)] * 4).splitlines()[1]
    assert "mean wait +0 s (+0.0%; " in line
    assert "not told apart; lower on 4, higher on 4, sign test p 1.00;" in line
    low, high = line.split("(+0.0%; ")[1].split(" s)")[0].split(" to ")
    assert float(low) < 0 < float(high)


def test_one_big_loss_among_small_gains_widens_the_interval_past_zero() -> None:
    waits = [(990.0, 1_000.0)] * 9 + [(3_000.0, 1_000.0)]  # mean +191 s, yet lower on 9 of 10
    line = _paired(waits, peer="bestfit").splitlines()[1]
    assert line.startswith("  vs bestfit over 10 workloads: mean wait +191 s (+19.1%; ")
    assert "lower on 9, higher on 1, sign test p 0.02;" in line
    assert ": not told apart; lower on 9" in line


def test_without_scipy_the_paired_text_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "scipy", None)
    assert _paired([(1.0, 2.0)]) == 'paired comparison: needs scipy (pip install -e ".[study]")\n'


def test_another_load_is_another_run_and_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = _one_workload_cached(tmp_path)
    assert _bench().main(argv) == 0
    capsys.readouterr()
    assert _bench().main([*argv, "--generated-load", "0.6"]) == 0
    out = capsys.readouterr().out
    assert "(seeds 3; 15 jobs, 2 GPU nodes, 1 CPU nodes, load 0.6;" in out
    assert "generated runs: 5 computed, 0 from the cache;" in out
    assert len(list(tmp_path.glob("*c0.6l-*.json"))) == 5


@pytest.mark.parametrize("load", ["0", "-1", "nan", "inf"])
def test_a_load_not_above_0_is_refused(capsys: pytest.CaptureFixture[str], load: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _bench().main(["--generated-load", load, "--beside", "none"])
    assert exit_info.value.code == 2
    assert f"--generated-load: must be a number above 0, got {float(load)}" in (
        capsys.readouterr().err
    )
