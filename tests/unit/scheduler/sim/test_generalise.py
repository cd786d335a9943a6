"""`scheduler.sim.generalise`: the summary of the issue's "Verified when" over runs, and
`simulate --generated` end to end on a tiny size."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest

from scheduler.cli.simulate import main
from scheduler.sim.generalise import (
    WorkloadFigures,
    average,
    chosen_by,
    figures_document,
    figures_from_document,
    figures_of,
    format_rows,
    format_summary,
    pairs,
    summarise,
)
from scheduler.sim.metrics import ClassWaits, JobFigures
from scheduler.sim.protocol import RunResult

POLICIES = ("gputopo", "spread", "bestfit", "random", "fgd")


def _run(policy: str, wait: float, makespan: float, p50: Mapping[str, float]) -> WorkloadFigures:
    return WorkloadFigures(
        workload="w", policy=policy, mean_wait=wait, makespan=makespan, class_p50=dict(p50)
    )


def _result(policy: str, wait: float, makespan: float, p50: Mapping[str, float]) -> RunResult:
    waits = {c: ClassWaits(pods=1, started=1, p50=v, p99=v, longest=v) for c, v in p50.items()}
    waits["all"] = ClassWaits(pods=1, started=1, p50=wait, p99=wait, longest=wait, mean=wait)
    return RunResult(
        policy=policy,
        seed=1,
        allocation={},
        fragmented_share=0.0,
        fragmented_gpus=0,
        pods_arrived=1,
        pods_placed=1,
        failed={},
        decisions_per_second=0.0,
        waits=waits,
        figures=JobFigures(
            gpu_weighted_wait=None, mean_completion=None, mean_slowdown=None, makespan=makespan
        ),
    )


def test_a_runs_figures_are_its_mean_wait_makespan_and_class_medians() -> None:
    figures = figures_of("gen-1/steady", _result("fgd", 120.0, 9_000.0, {"gang": 300.0}))
    assert figures == WorkloadFigures(
        workload="gen-1/steady",
        policy="fgd",
        mean_wait=120.0,
        makespan=9_000.0,
        class_p50={"gang": 300.0},
    )


def test_runs_at_several_simulator_seeds_are_averaged() -> None:
    runs = [
        _run("gputopo", 100.0, 1_000.0, {"gang": 10.0, "cpu": 0.0}),
        _run("gputopo", 300.0, 3_000.0, {"gang": 30.0}),  # no cpu pod started
    ]
    runs += [_run(p, 200.0, 2_000.0, {"gang": 20.0, "cpu": 0.0}) for p in POLICIES[1:]]
    text = format_rows({"w": runs})
    gputopo = next(line for line in text.splitlines() if line.split()[1] == "gputopo")
    assert gputopo.split()[2:] == ["200", "2,000", "0", "20"]  # mean wait, makespan, cpu, gang
    assert average(runs[:2]).runs == 2
    assert summarise({"w": runs}).within == 1


def test_figures_survive_their_json_document() -> None:
    figures = _run("bestfit", 12.5, 3_600.0, {"1-gpu": 30.0, "share": 0.0})
    doc = json.loads(json.dumps(figures_document(figures)))
    assert figures_from_document(doc) == figures
    with pytest.raises(KeyError, match="meanWait"):
        figures_from_document({k: v for k, v in doc.items() if k != "meanWait"})


def _workload(
    mine: tuple[float, float], peers: tuple[float, float] = (1000.0, 10_000.0), **p50: float
) -> list[WorkloadFigures]:
    """gputopo's (mean wait, makespan) and class medians; every peer at `peers`, class medians
    1,000 s."""
    peer_p50 = dict.fromkeys(p50, 1000.0)
    return [_run("gputopo", *mine, p50)] + [_run(p, *peers, peer_p50) for p in POLICIES[1:]]


@pytest.mark.parametrize(
    ("mine", "within"),
    [
        pytest.param((1000.0, 10_000.0), 1, id="equal to the best"),
        pytest.param((1049.0, 10_490.0), 1, id="4.9 % worse on both"),
        pytest.param((1051.0, 10_000.0), 0, id="5.1 % worse on mean wait"),
        pytest.param((1000.0, 10_510.0), 0, id="5.1 % worse on makespan"),
    ],
)
def test_within_five_percent_of_the_best_peer_on_both(
    mine: tuple[float, float], within: int
) -> None:
    summary = summarise({"w": _workload(mine)})
    assert summary.within == within
    assert summary.losses == (() if within else ("w",))


@pytest.mark.parametrize(
    ("share", "losing"),
    [
        pytest.param(1059.0, (), id="59 s over 1,000 s: within max(60 s, 10 %)"),
        pytest.param(1099.0, (), id="99 s over 1,000 s: within 10 %"),
        pytest.param(1101.0, ("share",), id="101 s over 1,000 s: a loss"),
    ],
)
def test_a_class_loses_past_max_60_s_and_10_percent(share: float, losing: tuple[str, ...]) -> None:
    summary = summarise({"w": _workload((1000.0, 10_000.0), share=share, cpu=1000.0)})
    assert summary.class_losses == ({"w": losing} if losing else {})


def test_sixty_seconds_is_the_floor_for_short_waits() -> None:
    runs = [_run("gputopo", 10, 10, {"gang": 59.0})]
    runs += [_run(p, 10, 10, {"gang": 0.0}) for p in POLICIES[1:]]
    assert summarise({"w": runs}).class_losses == {}
    runs[0] = _run("gputopo", 10, 10, {"gang": 61.0})
    assert summarise({"w": runs}).class_losses == {"w": ("gang",)}


def test_pairs_put_each_workloads_averaged_figures_side_by_side() -> None:
    first = [_run("gputopo", 100.0, 1_000.0, {}), _run("gputopo", 300.0, 3_000.0, {})]
    first += [_run("fgd", 250.0, 1_500.0, {}), _run("bestfit", 50.0, 9_000.0, {})]
    second = [_run("gputopo", 80.0, 800.0, {}), _run("fgd", 20.0, 900.0, {})]
    waits = pairs({"a": first, "b": second}, "fgd", "mean_wait")
    assert [(p.workload, p.subject, p.peer, p.difference) for p in waits] == [
        ("a", 200.0, 250.0, -50.0),  # gputopo's two simulator seeds averaged
        ("b", 80.0, 20.0, 60.0),
    ]
    assert [p.difference for p in pairs({"a": first}, "bestfit", "makespan")] == [-7_000.0]


def test_a_workload_without_the_peers_run_is_named() -> None:
    runs = {"gen-7/steady": [_run("gputopo", 1.0, 1.0, {})]}
    with pytest.raises(ValueError, match="workload gen-7/steady: no run of fgd to pair"):
        pairs(runs, "fgd", "makespan")


def test_pairs_take_any_policy_as_the_subject() -> None:
    runs = [
        _run("gputopo", 100.0, 1.0, {}),
        _run("fgd", 40.0, 1.0, {}),
        _run("bestfit", 70.0, 1.0, {}),
    ]
    found = pairs({"a": runs}, "bestfit", "mean_wait", subject="fgd")
    assert [(p.subject, p.peer, p.difference) for p in found] == [(40.0, 70.0, -30.0)]


def _day(waits: Mapping[str, tuple[float, ...]]) -> list[WorkloadFigures]:
    """One workload's runs: each policy's mean waits, one run per simulator seed."""
    return [_run(policy, w, 10.0 * w, {}) for policy, ws in waits.items() for w in ws]


def test_the_chosen_policy_runs_what_did_best_on_the_day_before() -> None:
    before = {
        "a": _day({"gputopo": (50.0, 70.0), "fgd": (55.0,), "bestfit": (90.0,)}),  # 60 > 55
        "b": _day({"gputopo": (20.0,), "fgd": (30.0,), "bestfit": (40.0,)}),
    }
    today = {
        "a": _day({"gputopo": (1.0,), "fgd": (2.0, 4.0), "bestfit": (3.0,)}),
        "b": _day({"gputopo": (9.0,), "fgd": (5.0,), "bestfit": (7.0,)}),
    }
    chosen, picked = chosen_by(before, today, ("gputopo", "fgd", "bestfit"), "mean_wait", "ch")
    assert picked == {"a": "fgd", "b": "gputopo"}
    mine = {label: [(r.mean_wait, r.makespan) for r in runs if r.policy == "ch"]
            for label, runs in chosen.items()}  # fmt: skip
    assert mine == {"a": [(2.0, 20.0), (4.0, 40.0)], "b": [(9.0, 90.0)]}  # every run, renamed
    assert [r.policy for r in chosen["b"]][:3] == ["gputopo", "fgd", "bestfit"]  # kept
    assert [p.difference for p in pairs(chosen, "gputopo", "mean_wait", "ch")] == [2.0, 0.0]


def test_a_tie_on_the_day_before_goes_to_the_first_policy_named() -> None:
    day = {"a": _day({"gputopo": (5.0,), "fgd": (5.0,), "bestfit": (5.0,)})}
    _, picked = chosen_by(day, day, ("bestfit", "fgd", "gputopo"), "mean_wait", "ch")
    assert picked == {"a": "bestfit"}


def test_choosing_names_a_workload_or_a_run_the_choice_lacks() -> None:
    today = {"gen-4/bursts": _day({"gputopo": (1.0,), "fgd": (1.0,)})}
    with pytest.raises(ValueError, match="workload gen-4/bursts: no runs in the outcomes it is"):
        chosen_by({}, today, ("gputopo", "fgd"), "mean_wait", "ch")
    before = {"gen-4/bursts": _day({"gputopo": (1.0,)})}
    with pytest.raises(ValueError, match="workload gen-4/bursts: no run of fgd to choose from"):
        chosen_by(before, today, ("gputopo", "fgd"), "mean_wait", "ch")


def test_only_the_packing_peers_set_the_class_bar() -> None:
    runs = [_run("gputopo", 10, 10, {"1-gpu": 500.0})]
    runs += [_run(p, 10, 10, {"1-gpu": 0.0 if p == "spread" else 500.0}) for p in POLICIES[1:]]
    assert summarise({"w": runs}).class_losses == {}


def test_average_rank_and_averages_over_workloads() -> None:
    first = _workload((900.0, 9_000.0))  # best on both
    second = _workload((2000.0, 10_000.0))  # worst on wait, tied first on makespan
    summary = summarise({"a": first, "b": second})
    assert summary.average_rank["gputopo"] == pytest.approx((1 + 1 + 5 + 1) / 4)
    assert summary.average_rank["spread"] == pytest.approx((2 + 2 + 1 + 1) / 4)
    assert summary.average_wait["gputopo"] == pytest.approx(1450.0)
    assert summary.average_makespan["fgd"] == pytest.approx(10_000.0)
    assert summary.within == 1


def test_the_bars_reach_holds_each_policy_to_the_best_of_all_the_others() -> None:
    """On "a" gputopo is best and fgd 4 % behind it on both figures; on "b" spread is best on
    mean wait and fgd on makespan, so nobody is within 5 % of the others on both."""
    a = [_run("gputopo", 1000, 10_000, {})] + [
        _run(p, 1040 if p == "fgd" else 2000, 10_400 if p == "fgd" else 20_000, {})
        for p in POLICIES[1:]
    ]
    b = [
        _run(p, 1000 if p == "spread" else 1500, 10_000 if p == "fgd" else 15_000, {})
        for p in POLICIES
    ]
    summary = summarise({"a": a, "b": b})
    assert summary.within_of_others == {
        "gputopo": 1, "spread": 0, "bestfit": 0, "random": 0, "fgd": 1
    }  # fmt: skip
    assert summary.within == summary.within_of_others["gputopo"]
    text = format_summary(summary)
    assert "the bar's reach: each policy within 5% of the best of all the others on both " in text
    assert "fgd 1 of 2, gputopo 1 of 2, bestfit 0 of 2, random 0 of 2, spread 0 of 2" in text


def test_the_class_bars_reach_holds_each_packing_policy_to_the_other_two() -> None:
    """On "a" fgd's gang waits 200 s past the best of bestfit and gputopo, and gputopo's
    1-GPU pods 200 s past fgd's (bestfit's 50 s: within 60 s); spread's, the fastest, count
    for nobody. On "b" bestfit's gang waits 100 s past the others': within 10 % of 1,000 s."""
    a = [
        _run("gputopo", 10, 10, {"gang": 1000.0, "1-gpu": 500.0}),
        _run("fgd", 10, 10, {"gang": 1200.0, "1-gpu": 300.0}),
        _run("bestfit", 10, 10, {"gang": 1000.0, "1-gpu": 350.0}),
        _run("spread", 10, 10, {"gang": 5000.0, "1-gpu": 0.0}),
        _run("random", 10, 10, {}),
    ]
    b = [_run(p, 10, 10, {"gang": 1100.0 if p == "bestfit" else 1000.0}) for p in POLICIES]
    summary = summarise({"a": a, "b": b})
    assert summary.class_losses_of_others == {"gputopo": 1, "fgd": 1, "bestfit": 0}
    assert summary.class_losses == {"a": ("1-gpu",)}
    assert (
        "the class bar's reach: workloads where a class of each packing policy waits longer "
        "than the best of the other two by as much: bestfit 0 of 2, fgd 1 of 2, gputopo 1 of 2"
    ) in format_summary(summary)


def test_the_text_names_the_losses() -> None:
    outcomes = {"gen-1/steady": _workload((2000.0, 10_000.0), gang=5000.0)}
    text = format_summary(summarise(outcomes))
    assert "within 5% of the best of fgd, bestfit, random, spread" in text
    assert ": 0 of 1 (not on: gen-1/steady)" in text
    assert "  gen-1/steady: gang" in text
    assert "losing workloads per class: gang 1" in text
    rows = format_rows(outcomes).splitlines()
    assert rows[0].split()[:4] == ["workload", "policy", "mean", "wait"]
    assert len(rows) == 1 + len(POLICIES)
    assert rows[1].split()[:4] == ["gen-1/steady", "gputopo", "2,000", "10,000"]


def test_class_waits_average_over_the_workloads_where_every_policy_started_the_class() -> None:
    outcomes = {
        "gen-1/steady": _workload((1000.0, 10_000.0), gang=3000.0, **{"1-gpu": 100.0}),
        "gen-2/steady": _workload((1000.0, 10_000.0), gang=5000.0),
        "gen-3/steady": [
            *(
                run
                for run in _workload((1000.0, 10_000.0), gang=1000.0, **{"1-gpu": 400.0})
                if run.policy != "spread"
            ),
            _run("spread", 1000.0, 10_000.0, {"1-gpu": 50.0}),  # no gang started
        ],
    }
    summary = summarise(outcomes)
    gang_workloads, gang = summary.class_waits["gang"]
    assert gang_workloads == 2  # gen-3: spread started no gang
    assert gang["gputopo"] == pytest.approx(4000.0)
    assert gang["fgd"] == gang["spread"] == pytest.approx(1000.0)
    one_gpu_workloads, one_gpu = summary.class_waits["1-gpu"]
    assert one_gpu_workloads == 2
    assert one_gpu["gputopo"] == pytest.approx(250.0)
    assert one_gpu["spread"] == pytest.approx(525.0)
    text = format_summary(summary)
    assert (
        "median wait s per class, averaged over the workloads where every policy started one:"
        in (text)
    )
    assert (
        "  gang (2 of 3): bestfit 1,000, fgd 1,000, random 1,000, spread 1,000, gputopo 4,000"
        in (text)
    )


def test_simulate_generated_runs_end_to_end(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--generated", "2", "--generated-seed", "5", "--generated-jobs", "20"]
    assert main([*argv, "--generated-nodes", "3"], environ={}) == 0
    out = capsys.readouterr().out
    assert out.startswith("2 generated workloads (seeds 5..6; 20 jobs, 3 GPU nodes")
    assert "5 policies, simulator seeds 1, " in out
    rows = [line for line in out.splitlines() if line.startswith("gen-")]
    assert len(rows) == 2 * len(POLICIES)
    assert {row.split()[1] for row in rows} == set(POLICIES)
    assert "gputopo within 5% of the best" in out
    assert "average rank (mean wait and makespan; 1 = best): " in out


def test_simulate_generated_runs_at_the_load_asked(capsys: pytest.CaptureFixture[str]) -> None:
    """Another load offers the same jobs over another horizon: other runs, the load named."""
    argv = ["--generated", "1", "--generated-seed", "4", "--generated-jobs", "40"]
    argv += ["--generated-nodes", "3", "--policy", "gputopo,spread,bestfit,random,fgd"]
    rows = {}
    for load in ("1.2", "3"):
        extra = [] if load == "1.2" else ["--generated-load", load]
        assert main([*argv, *extra], environ={}) == 0
        out = capsys.readouterr().out
        assert f"40 jobs, 3 GPU nodes, 1 CPU nodes, load {load})" in out.splitlines()[0]
        rows[load] = {line.split()[1]: line.split()[2:4] for line in out.splitlines()[3:8]}
    assert rows["1.2"].keys() == rows["3"].keys() == set(POLICIES)
    assert all(rows["1.2"][policy] != rows["3"][policy] for policy in POLICIES)


@pytest.mark.parametrize("load", ["0", "-0.5", "nan"])
def test_simulate_generated_refuses_a_load_not_above_0(
    capsys: pytest.CaptureFixture[str], load: str
) -> None:
    assert main(["--generated", "1", "--generated-load", load], environ={}) == 2
    assert f"--generated-load: must be a number above 0, got {float(load)}" in (
        capsys.readouterr().err
    )


def test_simulate_generated_needs_every_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--generated", "1", "--policy", "gputopo,fgd"], environ={}) == 2
    assert "--policy lacks bestfit, random, spread" in capsys.readouterr().err


def test_simulate_generated_is_deterministic(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--generated", "1", "--generated-jobs", "15", "--generated-nodes", "2"]
    assert main(argv, environ={}) == 0
    first = capsys.readouterr().out.split("\n", 1)[1]  # the head line carries the runtime
    assert main(argv, environ={}) == 0
    assert capsys.readouterr().out.split("\n", 1)[1] == first


def test_the_simulator_seed_is_apart_from_the_workload_seed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The same workload at two simulator seeds: random places differently, the label stays."""
    argv = ["--generated", "1", "--generated-seed", "7", "--generated-jobs", "40"]
    argv += ["--generated-nodes", "3", "--policy", "gputopo,spread,bestfit,random,fgd"]
    tables = []
    for seed in ("1", "2"):
        assert main([*argv, "--seed", seed], environ={}) == 0
        tables.append(
            {
                line.split()[1]: line.split()[:4]
                for line in capsys.readouterr().out.splitlines()
                if line.startswith("gen-")
            }
        )
    assert tables[0]["random"][0] == tables[1]["random"][0] == tables[0]["gputopo"][0]
    assert tables[0]["random"] != tables[1]["random"]


def test_with_the_day_before_known_only_fgd_and_gputopo_can_decide_otherwise(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--generated", "2", "--generated-seed", "3", "--generated-jobs", "40"]
    argv += ["--generated-nodes", "3"]
    rows = {}
    for extra in ([], ["--generated-history"]):
        assert main([*argv, *extra], environ={}) == 0
        out = capsys.readouterr().out
        known = "the day before" if extra else "fgd: the day's own typical pods"
        assert f"known in advance: {known}, " in out.splitlines()[0]
        rows[bool(extra)] = {
            tuple(line.split()[:2]): line.split()[2:]
            for line in out.splitlines()
            if line.startswith("gen-")
        }
    assert rows[False].keys() == rows[True].keys()
    for workload, policy in rows[False]:
        if policy not in ("fgd", "gputopo"):
            assert rows[False][workload, policy] == rows[True][workload, policy]
    assert any(rows[False][k] != rows[True][k] for k in rows[False] if k[1] in ("fgd", "gputopo"))
