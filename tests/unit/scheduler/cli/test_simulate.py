"""`gputopo-scheduler simulate`: flags, env, table, DESIGN §8 JSON, plot, one-line errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from scheduler.cli import main as cli
from scheduler.cli.simulate import main
from scheduler.cli.simulate_text import COLUMN_NOTES, table_columns
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
    "gpuWeightedWaitSeconds",
    "meanCompletionSeconds",
    "meanSlowdown",
    "makespanSeconds",
    "preemption",
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
    out = capsys.readouterr().out.splitlines()[2:]  # after the two header lines
    assert out[0].split()[:2] == ["policy", "runs"]
    assert "decisions/s" in out[0]
    assert out[1].split()[:2] == ["random", "1"]


def test_events_mode_for_yaml_workloads(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    workload = tmp_path / "w.yaml"
    workload.write_text(WORKLOAD_YAML, encoding="utf-8")
    assert main(["--workload", str(workload), "--policy", "default", "--json"], environ={}) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert run["policy"] == "gputopo"  # `default` is the old name, still accepted
    # the default cluster has racks (a topology level) and the workload gangs: DESIGN §13 figures
    assert set(run) == RUN_KEYS | EVENT_KEYS | {"domains", "gangWaitP99Seconds"}
    assert set(run["domains"]) == {"gputopo.io/rack"}
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
    out, err = capsys.readouterr()
    assert "fgd" in out
    assert f"gputopo-scheduler simulate: wrote the plot to {png.resolve()}\n" in err


def test_the_header_seeds_and_the_runs_column_agree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    nodes, pods = write_trace(tmp_path, pods=20)
    argv = ["--cluster", str(nodes), "--workload", str(pods), "--policy", "fgd,spread"]
    for seeds in ("42", "7,8,9"):
        assert main([*argv, "--seed", seeds], environ={}) == 0
        lines = capsys.readouterr().out.splitlines()
        (named,) = re.findall(r"; seeds ([\d,]+);", lines[1])
        column = lines[2].split().index("runs")
        runs = {line.split()[0]: line.split()[column] for line in lines[3:5]}
        assert named == seeds
        assert runs == {"fgd": str(len(seeds.split(","))), "spread": str(len(seeds.split(",")))}


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
            ["--tenants", "50", "--quota", "soft"],
            "--quota: must be one of borrow, hard, borrow+reclaim",
            id="quota",
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
    rows = lines[header + 1 : lines.index("", header)]
    assert [line.split()[2] for line in rows] == ["t1", "t2", "t3", "t4"]


WAIT_KEYS = {"pods", "started", "mean", "p50", "p99", "longest"}
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
    lines = capsys.readouterr().out.splitlines()[2:]  # after the two header lines
    assert lines[0].startswith("replay: 30 of 30 pods; 0 never ran in production")
    assert "util%" in lines[1]
    assert any(line.split()[:2] == ["policy", "class"] for line in lines)


def test_events_plot_is_allocation_and_fragmentation_over_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    png = tmp_path / "living.png"
    assert main(["--policy", "gputopo,spread", "--plot", str(png)], environ={}) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "frag over time%" in capsys.readouterr().out


def test_the_table_says_what_ran_and_what_its_columns_mean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    nodes, pods = write_trace(tmp_path, pods=20)
    argv = ["--cluster", str(nodes), "--workload", str(pods), "--policy", "default,fgd"]
    assert main([*argv, "--seed", "1,2"], environ={}) == 0
    out = capsys.readouterr().out
    first, second = out.splitlines()[:2]
    assert first.startswith(f"cluster {nodes.name} (")
    assert f"workload {pods.name} (20 jobs, 20 pods)" in first
    assert second == "mode protocol, pods inflated to 130 % of GPU capacity; seeds 1,2; " + (
        "policies gputopo, fgd"
    )
    assert re.search(r"\n  alloc@130%\s+the same at 130 %, where the protocol ends\n", out)
    assert re.search(r"\n  fragmented%\s+GPU capacity the workload's typical pods cannot use", out)


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["--inflate", "1.3"], id="protocol"),
        pytest.param(["--tenants", "50,50", "--quota", "borrow+reclaim"], id="events, queues"),
    ],
)
def test_every_column_printed_is_defined_under_the_tables(
    argv: list[str], capsys: pytest.CaptureFixture[str]
):
    assert main(["--policy", "gputopo", *argv], environ={}) == 0
    out = capsys.readouterr().out
    tables, _, notes = out.partition("\ncolumns (every figure in full: scheduler/sim/README.md):\n")
    columns = table_columns(tables)
    assert len(columns) >= 8
    assert [line.split("  ")[1] for line in notes.splitlines()] == columns


def test_every_column_is_defined_in_the_simulator_readme():
    readme = (Path(__file__).resolve().parents[4] / "scheduler/sim/README.md").read_text("utf-8")
    assert [name for name in COLUMN_NOTES if f"`{name}`" not in readme] == []


def test_the_json_records_its_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    nodes, pods = write_trace(tmp_path, pods=20)
    argv = ["--cluster", str(nodes), "--workload", str(pods), "--policy", "fgd", "--json"]
    assert main([*argv, "--inflate", "1.1"], environ={}) == 0
    inputs = json.loads(capsys.readouterr().out)["inputs"]
    assert inputs["cluster"] == str(nodes)
    assert inputs["workload"] == str(pods)
    assert (inputs["mode"], inputs["inflate"], inputs["seeds"]) == ("protocol", 1.1, [42])
    assert (inputs["jobs"], inputs["pods"], inputs["policies"]) == (20, 20, ["fgd"])
    assert inputs["gpus"] > 0
    assert inputs["nodes"] > 0


def test_jobs_no_node_could_host_are_named_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    cluster = tmp_path / "c.yaml"
    cluster.write_text(
        "version: v1\nnodeGroups:\n"
        "  - {name: small, count: 2, gpus: 2, model: T4, cpu: 16, memoryGiB: 64}\n",
        encoding="utf-8",
    )
    workload = tmp_path / "w.yaml"
    workload.write_text(
        "version: v1\njobs:\n"
        "  - {name: big, arrival: 0, duration: 10, pod: {gpus: 8}}\n"
        "  - {name: v100, arrival: 0, duration: 10, pod: {gpus: 1, gpuModels: [V100]}}\n"
        "  - {name: fine, arrival: 0, duration: 10, pod: {gpus: 1}}\n",
        encoding="utf-8",
    )
    argv = ["--cluster", str(cluster), "--workload", str(workload), "--policy", "gputopo"]
    assert main(argv, environ={}) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "gputopo-scheduler simulate: warning: 1 job can never be placed: no node has GPU model "
        "V100 (the cluster has T4)",
        "gputopo-scheduler simulate: warning: 1 job can never be placed: no node is big enough "
        "for 8 GPU, 1 cpu, 1 GiB",
    ]


def test_borrow_and_reclaim_runs_the_scheduler_preemption(capsys: pytest.CaptureFixture[str]):
    argv = ["--policy", "gputopo", "--tenants", "40,30,20,10", "--json"]
    assert main([*argv, "--quota", "borrow+reclaim"], environ={}) == 0
    doc = json.loads(capsys.readouterr().out)
    (run,) = doc["runs"]
    assert doc["inputs"]["quota"] == "borrow+reclaim"
    assert run["preemption"]["podsEvicted"] > 0  # the built-in workload has reclaim to do
    assert run["preemption"]["partialGangs"] == 0
    assert run["preemption"]["evictionsWithoutStart"] == 0
    assert main([*argv, "--quota", "borrow"], environ={}) == 0
    borrow = json.loads(capsys.readouterr().out)["runs"][0]["preemption"]
    assert borrow["podsEvicted"] == 0  # no reclaim, and the built-in jobs share one priority
    assert main([*argv, "--no-preemption"], environ={}) == 0
    assert "preemption" not in json.loads(capsys.readouterr().out)["runs"][0]


def test_plot_titles_say_what_was_compared():
    from scheduler.sim.plot import plot_title

    protocol = {"policies": ["gputopo", "fgd"], "cluster": "/t/nodes.csv", "seeds": [42]}
    protocol |= {"workload": "/t/pods.csv", "mode": "protocol", "inflate": 1.3}
    assert plot_title(protocol) == (
        "gputopo vs fgd\ncluster nodes.csv × workload pods.csv\nseed 42; inflated to 130 %"
    )
    events = {"policies": ["gputopo"], "cluster": "default", "workload": "default"}
    events |= {"seeds": [1, 2], "mode": "events"}
    assert plot_title(events) == (
        "gputopo\ncluster built-in default × workload built-in default\nmean of seeds 1,2; events"
    )
    replay = events | {"load": 2000.0, "replayStart": 10_000_000, "nodeShare": 0.5}
    replay |= {"gangWindow": None, "shuffleNodes": True}
    assert plot_title(replay).splitlines()[2] == (
        "mean of seeds 1,2; events, load 2000, from recorded second 10,000,000, node share 0.5, "
        "nodes ranked by the seed"
    )


def test_a_replay_too_light_to_load_the_cluster_says_so_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    nodes, pods = write_trace(tmp_path, pods=40, timed=True)  # 300 s each, 10 s apart, 22 GPUs
    argv = ["--cluster", str(nodes), "--workload", str(pods), "--mode", "events"]
    assert main([*argv, "--policy", "bestfit", "--load", "0.1"], environ={}) == 0
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("gputopo-scheduler simulate: warning: the workload never asks for more")
    assert "of the cluster's 22 GPUs at once" in line
    assert line.endswith(
        "raise --load (the studies: --load 2000 --replay-start 10000000 --node-share 0.5)"
    )
    assert main([*argv, "--policy", "bestfit"], environ={}) == 0
    assert capsys.readouterr().err == ""


def test_a_light_yaml_workload_says_what_to_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    env = {"GPUTOPO_CLUSTER": "default", "GPUTOPO_POLICY": "bestfit"}
    workload = "version: v1\njobs:\n  - {name: one, arrival: 0, duration: 10, pod: {gpus: 1}}\n"
    path = tmp_path / "w.yaml"
    path.write_text(workload, encoding="utf-8")
    assert main(["--workload", str(path)], environ=env) == 0
    (line,) = capsys.readouterr().err.splitlines()
    assert "never asks for more than 1.0 of the cluster's 64 GPUs at once (1.6 %)" in line
    assert line.endswith("use a smaller cluster or a heavier workload")


def test_the_header_of_a_replay_gives_its_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    nodes, pods = write_trace(tmp_path, pods=40, timed=True)
    argv = ["--cluster", str(nodes), "--workload", str(pods), "--mode", "events"]
    flags = ["--load", "10", "--replay-start", "100", "--node-share", "0.5", "--shuffle-nodes"]
    assert main([*argv, "--policy", "fgd", *flags], environ={}) == 0
    second = capsys.readouterr().out.splitlines()[1]
    assert second == (
        "mode events (arrivals, durations, gangs wait), load 10, from recorded second 100, "
        "node share 0.5, nodes ranked by the seed; seeds 42; policies fgd"
    )
