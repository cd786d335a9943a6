"""Generated workloads (issue 45): one seed gives one cluster and one workload, with no I/O.

`generate(seed, size)` draws, from `random.Random(seed)` alone:

* a cluster shape (`cluster_shape`): a few kinds of GPU node (8-GPU NVSwitch nodes of two
  models, 2-GPU PCIe nodes, time-sliced nodes with `shares`, sometimes A100 nodes in MIG mode
  from the `dgx-a100-mig` fixture), CPU-only nodes, and racks (`gputopo.io/rack`, two nodes each);
* a job mix: weights around `BASE_MIX` over the classes of `JobClass`, each drawn within half to
  twice its base weight;
* an arrival pattern (`Pattern`: steady, bursts, diurnal);
* durations from a log-normal with the spread of the Alibaba GPU trace (`TRACE_LOG_SIGMA`),
  capped at `DURATION_CAP`, each class with its own median.

The arrival horizon is set so the GPU work offered is `size.load` times what the cluster's GPUs
can do over it: the queue builds up, and placement decides how long pods wait. The output is a
`ClusterSpec` and a `Workload`, the types the simulator already replays.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from scheduler.sim.workload import GIB, ClusterSpec, Job, NodeGroup, PodSpec, Workload

__all__ = [
    "BASE_MIX",
    "DEFAULT_SIZE",
    "DURATION_CAP",
    "TRACE_LOG_SIGMA",
    "Generated",
    "JobClass",
    "Pattern",
    "Size",
    "cluster_shape",
    "generate",
]

TRACE_LOG_SIGMA = 1.88
"""Standard deviation of ln(duration) of the pods that ran in the Alibaba GPU trace
(`openb_pod_list_default.csv`: 7,255 pods, deletion − scheduled time; median 616 s, p90 7,763 s,
p99 114,035 s). Only this shape is taken; medians are per class (`_MEDIAN`)."""
DURATION_CAP = 6 * 3600.0
"""Longest generated duration (s): the trace's tail runs for days, a study for hours,
and the makespan should not be one job's length."""
RACK_LABEL = "gputopo.io/rack"
MIG_FIXTURE = "dgx-a100-mig"
MIG_FIXTURE_MODEL = "NVIDIA A100-SXM4-80GB"
MIG_PROFILE = "1g.10gb"  # a `mig:` key of `PodSpec`: the profile


class JobClass(StrEnum):
    ONE_GPU = "1-gpu"
    MULTI_GPU = "multi-gpu"  # one pod of 2, 4 or 8 GPUs
    GANG = "gang"  # 2..4 pods of 1, 2, 4 or 8 GPUs, all or nothing
    SHARE = "share"  # gpuShare, or gpuMemory/gpuCompute on time-sliced GPUs
    CPU = "cpu"
    PINNED = "pinned"  # 1 or 2 GPUs of one named model
    MIG = "mig"  # one MIG slice (only on clusters with MIG nodes)


class Pattern(StrEnum):
    STEADY = "steady"  # a Poisson process: arrivals uniform over the horizon
    BURSTS = "bursts"  # a few bursts, arrivals exponentially close after each start
    DIURNAL = "diurnal"  # a rate that swings by ±80 % over a day


BASE_MIX: Mapping[JobClass, float] = {
    JobClass.ONE_GPU: 0.30,
    JobClass.MULTI_GPU: 0.12,
    JobClass.GANG: 0.10,
    JobClass.SHARE: 0.20,
    JobClass.CPU: 0.15,
    JobClass.PINNED: 0.08,
    JobClass.MIG: 0.05,
}
_MEDIAN: Mapping[JobClass, float] = {
    JobClass.ONE_GPU: 1800.0,
    JobClass.MULTI_GPU: 2400.0,
    JobClass.GANG: 3600.0,
    JobClass.SHARE: 1200.0,
    JobClass.CPU: 900.0,
    JobClass.PINNED: 1800.0,
    JobClass.MIG: 1200.0,
}
BURST_WIDTH = 300.0  # mean seconds from a burst's start to an arrival in it
DAY = 86_400.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Size:
    """How big a generated workload is: jobs, GPU nodes, and offered load."""

    jobs: int = 300
    gpu_nodes: int = 12
    cpu_nodes: int = 4
    load: float = 1.2  # GPU work offered / GPU capacity over the arrival horizon
    pattern: Pattern | None = None  # None: drawn from the seed


DEFAULT_SIZE = Size()


@dataclass(frozen=True, slots=True, kw_only=True)
class Generated:
    seed: int
    cluster: ClusterSpec
    workload: Workload
    pattern: Pattern
    mix: Mapping[JobClass, float]
    classes: Mapping[str, JobClass]  # job name -> its class
    horizon: float


@dataclass(frozen=True, slots=True, kw_only=True)
class _Kind:
    name: str
    gpus: int
    model: str
    cpu: int
    memory_gib: int
    shares: int = 0
    fixture: str | None = None


