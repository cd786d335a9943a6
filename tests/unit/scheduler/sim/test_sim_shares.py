"""GPU shares in the simulator (DESIGN §12): `gpuMemory` / `gpuCompute` jobs are share pods on
time-sliced node groups, placed by the scheduler's own code; bad fields name file and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.placement import default_scoring
from scheduler.sim.build import build_cluster, job_requests
from scheduler.sim.workload import WorkloadError, load_cluster, load_workload

CLUSTER = """version: v1
nodeGroups:
  - {name: plain, count: 1, gpus: 2, model: Tesla-T4, cpu: 64, memoryGiB: 256}
  - {name: ts, count: 1, gpus: 2, model: Tesla-T4, cpu: 64, memoryGiB: 256, shares: 3,
     gpuMemoryGiB: 16}
"""
WORKLOAD = """version: v1
jobs:
  - {name: nb, count: 8, pod: {cpu: 1, memoryGiB: 1, gpuMemory: 6Gi, gpuCompute: 30}}
"""


def write(tmp: Path, name: str, text: str) -> str:
    path = tmp / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_memory_jobs_land_only_on_shared_gpus_within_their_capacity(tmp_path: Path):
    cluster = build_cluster(load_cluster(write(tmp_path, "c.yaml", CLUSTER)))
    placer = cluster.placer(default_scoring())
    placed = []
    for job in load_workload(write(tmp_path, "w.yaml", WORKLOAD)).jobs:
        (request,) = job_requests(job)
        assignment = placer.best_assignment(request)
        if assignment is not None:
            cluster.bind(request, assignment)
            placed.append(assignment)
    assert {a.node for a in placed} == {"ts-0"}
    assert len(placed) == 4  # two 16Gi GPUs hold two 6Gi shares each
    node = cluster.snapshot.node("ts-0")
    assert node.memory_free == [4 << 30, 4 << 30]
    assert node.compute_free == [40, 40]
    assert node.slots_free == [1, 1]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("jobs: [{name: a, pod: {gpuCompute: 120}}]", r"jobs\[0\].pod.gpuCompute: must be 1..100"),
        ("jobs: [{name: a, pod: {gpuMemory: lots}}]", r"jobs\[0\].pod.gpuMemory: "),
        (
            "jobs: [{name: a, pod: {gpuShare: 300, gpuMemory: 1Gi}}]",
            r"jobs\[0\].pod: gpus, gpuShare, gpuMemory/gpuCompute, mig and claims are exclusive",
        ),
    ],
)
def test_bad_share_jobs_name_the_key(tmp_path: Path, text: str, message: str):
    with pytest.raises(WorkloadError, match=message):
        load_workload(write(tmp_path, "w.yaml", f"version: v1\n{text}\n"))


def test_shares_need_a_gpu_group_without_a_fixture(tmp_path: Path):
    text = "version: v1\nnodeGroups: [{name: a, fixture: dgx-h100, shares: 4}]\n"
    with pytest.raises(WorkloadError, match=r"nodeGroups\[0\].shares: shares need gpus and model"):
        load_cluster(write(tmp_path, "c.yaml", text))


def test_the_builtin_cluster_has_a_time_sliced_group():
    spec = load_cluster("default")
    shared = [g for g in spec.groups if g.shares]
    assert [(g.name, g.shares) for g in shared] == [("t4-ts", 4)]
