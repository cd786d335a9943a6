"""The living-cluster replay of a trace pod list (DESIGN §8): the one builder of every event-mode
study on the Alibaba trace.

Rules, per pod of the list:

* it arrives at `creation_time / load` and runs `deletion_time − scheduled_time` seconds once
  placed (durations are never scaled);
* a pod with no `deletion_time` (still running when the trace was cut) runs until the trace's
  end, the latest time of any column of the file;
* a pod with no `scheduled_time` never ran in production: it is left out, and counted
  (`Replay.never_ran`);
* its priority (inside its queue: higher first) comes from `qos`: LS 3, Guaranteed 2,
  Burstable 1, BE 0 (empty: 0);
* multi-GPU pods stay as they are: one pod asking 2, 4 or 8 GPUs on one node.

`start` (seconds of recorded time, None = the first arrival) begins the replay later, from the
cluster as it was then: a pod created earlier and still running at `start` arrives at `start`
and runs what it had left (`deletion_time − start`); one that had ended is left out (counted in
`before_start`). The replay's clock reads recorded time − `start`, divided by the load.

`load` K multiplies the recorded arrival rate (arrival times divided by K). Replayed at its own
times on its own node list (6,212 GPUs) the default trace never holds more than 65 GPUs at once
(1 %), so every policy ties; `STUDY_LOAD` is the load of the studies (see the README's table).

Optional gangs (`gang_window`, seconds of recorded time, None = off): multi-GPU pods of the same
shape (GPUs, share, cpu, memory, GPU models, qos) created within `gang_window` seconds of the
first of them form one job, all or nothing (`minMember` = their count), arriving with the first
and running as long as the longest. The default trace holds no such group at 0, 60 or 600 s.

The whole trace holds at most 88 % of its node list's GPUs in demand even if every pod arrived at
once, so no load alone makes the cluster full: the studies also replay it on a share of the
nodes (`node_share`): every node whose rank among the nodes of its kind (GPU model and count, in
name order) crosses a multiple of 1/fraction, so each kind keeps its proportion.

Files without time columns (`multigpu*`) cannot be replayed: `TraceError` says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from scheduler.sim.trace import TraceError, TracePod, read_pod_list
from scheduler.sim.workload import MIB, ClusterSpec, Job, NodeGroup, PodSpec, Workload

__all__ = [
    "QOS_PRIORITY",
    "STUDY_LOAD",
    "STUDY_NODES",
    "STUDY_START",
    "Replay",
    "living_replay",
    "node_share",
    "read_replay",
]

QOS_PRIORITY = {"LS": 3, "Guaranteed": 2, "Burstable": 1, "BE": 0}
STUDY_LOAD = 2000.0
STUDY_NODES = 0.5
STUDY_START = 10_000_000  # day 115.7: 99 % of the pods that ran arrive after it


@dataclass(frozen=True, slots=True, kw_only=True)
class Replay:
    """A replayed pod list and what the replay left out."""

    workload: Workload
    pods_in_trace: int
    never_ran: int  # no scheduled_time: never ran in production, left out
    trace_end: int  # seconds, recorded time
    load: float
    start: int  # recorded time the replay begins at
    before_start: int  # ended before `start`: left out
    gangs: int  # jobs made of more than one pod (gang_window)


def _trace_end(pods: Sequence[TracePod]) -> int:
    times = [
        t
        for p in pods
        for t in (p.creation_time, p.deletion_time, p.scheduled_time)
        if t is not None
    ]
    return max(times, default=0)


def _spec(pod: TracePod) -> PodSpec:
    whole = pod.gpu_milli >= 1000
    return PodSpec(
        cpu_milli=pod.cpu_milli,
        memory=pod.memory_mib * MIB,
        gpus=pod.num_gpu if whole else 0,
        gpu_milli=0 if whole else pod.gpu_milli,
        gpu_models=frozenset(pod.gpu_spec),
    )


def _finish(pod: TracePod, end: int) -> int:
    return end if pod.deletion_time is None else pod.deletion_time


def _duration(pod: TracePod, end: int, start: int) -> float:
    assert pod.scheduled_time is not None
    return float(max(0, _finish(pod, end) - max(pod.scheduled_time, start)))


def _job(members: Sequence[TracePod], end: int, start: int, load: float) -> Job:
    first = members[0]
    assert first.creation_time is not None
    return Job(
        name=first.name,
        pod=_spec(first),
        replicas=len(members),
        min_member=len(members),
        arrival=max(0, first.creation_time - start) / load,
        duration=max(_duration(p, end, start) for p in members),
        priority=QOS_PRIORITY.get(first.qos, 0),
    )


def _shape(pod: TracePod) -> tuple[object, ...]:
    return (pod.num_gpu, pod.gpu_milli, pod.cpu_milli, pod.memory_mib, pod.gpu_spec, pod.qos)


def _groups(pods: Sequence[TracePod], window: float | None) -> list[list[TracePod]]:
    """Each pod alone, or multi-GPU pods of one shape within `window` s of the first together."""
    groups: list[list[TracePod]] = []
    open_groups: dict[tuple[object, ...], list[TracePod]] = {}
    for pod in sorted(pods, key=lambda p: (p.creation_time or 0, p.name)):
        if window is None or pod.num_gpu < 2:
            groups.append([pod])
            continue
        group = open_groups.get(_shape(pod))
        first = (group[0].creation_time or 0) if group else 0
        if group is not None and (pod.creation_time or 0) - first <= window:
            group.append(pod)
            continue
        open_groups[_shape(pod)] = [pod]
        groups.append(open_groups[_shape(pod)])
    return groups


def living_replay(
    pods: Sequence[TracePod],
    source: str,
    *,
    load: float = 1.0,
    gang_window: float | None = None,
    start: int | None = None,
) -> Replay:
    """The replay of `pods` (see the module docstring); `TraceError` when it has no times."""
    if load <= 0:
        raise ValueError(f"load must be > 0, got {load}")
    if pods and all(p.creation_time is None for p in pods):
        raise TraceError(
            f"{source}: no creation/scheduled/deletion times (a multigpu* file?): "
            "it cannot be replayed as a living cluster; use --mode protocol"
        )
    end = _trace_end(pods)
    ran = [p for p in pods if p.scheduled_time is not None and p.creation_time is not None]
    first = min((p.creation_time or 0 for p in ran), default=0)
    begin = first if start is None else start
    live = [p for p in ran if _finish(p, end) > begin or (p.creation_time or 0) >= begin]
    jobs = [_job(group, end, begin, load) for group in _groups(live, gang_window)]
    jobs.sort(key=lambda j: (j.arrival, j.name))
    return Replay(
        workload=Workload(tuple(jobs), source, from_trace=True),
        pods_in_trace=len(pods),
        never_ran=len(pods) - len(ran),
        trace_end=end,
        load=load,
        start=begin,
        before_start=len(ran) - len(live),
        gangs=sum(1 for j in jobs if j.replicas > 1),
    )


def read_replay(
    path: Path, *, load: float = 1.0, gang_window: float | None = None, start: int | None = None
) -> Replay:
    """`living_replay` of a pod-list file."""
    pods = read_pod_list(path)
    return living_replay(pods, str(path), load=load, gang_window=gang_window, start=start)


def node_share(spec: ClusterSpec, fraction: float) -> ClusterSpec:
    """`spec` with `fraction` (0 < fraction <= 1) of each kind of node (see the module)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"the node share must be in (0, 1], got {fraction}")
    kinds: dict[tuple[str, int], list[NodeGroup]] = {}
    for group in sorted(spec.groups, key=lambda g: g.name):
        kinds.setdefault((group.model, group.gpus), []).append(group)
    kept = {
        group.name
        for groups in kinds.values()
        for i, group in enumerate(groups)
        if math.floor((i + 1) * fraction) > math.floor(i * fraction)
    }
    groups = tuple(g for g in spec.groups if g.name in kept)
    return ClusterSpec(groups, f"{spec.source} ({fraction:g} of the nodes)")
