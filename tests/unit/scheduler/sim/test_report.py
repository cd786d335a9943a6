"""`scheduler.sim.report`: the per-policy table (mean ± sd over seeds) and the JSON document."""

from __future__ import annotations

from scheduler.sim.protocol import RunResult
from scheduler.sim.report import format_table, runs_document


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
    assert rows[0].split()[:4] == ["policy", "runs", "alloc@100%", "alloc@130%"]
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
