"""`scheduler.sim.fit`: the peak GPU demand of a workload (what a run can load the cluster with)."""

from __future__ import annotations

from scheduler.sim.fit import peak_demand_gpus
from scheduler.sim.workload import Job, PodSpec, Workload


def test_peak_demand_counts_what_runs_at_once():
    jobs = (
        Job(name="a", pod=PodSpec(gpus=2), replicas=2, arrival=0, duration=10),
        Job(name="b", pod=PodSpec(gpu_milli=500), arrival=10, duration=5),  # a left at 10
        Job(name="c", pod=PodSpec(gpus=1), arrival=12),  # no duration: runs to the end
    )
    assert peak_demand_gpus(Workload(jobs)) == 4.0
    assert peak_demand_gpus(Workload(jobs[1:])) == 1.5


def test_cpu_only_jobs_ask_no_gpu():
    assert peak_demand_gpus(Workload((Job(name="cpu", pod=PodSpec(cpu_milli=8000)),))) == 0.0