_KINDS: tuple[_Kind, ...] = (
    _Kind(name="h100", gpus=8, model="NVIDIA-H100-80GB", cpu=224, memory_gib=2048),
    _Kind(name="a100", gpus=8, model="NVIDIA-A100-80GB", cpu=256, memory_gib=2048),
    _Kind(name="l4", gpus=4, model="NVIDIA-L4", cpu=64, memory_gib=512),
    _Kind(name="t4", gpus=2, model="Tesla-T4", cpu=104, memory_gib=512),
    _Kind(name="t4-ts", gpus=2, model="Tesla-T4", cpu=104, memory_gib=512, shares=4),
)
_MIG_KIND = _Kind(
    name="a100-mig", gpus=4, model=MIG_FIXTURE_MODEL, cpu=256, memory_gib=2048, fixture=MIG_FIXTURE
)
"""The `dgx-a100-mig` fixture: 8 A100s, 4 of them in MIG mode (4 whole GPUs, MIG slices)."""


def _group(kind: _Kind, count: int) -> NodeGroup:
    return NodeGroup(
        name=kind.name,
        count=count,
        fixture=kind.fixture,
        gpus=kind.gpus,
        model=kind.model,
        cpu_milli=kind.cpu * 1000,
        memory=kind.memory_gib * GIB,
        topology={RACK_LABEL: f"rack-{kind.name}-{{index/2}}"},
        shares=kind.shares,
        gpu_memory=(15 if kind.model == "Tesla-T4" else 80) * GIB,
    )


def cluster_shape(rng: random.Random, size: Size) -> ClusterSpec:
    """Three to five kinds of GPU node (one of them an 8-GPU kind, MIG nodes half the time;
    no more kinds than nodes) sharing `size.gpu_nodes`, and `size.cpu_nodes` CPU-only nodes."""
    big = rng.choice([k for k in _KINDS if k.gpus == 8])
    others = rng.sample([k for k in _KINDS if k is not big], rng.randint(2, 3))
    kinds = ([big, *others] + ([_MIG_KIND] if rng.random() < 0.5 else []))[: size.gpu_nodes]
    counts = [1] * len(kinds)
    for _ in range(max(0, size.gpu_nodes - len(kinds))):
        counts[rng.randrange(len(kinds))] += 1
    groups = [_group(kind, count) for kind, count in zip(kinds, counts, strict=True)]
    if size.cpu_nodes:
        groups.append(
            NodeGroup(name="cpu", count=size.cpu_nodes, cpu_milli=64_000, memory=256 * GIB)
        )
    return ClusterSpec(tuple(groups), "<generated>")


def _draw_mix(rng: random.Random, cluster: ClusterSpec) -> dict[JobClass, float]:
    """Each class's base weight times a factor in [1/2, 2] (log-uniform), normalised; no MIG
    jobs on a cluster without MIG nodes."""
    has_mig = any(g.fixture == MIG_FIXTURE for g in cluster.groups)
    raw = {
        cls: weight * math.exp(rng.uniform(-math.log(2), math.log(2)))
        for cls, weight in BASE_MIX.items()
        if cls is not JobClass.MIG or has_mig
    }
    total = sum(raw.values())
    return {cls: weight / total for cls, weight in raw.items()}


