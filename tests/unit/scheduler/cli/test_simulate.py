"""`gputopo-scheduler simulate`: flags, env, table, DESIGN §8 JSON, plot, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler.cli import main as cli
from scheduler.cli.simulate import main
from tests.builders.sim import WORKLOAD_YAML, write_trace

RUN_KEYS = {
    "policy",
    "seed",
    "allocationRatio",
    "fragmentedGpuShare",
    "failedPods",
    "decisionsPerSecond",
}
EVENT_KEYS = {
    "gangWaitSeconds",
    "jobsPlaced",
    "jobsTotal",
    "utilisation",
    "fragmentationOverTime",
    "longest8GpuWaitSeconds",
    "waitSeconds",
}


def test_protocol_json_has_the_design_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    nodes, pods = write_trace(tmp_path, pods=40)
    argv = ["--cluster", str(nodes), "--workload", str(pods), "--policy", "fgd,bestfit"]
    assert main([*argv, "--seed", "42,43", "--inflate", "1.0", "--json"], environ={}) == 0
    doc = json.loads(capsys.readouterr().out)
    runs = doc["runs"]
    assert [(r["policy"], r["seed"]) for r in runs] == [
        ("fgd", 42),
        ("fgd", 43),
        ("bestfit", 42),
        ("bestfit", 43),
    ]
    assert all(set(r) == RUN_KEYS for r in runs)
    assert all(set(r["allocationRatio"]) <= {"100", "130"} for r in runs)
    assert all(isinstance(v, int) for r in runs for v in r["failedPods"].values())


def test_table_per_policy_from_the_dispatcher(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    nodes, pods = write_trace(tmp_path, pods=30)
    argv = ["simulate", "--cluster", str(nodes), "--workload", str(pods), "--policy", "random"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    header = _table_start(out)
    assert "decisions/s" in out[header]
    assert out[header + 1].split()[:2] == ["random", "1"]


def _table_start(lines: list[str]) -> int:
    return next(i for i, line in enumerate(lines) if line.split()[:2] == ["policy", "seeds"])


def test_events_mode_for_yaml_workloads(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    workload = tmp_path / "w.yaml"
    workload.write_text(WORKLOAD_YAML, encoding="utf-8")
    assert main(["--workload", str(workload), "--policy", "gputopo", "--json"], environ={}) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert set(run) == RUN_KEYS | EVENT_KEYS
    assert set(run["allocationRatio"]) == {"mean", "peak"}
    assert run["jobsPlaced"] == run["jobsTotal"] == 5


def test_environment_is_read_and_flags_win(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    nodes, pods = write_trace(tmp_path, pods=20)
    env = {
        "GPUTOPO_CLUSTER": str(nodes),
        "GPUTOPO_WORKLOAD": str(pods),
        "GPUTOPO_POLICY": "bestfit",
        "GPUTOPO_SEED": "5",
    }
    assert main(["--json", "--policy", "spread"], environ=env) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert (run["policy"], run["seed"]) == ("spread", 5)


def test_plot_writes_a_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    nodes, pods = write_trace(tmp_path, pods=20)
    png = tmp_path / "alloc.png"
    argv = ["--cluster", str(nodes), "--workload", str(pods), "--policy", "fgd,spread"]
    assert main([*argv, "--plot", str(png)], environ={}) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "fgd" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["--policy", "fgd,best"], "--policy: unknown ['best']", id="policy"),
        pytest.param(["--seed", "4x"], "--seed: expected integers", id="seed"),
        pytest.param(["--inflate", "-1"], "--inflate: must be > 0", id="inflate"),
        pytest.param(["--cluster", "missing.yaml"], "missing.yaml: cannot read", id="file"),
        pytest.param(["--workload", "nope"], "no such built-in workload", id="builtin"),
        pytest.param(["--config", "missing.yaml"], "cannot read the scheduler config", id="config"),
        pytest.param(["--tenants", "60,50"], "--tenants: the shares sum to 110%", id="tenants"),
        pytest.param(
            ["--tenants", "50,50", "--mode", "protocol"],
            "--tenants: queues run in event",
            id="mode",
        ),
        pytest.param(
            ["--tenants", "50", "--quota", "soft"], "--quota: must be borrow or hard", id="quota"
        ),
        pytest.param(["--load", "0"], "--load: must be > 0", id="load"),
        pytest.param(["--node-share", "1.5"], "--node-share: must be in (0, 1]", id="node share"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
):
    assert main(argv, environ={}) == 2
    err = capsys.readouterr().err
    assert err.startswith("gputopo-scheduler simulate: ")
    assert message in err
    assert err.count("\n") == 1
    assert "Traceback" not in err


def test_bad_trace_rows_name_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    nodes, pods = write_trace(tmp_path, pods=5)
    pods.write_text(pods.read_text(encoding="utf-8") + "bad,1,1,1,0,,LS,Running\n", "utf-8")
    assert main(["--cluster", str(nodes), "--workload", str(pods)], environ={}) == 2
    assert f"{pods}:7: column 'gpu_milli'" in capsys.readouterr().err


def test_help_exits_zero(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as done:
        main(["--help"], environ={})
    assert done.value.code == 0
    assert "--inflate" in capsys.readouterr().out


def test_tenants_split_the_trace_and_report_each_queue(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    nodes, pods = write_trace(tmp_path, pods=40, timed=True)  # 22 GPUs
    argv = ["--cluster", str(nodes), "--workload", str(pods), "--policy", "bestfit", "--json"]
    assert main([*argv, "--tenants", "50,30,20", "--quota", "hard"], environ={}) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    queues = {q["name"]: q for q in run["queues"]}
    assert set(queues) == {"t1", "t2", "t3"}
    assert [queues[t]["minGpus"] for t in ("t1", "t2", "t3")] == [11.0, 6.0, 4.0]
    assert all(q["maxGpus"] == q["minGpus"] for q in queues.values())
    assert all(q["peakGpus"] <= q["maxGpus"] for q in queues.values())
    assert sum(q["pods"] for q in queues.values()) == 40
    assert set(queues["t1"]) >= {"gpuSeconds", "waitSeconds", "guaranteeDeficitGpuSeconds"}
    assert main([*argv, "--tenants", "50,30,20", "--quota", "hard"], environ={}) == 0
    assert json.loads(capsys.readouterr().out)["runs"][0]["queues"] == run["queues"]


def test_tenants_table_adds_a_row_per_queue(capsys: pytest.CaptureFixture[str]):
    argv = ["--policy", "bestfit", "--tenants", "40,30,20,10"]
    assert main(argv, environ={"GPUTOPO_QUOTA": "hard"}) == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines.index(
        next(line for line in lines if line.startswith("policy") and "queue" in line)
    )
    assert "deficit GPU-s" in lines[header]
    rows = [line for line in lines[header + 1 :] if not line.startswith("  ")]
    assert [line.split()[2] for line in rows] == ["t1", "t2", "t3", "t4"]


WAIT_KEYS = {"pods", "started", "p50", "p99", "longest"}
REPLAY_KEYS = {
    "source",
    "podsInTrace",
    "podsReplayed",
    "neverRan",
    "endedBeforeStart",
    "start",
    "traceEnd",
    "load",
    "gangs",
    "arrivalWindowSeconds",
}


def _replay_json(tmp_path: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> dict:
    nodes, pods = write_trace(tmp_path, pods=40, timed=True)
    argv = ["--cluster", str(nodes), "--workload", str(pods), "--mode", "events", "--json"]
    assert main([*argv, "--policy", "gputopo,random", "--seed", "1,2", *flags], environ={}) == 0
    return json.loads(capsys.readouterr().out)


def test_events_mode_on_a_trace_is_the_replay_with_every_documented_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    doc = _replay_json(tmp_path, capsys)
    assert set(doc["replay"]) == REPLAY_KEYS
    assert (doc["replay"]["podsReplayed"], doc["replay"]["neverRan"]) == (40, 0)
    assert doc["replay"]["arrivalWindowSeconds"] == 390.0  # pod i created at 10 i
    assert len(doc["runs"]) == 4
    assert all(set(r) == RUN_KEYS | EVENT_KEYS for r in doc["runs"])
    assert all(set(w) == WAIT_KEYS for r in doc["runs"] for w in r["waitSeconds"].values())


def test_load_divides_the_arrival_times(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    doc = _replay_json(tmp_path, capsys, "--load", "10")
    assert doc["replay"]["arrivalWindowSeconds"] == 39.0
    assert doc["replay"]["load"] == 10.0


def test_a_trace_without_times_cannot_be_replayed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    nodes, pods = write_trace(tmp_path, pods=10)
    argv = ["--cluster", str(nodes), "--workload", str(pods), "--mode", "events"]
    assert main(argv, environ={}) == 2
    err = capsys.readouterr().err
    assert "no creation/scheduled/deletion times" in err
    assert err.count("\n") == 1


def test_replay_table_names_what_was_left_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    nodes, pods = write_trace(tmp_path, pods=30, timed=True)
    argv = ["--cluster", str(nodes), "--workload", str(pods), "--mode", "events"]
    flags = ["--policy", "fgd", "--shuffle-nodes", "--node-share", "0.5"]
    assert main([*argv, *flags], environ={}) == 0
    lines = capsys.readouterr().out.splitlines()
    header = _table_start(lines)
    assert lines[header - 1].startswith("replay: 30 of 30 pods; 0 never ran in production")
    assert "util%" in lines[header]
    assert any(line.split()[:2] == ["policy", "class"] for line in lines)


def test_events_plot_is_allocation_and_fragmentation_over_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    png = tmp_path / "living.png"
    assert main(["--policy", "gputopo,spread", "--plot", str(png)], environ={}) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "frag over time%" in capsys.readouterr().out


def test_default_is_an_alias_of_gputopo_in_runs_and_inputs(capsys: pytest.CaptureFixture[str]):
    assert main(["--policy", "default,spread", "--json"], environ={}) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in doc["runs"]] == ["gputopo", "spread"]
    assert doc["inputs"]["policies"] == ["gputopo", "spread"]


def test_json_records_the_inputs_of_a_replay(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    doc = _replay_json(tmp_path, capsys, "--load", "10", "--gang-window", "60")
    inputs = doc["inputs"]
    assert inputs["cluster"] == {"source": str(tmp_path / "nodes.csv"), "nodes": 5, "gpus": 22}
    assert inputs["workload"]["pods"] == 40
    assert (inputs["mode"], inputs["inflate"], inputs["seeds"]) == ("events", None, [1, 2])
    assert inputs["replay"] == {"load": 10.0, "start": None, "gangWindow": 60.0, "nodeShare": 1.0}
    assert inputs["version"]


def test_the_table_starts_with_what_was_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    nodes, pods = write_trace(tmp_path, pods=30)
    argv = ["--cluster", str(nodes), "--workload", str(pods), "--policy", "fgd", "--seed", "3"]
    assert main(argv, environ={}) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"cluster:  {nodes} (5 nodes, 22 GPUs)"
    assert lines[1] == f"workload: {pods} (30 jobs, 30 pods)"
    assert lines[2] == "policies: fgd; seeds: 3"
    assert lines[3].startswith(
        "mode:     protocol; pods shuffled by the seed and inflated to 130 %"
    )


def test_jobs_no_node_can_hold_are_named_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    nodes, _pods = write_trace(tmp_path)  # models G2, T4, P100; the built-in asks for Tesla-T4
    assert main(["--cluster", str(nodes), "--policy", "bestfit"], environ={}) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "never be placed" in line]
    assert warnings == [
        "gputopo-scheduler simulate: warning: 34 of 286 jobs (38 pods) fit no node of the cluster "
        "and will never be placed: 30 ask for GPU model Tesla-T4; 4 ask for 96 cpu, 512 GiB and "
        "the GPUs together (the cluster's GPU models: G2, P100, T4)"
    ]


def test_a_replay_too_light_to_load_the_cluster_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    nodes, pods = write_trace(tmp_path, pods=40, timed=True)  # 300 s each, 10 s apart
    argv = ["--cluster", str(nodes), "--workload", str(pods), "--mode", "events"]
    assert main([*argv, "--policy", "bestfit", "--load", "0.1"], environ={}) == 0
    (line,) = capsys.readouterr().err.splitlines()
    assert "the workload never asks for more than" in line
    assert "of the cluster's 22 GPUs at once" in line
    assert "raise --load (the studies: --load 2000 --replay-start 10000000" in line
    assert main([*argv, "--policy", "bestfit"], environ={}) == 0
    assert capsys.readouterr().err == ""
