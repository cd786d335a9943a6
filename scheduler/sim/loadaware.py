"""The load-aware study (issue 47): the same workload placed with load-awareness off and on.

Every pod of the workload arrives in order and is placed by the one decision API (`Placer`
through `Cluster.place`), pod by pod (gangs too), nobody leaves. After each placement the GPUs
it went to are *measured*: their use is the sum of what their pods really use (a job's `use`,
else what it asks). With load-awareness on that measurement reaches placement exactly as the
agent's does in the runtime (`placement.load.measured_use` then `hold_measured_use`, fresh, as
if published at once); off, placement sees requests only. Figures per run: pods placed and
refused, placements after which a GPU's real use exceeds its memory, GPUs over memory at the
end, shared GPUs in use, requested and really used memory (percent of the shared GPUs'),
refusals that named a measured figure, decisions per second.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass

from agent.gpu_load import GpuLoad
from scheduler.placement import Assignment, NodeState, Scoring
from scheduler.placement.load import DEFAULT_MAX_AGE_S, hold_measured_use, measured_use
from scheduler.sim.build import build_cluster, pod_request
from scheduler.sim.cluster import Cluster
from scheduler.sim.workload import ClusterSpec, PodSpec, Workload

__all__ = ["LoadStudy", "format_studies", "run_load_study"]

_MIB = 1 << 20


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadStudy:
    load_aware: bool
    pods: int
    placed: int
    refused: int
    over_placements: int  # placements after which the GPU's real use exceeds its memory
    gpus_over: int  # GPUs whose real use exceeds their memory at the end
    gpus_used: int  # shared GPUs with a share on them
    requested_pct: float  # memory requested, percent of all shared GPUs' memory
    used_pct: float  # memory really used (capped at each GPU's size), percent of the same
    measured_refusals: int  # refusals whose reason named a measured figure
    decisions_per_second: float


class _Meter:
    """What each GPU really uses, by (node, GPU index)."""

    def __init__(self) -> None:
        self.memory: dict[tuple[str, int], int] = defaultdict(int)
        self.sm: dict[tuple[str, int], int] = defaultdict(int)

    def add(self, spec: PodSpec, assignment: Assignment) -> list[int]:
        """Charge the pod's real use to its GPUs; the GPUs it went to."""
        gpus = []
        for share in assignment.shares:
            key = (assignment.node, share.gpu)
            self.memory[key] += spec.use.memory if spec.use else share.memory
            self.sm[key] += spec.use.sm if spec.use else share.compute
            gpus.append(share.gpu)
        return gpus

    def publish(self, cluster: Cluster, name: str) -> None:
        """Hand the node's readings to placement as the runtime does with the agent's NRT."""
        node = cluster.snapshot.node(name)
        loads = [
            GpuLoad(
                memory_used_mib=-(-self.memory[(name, g)] // _MIB),
                sm_percent=min(100, self.sm[(name, g)]),
                power_w=0,
                measured_at=0.0,
            )
            for g in range(node.gpu_count)
        ]
        uses = [measured_use(x, now=0.0, max_age_s=DEFAULT_MAX_AGE_S) for x in loads]
        hold_measured_use(node, uses)
        cluster.snapshot.refresh(name)


def run_load_study(
    spec: ClusterSpec, workload: Workload, scoring: Scoring, *, load_aware: bool
) -> LoadStudy:
    cluster, meter = build_cluster(spec), _Meter()
    placed = refused = over = measured = 0
    started = time.perf_counter()
    pods = [(job.pod, f"{job.name}-{i}") for job in workload.jobs for i in range(job.replicas)]
    for pod, key in pods:
        request = pod_request(pod, key)
        decision = cluster.place(request, scoring)
        if decision.assignment is None:
            refused += 1
            measured += any(" in use (measured " in r for r in decision.reasons)
            continue
        cluster.bind(request, decision.assignment)
        placed += 1
        gpus = meter.add(pod, decision.assignment)
        node = cluster.snapshot.node(decision.assignment.node)
        over += any(meter.memory[(node.name, g)] > node.gpu_memory[g] for g in gpus)
        if load_aware:
            meter.publish(cluster, node.name)
    elapsed = max(time.perf_counter() - started, 1e-9)
    return _figures(cluster, meter, load_aware, placed, refused, over, measured, elapsed)


def _figures(
    cluster: Cluster,
    meter: _Meter,
    load_aware: bool,
    placed: int,
    refused: int,
    over: int,
    measured: int,
    elapsed: float,
) -> LoadStudy:
    capacity = requested = used = gpus_over = gpus_used = 0
    for node in cluster.snapshot.nodes.values():
        for g in node.shared_gpus:
            size, real = node.gpu_memory[g], meter.memory[(node.name, g)]
            capacity += size
            requested += _requested(node, g)
            used += min(real, size)
            gpus_over += real > size
            gpus_used += node.slots_free[g] < node.gpu_slots[g]
    return LoadStudy(
        load_aware=load_aware,
        pods=placed + refused,
        placed=placed,
        refused=refused,
        over_placements=over,
        gpus_over=gpus_over,
        gpus_used=gpus_used,
        requested_pct=100 * requested / max(capacity, 1),
        used_pct=100 * used / max(capacity, 1),
        measured_refusals=measured,
        decisions_per_second=(placed + refused) / elapsed,
    )


def _requested(node: NodeState, g: int) -> int:
    """What the shares on GPU `g` asked (a measured hold left out)."""
    return sum(s.memory for _req, a in node.pods.values() for s in a.shares if s.gpu == g)


_ROWS = (
    ("pods", "pods", "{:d}"),
    ("placed", "pods placed", "{:d}"),
    ("refused", "pods refused", "{:d}"),
    ("over_placements", "placements where real use exceeded the GPU's memory", "{:d}"),
    ("gpus_over", "GPUs whose real use exceeds their memory (end)", "{:d}"),
    ("gpus_used", "shared GPUs in use", "{:d}"),
    ("requested_pct", "GPU memory requested, % of the shared GPUs'", "{:.1f}"),
    ("used_pct", "GPU memory really used, % of the shared GPUs'", "{:.1f}"),
    ("measured_refusals", "refusals naming a measured figure", "{:d}"),
    ("decisions_per_second", "decisions per second", "{:,.0f}"),
)


def format_studies(studies: list[LoadStudy], title: str) -> str:
    """Every figure of every run, one row per figure, one column per run."""
    names = ["load-aware " + ("on" if s.load_aware else "off") for s in studies]
    width = max(len(label) for _, label, _ in _ROWS)
    lines = [title, f"{'':{width}}  " + "  ".join(f"{n:>15}" for n in names)]
    for attr, label, fmt in _ROWS:
        cells = "  ".join(f"{fmt.format(getattr(s, attr)):>15}" for s in studies)
        lines.append(f"{label:{width}}  {cells}")
    return "\n".join(lines) + "\n"
