"""Event mode with queue keys per GPU model (DESIGN §10 "Per GPU model"): a model max steers
placement to another model, a model min reclaims on that model's nodes only, and the queue
report counts GPU-seconds per model key."""

from __future__ import annotations

from typing import Any

from scheduler.quota import read_queue
from scheduler.sim.events import run_events
from scheduler.sim.queues import QueueReport
from scheduler.sim.workload import GIB, ClusterSpec, Job, NodeGroup, PodSpec, Workload

GPU = "nvidia.com/gpu"
ON_H100, ON_T4 = f"{GPU}@H100", f"{GPU}@T4"
MIXED = ClusterSpec(
    (
        NodeGroup(name="h", count=1, gpus=4, model="H100", cpu_milli=64_000, memory=512 * GIB),
        NodeGroup(name="t", count=1, gpus=4, model="T4", cpu_milli=64_000, memory=512 * GIB),
    )
)


def queue(name: str, **spec: Any) -> Any:
    return read_queue({"metadata": {"name": name}, "spec": spec})


def job(name: str, leaf: str, models: frozenset[str] = frozenset(), **kw: Any) -> Job:
    pod = PodSpec(cpu_milli=1000, gpus=1, gpu_models=models)
    return Job(name=name, pod=pod, queue=leaf, **{"duration": 100.0, **kw})


def by_name(reports: tuple[QueueReport, ...]) -> dict[str, QueueReport]:
    return {r.name: r for r in reports}


def test_a_model_max_sends_the_rest_to_another_model_at_once() -> None:
    queues = (queue("a", max={ON_H100: 2}), queue("b", max={ON_T4: 8}))
    jobs = tuple(job(f"a{i}", "a") for i in range(6))
    a = by_name(run_events(MIXED, Workload(jobs, queues=queues), "bestfit", 1).queues)["a"]
    assert a.model_gpu_seconds == {ON_H100: 200.0, ON_T4: 400.0}
    assert (a.pods_started, a.wait_p99) == (6, 0.0)


def test_a_pod_that_runs_only_on_a_model_capped_at_zero_never_starts() -> None:
    queues = (queue("a", max={ON_T4: 0}),)
    jobs = (job("t", "a", frozenset({"T4"})), job("any", "a"))
    a = by_name(run_events(MIXED, Workload(jobs, queues=queues), "bestfit", 1).queues)["a"]
    assert (a.pods, a.pods_started) == (2, 1)
    assert a.model_gpu_seconds == {ON_T4: 0.0}


def test_an_h100_min_reclaims_on_h100_nodes_only() -> None:
    """B borrows all 8 GPUs, its T4 pods the cheapest victims by priority; A, owed 2 H100
    GPUs, reclaims 2 H100 GPUs and B's T4 pods run to their end."""
    queues = (queue("a", min={ON_H100: 2}), queue("b", max={ON_T4: 8}))
    h100 = frozenset({"H100"})
    jobs = (
        *(job(f"bh{i}", "b", h100, priority=5, duration=1000.0) for i in range(4)),
        *(job(f"bt{i}", "b", frozenset({"T4"}), duration=1000.0) for i in range(4)),
        *(job(f"a{i}", "a", arrival=10.0) for i in range(2)),
    )
    result = run_events(MIXED, Workload(jobs, queues=queues), "bestfit", 1)
    reports = by_name(result.queues)
    assert reports["b"].model_gpu_seconds[ON_T4] == 4000.0  # no T4 pod was evicted
    assert reports["a"].model_gpu_seconds[ON_H100] == 200.0
    assert reports["a"].wait_p99 == 0.0
