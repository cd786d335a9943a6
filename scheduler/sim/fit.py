"""Jobs that no node of the cluster could ever host, whatever else runs: said before a run, so a
mismatch between a cluster and a workload (a trace's GPU models on another cluster, a pod bigger
than every node) is a one-line warning instead of jobs quietly left unplaced. Likewise the peak
GPU demand of a workload in event mode: one too light to load the cluster is said before a run."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from scheduler.sim.workload import ClusterSpec, NodeGroup, PodSpec, Workload

__all__ = ["never_fit", "peak_demand_gpus"]

GIB = 1 << 30


def never_fit(spec: ClusterSpec, workload: Workload) -> Counter[str]:
    """Why jobs can never be placed, with how many jobs each reason stops. Node groups built from
    an NVML fixture are not read here; with one, the size and model checks are skipped."""
    if any(group.fixture for group in spec.groups):
        return Counter()
    models = sorted({g.model for g in spec.groups if g.gpus and g.model})
    found: Counter[str] = Counter()
    for job in workload.jobs:
        reason = _never_fits(job.pod, spec.groups, models)
        if reason is not None:
            found[reason] += 1
    return found


def _never_fits(pod: PodSpec, groups: Sequence[NodeGroup], models: Sequence[str]) -> str | None:
    if pod.gpu_models and models and not pod.gpu_models & set(models):
        wanted = ", ".join(sorted(pod.gpu_models))
        return f"no node has GPU model {wanted} (the cluster has {', '.join(models)})"
    hosts = [g for g in groups if _hosts(g, pod)]
    if hosts:
        return None
    return (
        f"no node is big enough for {pod.gpus or pod.gpu_milli / 1000:g} GPU, "
        f"{pod.cpu_milli / 1000:g} cpu, {pod.memory / GIB:g} GiB"
    )


def _hosts(group: NodeGroup, pod: PodSpec) -> bool:
    if pod.gpu_models and group.model not in pod.gpu_models:
        return False
    gpus_needed = pod.gpus or (1 if pod.gpu_milli else 0)
    return (
        group.gpus >= gpus_needed
        and group.cpu_milli >= pod.cpu_milli
        and group.memory >= pod.memory
        and (not pod.mig or group.gpus > 0)
    )


def peak_demand_gpus(workload: Workload) -> float:
    """The most GPUs the workload asks for at once if every job started on arrival and ran its
    duration (a job without one runs to the end): what a run can load the cluster with at most."""
    changes: list[tuple[float, float]] = []
    for job in workload.jobs:
        gpus = job.replicas * job.pod.gpu_milli_total / 1000
        changes.append((job.arrival, gpus))
        if job.duration is not None:
            changes.append((job.arrival + job.duration, -gpus))
    peak = running = 0.0
    for _time, delta in sorted(changes):  # at one instant, departures (< 0) before arrivals
        running += delta
        peak = max(peak, running)
    return peak