def _pods_fitting(cluster: ClusterSpec, gpus: int) -> int:
    """How many pods of `gpus` whole GPUs the unshared GPUs hold at once."""
    return sum(g.count * (g.gpus // gpus) for g in cluster.groups if not g.shares)


def _pod(rng: random.Random, cls: JobClass, cluster: ClusterSpec) -> tuple[PodSpec, int]:
    """One replica's request and the number of replicas."""
    if cls is JobClass.ONE_GPU:
        return PodSpec(cpu_milli=rng.choice((4, 8, 16)) * 1000, memory=32 * GIB, gpus=1), 1
    if cls is JobClass.MULTI_GPU:
        gpus = rng.choices((2, 4, 8), weights=(5, 3, 2))[0]
        return PodSpec(cpu_milli=8000 * gpus, memory=32 * gpus * GIB, gpus=gpus), 1
    if cls is JobClass.GANG:
        gpus = rng.choice([g for g in (1, 2, 4, 8) if _pods_fitting(cluster, g) >= 2])
        replicas = rng.randint(2, min(4, _pods_fitting(cluster, gpus)))
        return PodSpec(cpu_milli=8000 * gpus, memory=32 * gpus * GIB, gpus=gpus), replicas
    if cls is JobClass.SHARE:
        return _share(rng, cluster), 1
    if cls is JobClass.CPU:
        return PodSpec(cpu_milli=rng.choice((4, 8, 16, 32)) * 1000, memory=64 * GIB), 1
    if cls is JobClass.PINNED:
        kind = rng.choice([g for g in cluster.groups if g.gpus and not g.shares and not g.fixture])
        gpus = rng.choice((1, 2))
        models = frozenset({kind.model})
        return PodSpec(cpu_milli=8000, memory=32 * GIB, gpus=gpus, gpu_models=models), 1
    return PodSpec(cpu_milli=4000, memory=16 * GIB, mig={MIG_PROFILE: 1}), 1


def _share(rng: random.Random, cluster: ClusterSpec) -> PodSpec:
    """A share of one GPU: `gpuShare` milli, or memory and compute on a time-sliced GPU."""
    if any(g.shares for g in cluster.groups) and rng.random() < 0.4:
        return PodSpec(
            cpu_milli=2000, memory=8 * GIB, gpu_memory=3 * GIB, gpu_compute=rng.choice((25, 50))
        )
    return PodSpec(cpu_milli=4000, memory=16 * GIB, gpu_milli=rng.randint(1, 9) * 100)


def _duration(rng: random.Random, cls: JobClass) -> float:
    """Log-normal around the class's median with the trace's spread, in whole seconds."""
    drawn = _MEDIAN[cls] * math.exp(rng.gauss(0.0, TRACE_LOG_SIGMA))
    return float(round(min(DURATION_CAP, max(30.0, drawn))))


def _gpu_work(pod: PodSpec, replicas: int, duration: float) -> float:
    """GPU-seconds a job asks (a share counts its fraction, a MIG slice one seventh)."""
    if pod.mig:
        per_pod = 1 / 7
    elif pod.gpu_compute is not None:
        per_pod = pod.gpu_compute / 100
    else:
        per_pod = pod.gpu_milli_total / 1000
    return per_pod * replicas * duration


def arrivals(rng: random.Random, pattern: Pattern, count: int, horizon: float) -> list[float]:
    """`count` arrival times in [0, horizon] (bursts may run a little past it), sorted."""
    if pattern is Pattern.STEADY:
        times = [rng.uniform(0.0, horizon) for _ in range(count)]
    elif pattern is Pattern.BURSTS:
        starts = [rng.uniform(0.0, horizon) for _ in range(rng.randint(3, 6))]
        times = [rng.choice(starts) + rng.expovariate(1 / BURST_WIDTH) for _ in range(count)]
    else:
        times = _diurnal(rng, count, horizon)
    return sorted(round(t, 1) for t in times)


def _diurnal(rng: random.Random, count: int, horizon: float) -> list[float]:
    """Thinning: rate ∝ 1 + 0.8 sin(2π t / period), a whole number of periods (days when the
    horizon spans days, else one) over the horizon."""
    period = horizon / max(1, round(horizon / DAY))
    phase = rng.uniform(0.0, 2 * math.pi)
    times: list[float] = []
    while len(times) < count:
        t = rng.uniform(0.0, horizon)
        if rng.uniform(0.0, 1.8) <= 1 + 0.8 * math.sin(2 * math.pi * t / period + phase):
            times.append(t)
    return times


def _classes(rng: random.Random, mix: Mapping[JobClass, float], count: int) -> list[JobClass]:
    """`count` classes drawn with the mix's weights, every class at least once."""
    kinds = list(mix)
    drawn = rng.choices(kinds, weights=[mix[k] for k in kinds], k=max(0, count - len(kinds)))
    out = kinds[:count] + drawn
    rng.shuffle(out)
    return out


def generate(seed: int, size: Size = DEFAULT_SIZE, day: int = 0) -> Generated:
    """The cluster and workload of `seed` (the same seed, the same result). Another `day`
    (-1: the day before) is the same cluster, job mix and arrival pattern with other jobs
    drawn: the history a scheduler that ran the day before has seen. Its jobs' names end in
    `@day<day>`, so no pod key is one of day 0's."""
    rng = random.Random(seed)
    cluster = cluster_shape(rng, size)
    mix = _draw_mix(rng, cluster)
    pattern = size.pattern or rng.choice(list(Pattern))
    if day:
        rng = random.Random(f"gen-{seed}@day{day}")
    drawn = []
    for cls in _classes(rng, mix, size.jobs):
        pod, replicas = _pod(rng, cls, cluster)
        drawn.append((cls, pod, replicas, _duration(rng, cls)))
    work = sum(_gpu_work(pod, replicas, d) for _, pod, replicas, d in drawn)
    horizon = max(60.0, work / (max(1, cluster.gpu_count) * size.load))
    times = arrivals(rng, pattern, len(drawn), horizon)
    jobs = _jobs(drawn, times, f"@day{day}" if day else "")
    classes = {job.name: cls for job, (cls, *_) in zip(jobs, drawn, strict=True)}
    name = f"gen-{seed}@day{day}" if day else f"gen-{seed}"
    workload = Workload(tuple(sorted(jobs, key=lambda j: (j.arrival, j.name))), name)
    return Generated(
        seed=seed,
        cluster=ClusterSpec(cluster.groups, f"gen-{seed}"),
        workload=workload,
        pattern=pattern,
        mix=mix,
        classes=classes,
        horizon=horizon,
    )


def _jobs(
    drawn: Sequence[tuple[JobClass, PodSpec, int, float]],
    times: Sequence[float],
    suffix: str,
) -> list[Job]:
    """One job per draw, arriving at the matching time (the draws are in random order)."""
    return [
        Job(
            name=f"{cls.value}-{i:04d}{suffix}",
            pod=pod,
            replicas=replicas,
            min_member=replicas if cls is JobClass.GANG else 1,
            arrival=arrival,
            duration=duration,
        )
        for i, ((cls, pod, replicas, duration), arrival) in enumerate(
            zip(drawn, times, strict=True)
        )
    ]
