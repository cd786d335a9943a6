"""`scheduler.sim.feasible`: jobs no node can hold, and the peak demand of a workload."""

from __future__ import annotations

import pytest

from scheduler.sim.feasible import never_placed, peak_demand_gpus
from scheduler.sim.workload import GIB, ClusterSpec, Job, NodeGroup, PodSpec, Workload

CLUSTER = ClusterSpec(
    groups=(
        NodeGroup(name="g2", count=2, gpus=8, model="G2", cpu_milli=96_000, memory=512 * GIB),
        NodeGroup(name="t4", count=1, gpus=2, model="T4", cpu_milli=32_000, memory=128 * GIB),
    )
)


def job(name: str, replicas: int = 1, **pod: object) -> Job:
    return Job(name=name, pod=PodSpec(**pod), replicas=replicas)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("jobs", "expected"),
    [
        pytest.param(
            [job("a", gpus=1, gpu_models=frozenset({"Tesla-T4"})), job("b", gpus=1)],
            "1 of 2 jobs (1 pods) fit no node of the cluster and will never be placed: 1 ask "
            "for GPU model Tesla-T4 (the cluster's GPU models: G2, T4)",
            id="a model no node has",
        ),
        pytest.param(
            [job("a", replicas=3, gpus=16), job("b", gpus=2, gpu_models=frozenset({"T4"}))],
            "1 of 2 jobs (3 pods) fit no node of the cluster and will never be placed: 1 ask "
            "for 16 GPUs (the cluster's GPU models: G2, T4)",
            id="more GPUs than any node",
        ),
        pytest.param(
            [job("a", gpus=2, cpu_milli=64_000, gpu_models=frozenset({"T4"}))],
            "1 of 1 jobs (1 pods) fit no node of the cluster and will never be placed: 1 ask "
            "for 64 cpu, 1 GiB and the GPUs together (the cluster's GPU models: G2, T4)",
            id="cpu and model together",
        ),
    ],
)
def test_jobs_that_fit_no_node_are_named_with_count_and_reason(jobs: list[Job], expected: str):
    assert never_placed(CLUSTER, Workload(tuple(jobs))) == expected


def test_jobs_that_fit_somewhere_say_nothing():
    jobs = (job("share", gpu_milli=500, gpu_models=frozenset({"T4"})), job("cpu", cpu_milli=90_000))
    assert never_placed(CLUSTER, Workload(jobs)) is None


def test_peak_demand_counts_what_runs_at_once():
    jobs = (
        Job(name="a", pod=PodSpec(gpus=2), replicas=2, arrival=0, duration=10),
        Job(name="b", pod=PodSpec(gpu_milli=500), arrival=10, duration=5),  # a has left
        Job(name="c", pod=PodSpec(gpus=1), arrival=12),  # runs to the end
    )
    assert peak_demand_gpus(Workload(jobs)) == 4.0
    assert peak_demand_gpus(Workload(jobs[1:])) == 1.5
