"""The FGD paper's evaluation protocol (Weng et al., ATC '23), on the real placement code.

One run, for a cluster, a workload, a policy and a seed (`random.Random(seed)` draws, in order):

1. the workload's pods, sorted by name, are shuffled;
2. inflation: pods drawn uniformly (with replacement) from the original workload are appended
   until the next draw would push the arrived GPU demand past `ratio` × cluster GPU capacity (as
   the published simulator tests it: with the drawn pod's per-GPU share); a workload already
   above the target instead loses random pods until it is at or below it. CPU-only pods are
   drawn like any other and add no GPU demand;
3. the nodes get a random rank (`0042-<name>`), so ties fall on an arbitrary, fixed node order;
4. every pod is tried once, in order; nothing departs.

After each pod the arrived GPU demand and the allocated GPU milli are recorded. The allocation
ratio at k% is the mean allocation (percent of capacity) over the pods at which the arrived
demand, rounded to a whole percent, equals k (the published analysis; ±1 point when none does).
Multi-replica jobs of a YAML workload count as that many independent pods here.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from agent.model import MILLI_PER_GPU
from scheduler.config import SchedulerConfig
from scheduler.placement import Assignment, PodRequest
from scheduler.placement.fgd import Fragmentation, PodShape, node_view, typical_pods
from scheduler.sim.build import build_cluster, node_names, pod_request, ranked_names
from scheduler.sim.cluster import Cluster
from scheduler.sim.evictions import EvictionReport
from scheduler.sim.metrics import ClassWaits, JobFigures, Sample
from scheduler.sim.policies import SimScheduler, canonical_policy, make_policy
from scheduler.sim.queues import QueueReport
from scheduler.sim.workload import ClusterSpec, PodSpec, Workload

__all__ = [
    "PodDecided",
    "RunResult",
    "SimPod",
    "allocation_by_arrival",
    "inflate",
    "run_protocol",
    "workload_pods",
]

Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class SimPod:
    name: str
    spec: PodSpec


PodDecided = Callable[[SimPod, Assignment | None, Cluster], None]
"""Told of every pod as the protocol decides it: the pod, where it went (None: refused) and the
cluster after the decision (a study's look at the state; it must not change it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    """One policy on one seed. Percentages are of the cluster's GPU capacity."""

    policy: str
    seed: int
    allocation: dict[int, float]
    fragmented_share: float
    fragmented_gpus: int
    pods_arrived: int
    pods_placed: int
    failed: dict[str, int]
    decisions_per_second: float
    gang_wait_seconds: float | None = None
    mean_allocation: float | None = None  # event mode: time-weighted mean allocation (%)
    peak_allocation: float | None = None  # event mode: highest allocation (%)
    jobs_total: int = 0
    jobs_placed: int = 0
    queues: tuple[QueueReport, ...] = ()  # event mode with queues: one per queue
    utilisation: float | None = None  # event mode: time-weighted allocation over arrivals (%)
    fragmentation_mean: float | None = None  # event mode: mean of the timeline's samples (%)
    waits: Mapping[str, ClassWaits] = field(default_factory=dict)  # event mode: per class
    longest_8gpu_wait: float | None = None  # event mode: seconds
    timeline: tuple[Sample, ...] = field(default=(), repr=False)  # event mode
    curve: tuple[tuple[float, float], ...] = field(default=(), repr=False)
    preemption: EvictionReport | None = None  # event mode with preemption
    domains: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # event mode, §13
    gang_wait_p99: Mapping[int, float | None] = field(default_factory=dict)  # by gang GPUs
    figures: JobFigures | None = None  # event mode: over every pod and job


def workload_pods(workload: Workload) -> list[SimPod]:
    """Every replica of every job as an independent pod."""
    pods = []
    for job in workload.jobs:
        for i in range(job.replicas):
            name = job.name if job.replicas == 1 else f"{job.name}-{i}"
            pods.append(SimPod(name=name, spec=job.pod))
    return pods


def _demand(pod: SimPod) -> int:
    return pod.spec.gpu_milli_total


def _per_gpu(pod: SimPod) -> int:
    return pod.spec.gpu_milli or (MILLI_PER_GPU if pod.spec.gpus else 0)


def inflate(
    pods: Sequence[SimPod], capacity_milli: int, ratio: float, rng: random.Random
) -> list[SimPod]:
    """Steps 1-2 of the protocol: the shuffled, inflated (or trimmed) arrival sequence."""
    base = sorted(pods, key=lambda p: p.name)
    order = list(base)
    rng.shuffle(order)
    total = sum(_demand(p) for p in order)
    target = ratio * capacity_milli
    if not base or ratio <= 0:
        return order
    if total <= target:
        while True:
            pod = base[rng.randrange(len(base))]
            if total + _per_gpu(pod) > target:
                return order
            total += _demand(pod)
            order.append(pod)
    while total > target and order:
        total -= _demand(order.pop(rng.randrange(len(order))))
    return order


def allocation_by_arrival(
    events: Sequence[tuple[int, int]], capacity_milli: int
) -> dict[int, float]:
    """k -> mean allocation (%) over the events whose arrived demand rounds to k% (see module)."""
    buckets: dict[int, list[float]] = {}
    for arrived, used in events:
        key = round(100.0 * arrived / capacity_milli)
        buckets.setdefault(key, []).append(100.0 * used / capacity_milli)
    out: dict[int, float] = {}
    top = max(buckets, default=-1)
    for k in range(top + 1):
        values = buckets.get(k) or [v for j in (k - 1, k, k + 1) for v in buckets.get(j, [])]
        if values:
            out[k] = round(sum(values) / len(values), 2)
    return out


def _shape(spec: PodSpec) -> PodShape:
    return PodShape.of(spec.cpu_milli, spec.gpus, spec.gpu_milli, spec.gpu_models)


def fragmented_share(cluster: Cluster, fragmentation: Fragmentation, capacity: int) -> float:
    """The paper's fragmentation amount: Σ F(node), as a percentage of GPU capacity."""
    total = sum(fragmentation.of(node_view(n)) for n in cluster.snapshot.nodes.values())
    return round(100.0 * total / capacity, 2) if capacity else 0.0


def run_protocol(
    spec: ClusterSpec,
    workload: Workload,
    policy_name: str,
    seed: int,
    *,
    ratio: float = 1.3,
    config: SchedulerConfig | None = None,
    progress: Progress | None = None,
    on_pod: PodDecided | None = None,
) -> RunResult:
    """One protocol run (see the module docstring); `on_pod` hears of every decision."""
    rng = random.Random(seed)
    pods = workload_pods(workload)
    capacity = spec.gpu_count * MILLI_PER_GPU
    arrivals = inflate(pods, capacity, ratio, rng)
    names = node_names(spec)
    order = list(range(len(names)))
    rng.shuffle(order)
    cluster = build_cluster(spec, ranked_names(names, order).__getitem__)
    typical = typical_pods(_shape(p.spec) for p in pods)
    policy_name = canonical_policy(policy_name)
    scheduler = SimScheduler(cluster, make_policy(policy_name, typical, config), rng)
    events, failed, seconds = _place_all(scheduler, arrivals, progress, on_pod)
    stats = cluster.stats()
    return RunResult(
        policy=policy_name,
        seed=seed,
        allocation=allocation_by_arrival(events, capacity),
        fragmented_share=fragmented_share(cluster, Fragmentation(typical), capacity),
        fragmented_gpus=stats.fragmented_gpus,
        pods_arrived=len(arrivals),
        pods_placed=len(arrivals) - sum(failed.values()),
        failed=dict(sorted(failed.items())),
        decisions_per_second=round(len(arrivals) / seconds, 1) if seconds > 0 else 0.0,
        jobs_total=len(arrivals),
        jobs_placed=len(arrivals) - sum(failed.values()),
        curve=tuple((100.0 * a / capacity, 100.0 * u / capacity) for a, u in events),
    )


def _place_all(
    scheduler: SimScheduler,
    arrivals: Sequence[SimPod],
    progress: Progress | None,
    on_pod: PodDecided | None = None,
) -> tuple[list[tuple[int, int]], Counter[str], float]:
    events: list[tuple[int, int]] = []
    failed: Counter[str] = Counter()
    arrived = used = 0
    seconds = 0.0
    for k, pod in enumerate(arrivals):
        request: PodRequest = pod_request(pod.spec, f"{pod.name}#{k}")
        start = time.perf_counter()
        assignment = scheduler.place(request)
        seconds += time.perf_counter() - start
        arrived += _demand(pod)
        if assignment is None:
            failed[pod.spec.pod_class] += 1
        else:
            used += _demand(pod)
        events.append((arrived, used))
        if on_pod is not None:
            on_pod(pod, assignment, scheduler.cluster)
        if progress is not None and (k % 256 == 0 or k + 1 == len(arrivals)):
            progress(k + 1, len(arrivals))
    return events, failed, seconds
