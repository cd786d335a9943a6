"""What a run cannot show, found before it runs: jobs no node could ever hold, and a workload too
light to load the cluster. Both become one warning line of `gputopo-scheduler simulate`.

A job can never be placed when no node group passes the filters the placement code applies to an
empty node: GPU model (`gpuModels`), whole GPUs, a share's one GPU, cpu, memory. MIG requests are
not judged here (a node's MIG layout is the fixture's; the run says what it placed).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from scheduler.sim.workload import ClusterSpec, Job, NodeGroup, PodSpec, Workload

__all__ = ["never_placed", "peak_demand_gpus"]


def _fits(pod: PodSpec, group: NodeGroup) -> bool:
    if pod.cpu_milli > group.cpu_milli or pod.memory > group.memory:
        return False
    if pod.mig:
        return True
    if pod.gpu_models and (pod.gpus or pod.gpu_milli) and group.model not in pod.gpu_models:
        return False
    return pod.gpus <= group.gpus and (not pod.gpu_milli or group.gpus >= 1)


def _reason(pod: PodSpec, groups: Iterable[NodeGroup]) -> str:
    listed = tuple(groups)
    wants_gpu = pod.gpus or pod.gpu_milli
    if pod.gpu_models and wants_gpu and not any(g.model in pod.gpu_models for g in listed):
        return f"GPU model {'/'.join(sorted(pod.gpu_models))}"
    if pod.gpus > max((g.gpus for g in listed), default=0):
        return f"{pod.gpus} GPUs"
    return f"{pod.cpu_milli / 1000:g} cpu, {pod.memory / 2**30:g} GiB and the GPUs together"


def never_placed(spec: ClusterSpec, workload: Workload) -> str | None:
    """One line naming the jobs that fit no node, with their count and why; None when all fit."""
    reasons: Counter[str] = Counter()
    pods = 0
    for job in workload.jobs:
        if not any(_fits(job.pod, g) for g in spec.groups if g.count > 0):
            reasons[_reason(job.pod, spec.groups)] += 1
            pods += job.replicas
    if not reasons:
        return None
    jobs = sum(reasons.values())
    why = "; ".join(f"{count:,} ask for {reason}" for reason, count in reasons.most_common())
    models = sorted({g.model for g in spec.groups if g.model and g.gpus})
    return (
        f"{jobs:,} of {len(workload.jobs):,} jobs ({pods:,} pods) fit no node of the cluster and "
        f"will never be placed: {why} (the cluster's GPU models: {', '.join(models) or 'none'})"
    )


def _gpus(job: Job) -> float:
    return job.replicas * job.pod.gpu_milli_total / 1000


def peak_demand_gpus(workload: Workload) -> float:
    """The most GPUs the workload asks for at once if every job started on arrival and ran its
    duration (a job without one runs to the end)."""
    changes: list[tuple[float, float]] = []
    for job in workload.jobs:
        changes.append((job.arrival, _gpus(job)))
        if job.duration is not None:
            changes.append((job.arrival + job.duration, -_gpus(job)))
    peak = running = 0.0
    for _time, delta in sorted(changes, key=lambda c: (c[0], c[1])):
        running += delta
        peak = max(peak, running)
    return peak
