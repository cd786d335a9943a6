"""`scheduler.sim.report`: the per-policy table (mean ± sd over seeds) and the JSON document."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from scheduler.sim.protocol import RunResult
from scheduler.sim.report import COLUMNS, format_header, format_table, runs_document


def run(policy: str, seed: int, at130: float, waits: float | None = None) -> RunResult:
    return RunResult(
        policy=policy,
        seed=seed,
        allocation={100: at130 - 1, 130: at130},
        fragmented_share=4.0,
        fragmented_gpus=10 + seed,
        pods_arrived=100,
        pods_placed=90,
        failed={"share": 10},
        decisions_per_second=1234.5,
        gang_wait_seconds=waits,
        jobs_total=100,
        jobs_placed=90,
    )


def test_table_has_one_row_per_policy_with_mean_and_sd():
    lines = format_table([run("fgd", 1, 95.0), run("fgd", 2, 96.0), run("bestfit", 1, 93.0)])
    rows = lines.splitlines()
    assert rows[0].split()[:4] == ["policy", "seeds", "alloc@100%", "alloc@130%"]
    fgd = rows[1].split()
    assert fgd[:2] == ["fgd", "2"]
    assert "95.50 ± 0.71" in rows[1]
    assert "1,234" in rows[1]
    assert "90/100" in rows[1]
    assert rows[2].split()[:3] == ["bestfit", "1", "92.00"]


def test_json_points_and_event_fields():
    doc = runs_document([run("fgd", 1, 95.0)])
    (entry,) = doc["runs"]
    assert entry["allocationRatio"] == {"100": 94.0, "130": 95.0}
    assert entry["failedPods"] == {"share": 10}
    assert "gangWaitSeconds" not in entry


def _headers(text: str) -> list[list[str]]:
    """The column names of each table in `text` (split on two spaces or more)."""
    return [
        [c for c in line.split("  ") if c.strip()]
        for line in text.splitlines()
        if line.startswith("policy  ")
    ]


def test_every_column_printed_is_defined_under_its_table():
    events = dataclasses.replace(
        run("fgd", 1, 95.0, waits=3.0), mean_allocation=50.0, peak_allocation=90.0
    )
    for runs in ([run("fgd", 1, 95.0)], [events]):
        text = format_table(runs)
        defined = {line.split("  ")[1] for line in text.splitlines() if line.startswith("  ")}
        for header in _headers(text):
            assert set(header) - {"policy"} <= defined


def test_every_column_is_defined_in_the_simulator_readme():
    readme = (Path(__file__).resolve().parents[4] / "scheduler/sim/README.md").read_text("utf-8")
    missing = [name for name in COLUMNS if f"`{name}`" not in readme]
    assert missing == []


INPUTS = {
    "cluster": {"source": "nodes.csv", "nodes": 1213, "gpus": 6212},
    "workload": {"source": "pods.csv", "jobs": 8152, "pods": 8152},
    "policies": ["gputopo", "fgd"],
    "seeds": [42, 43],
    "mode": "protocol",
    "inflate": 1.3,
}


def test_the_header_names_cluster_workload_size_seeds_and_mode():
    lines = format_header(INPUTS).splitlines()
    assert lines[0] == "cluster:  nodes.csv (1,213 nodes, 6,212 GPUs)"
    assert lines[1] == "workload: pods.csv (8,152 jobs, 8,152 pods)"
    assert lines[2] == "policies: gputopo, fgd; seeds: 42, 43"
    assert lines[3].startswith(
        "mode:     protocol; pods shuffled by the seed and inflated to 130 %"
    )


def test_the_header_of_a_replay_gives_its_settings():
    replay = {"load": 2000.0, "start": 10_000_000, "nodeShare": 0.5, "gangWindow": None}
    inputs = {**INPUTS, "mode": "events", "inflate": None, "replay": replay, "shuffleNodes": True}
    assert format_header(inputs).splitlines()[3] == (
        "mode:     events; arrivals, durations and departures as given, load 2000, from second "
        "10,000,000, node share 0.5, no gangs, nodes ranked by the seed"
    )


def test_json_records_its_inputs_first():
    doc = runs_document([run("fgd", 1, 95.0)], inputs=INPUTS)
    assert list(doc) == ["inputs", "runs"]
    assert doc["inputs"] == INPUTS
