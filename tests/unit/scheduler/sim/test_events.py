"""`scheduler.sim.events`: arrivals, durations, gangs that wait for room and hold nothing."""

from __future__ import annotations

from scheduler.sim.events import run_events
from scheduler.sim.workload import GIB, ClusterSpec, Job, NodeGroup, PodSpec, Workload

TWO_NODES = ClusterSpec(
    (NodeGroup(name="n", count=2, gpus=4, model="H100", cpu_milli=64_000, memory=512 * GIB),)
)


def job(
    name: str,
    arrival: float,
    gpus: int,
    replicas: int = 1,
    min_member: int = 1,
    duration: float | None = 100.0,
) -> Job:
    pod = PodSpec(cpu_milli=1000, gpus=gpus)
    return Job(
        name=name,
        pod=pod,
        replicas=replicas,
        min_member=min_member,
        arrival=arrival,
        duration=duration,
    )


def test_a_gang_waits_until_every_member_fits_then_starts_together():
    workload = Workload(
        (
            job("fill", 0.0, 4, replicas=2, duration=50.0),  # both nodes full until t=50
            job("gang", 10.0, 4, replicas=2, min_member=2, duration=10.0),
        )
    )
    result = run_events(TWO_NODES, workload, "default", 1)
    assert result.jobs_placed == result.jobs_total == 2
    assert result.gang_wait_seconds == 40.0
    assert result.failed == {}
    assert result.peak_allocation == 100.0


def test_a_waiting_gang_holds_nothing_and_does_not_block_smaller_jobs():
    workload = Workload(
        (
            job("half", 0.0, 2, duration=100.0),
            job("gang", 1.0, 4, replicas=2, min_member=2, duration=10.0),  # needs both nodes
            job("small", 2.0, 1, duration=10.0),
        )
    )
    result = run_events(TWO_NODES, workload, "bestfit", 1)
    assert result.jobs_placed == 3
    assert result.gang_wait_seconds == 99.0  # placed when "half" ends at t=100


def test_jobs_that_never_fit_are_reported_by_pod_class():
    workload = Workload(
        (
            job("huge", 0.0, 8),
            Job(name="share", pod=PodSpec(gpu_milli=400), arrival=0.0, duration=5.0),
        )
    )
    result = run_events(TWO_NODES, workload, "fgd", 1)
    assert result.jobs_placed == 1
    assert result.failed == {"8-gpu": 1}
    assert result.pods_placed == 1


def test_time_weighted_allocation():
    # One 4-GPU pod on 8 GPUs for the whole span: 50% on average.
    workload = Workload((job("a", 0.0, 4, duration=100.0), job("b", 100.0, 0, duration=0.0)))
    result = run_events(TWO_NODES, workload, "spread", 1)
    assert result.mean_allocation == 50.0
    assert result.decisions_per_second > 0
