"""The cluster half of the demo: the two failures gputopo prevents, replayed on `scheduler/sim/`.

Every decision here is made by the real placement code (`scheduler.placement` through
`scheduler.sim.cluster.Cluster`): `gputopo` is the scheduler's shipped policy; `stock` models the
stock kube-scheduler, which scores with LeastAllocated over cpu and memory only (GPUs are extended
resources it filters on but does not score) and places every pod on its own. Pure and
deterministic: no I/O but `out.write`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TextIO

from agent.inventory import load_inventory
from scheduler.cli import simulate as simulate_cmd
from scheduler.config import load_config
from scheduler.placement import (
    Assignment,
    NodeState,
    PodRequest,
    Scoring,
    TopologyConstraint,
    WeightedScore,
)
from scheduler.sim.cluster import Cluster, NodeSpec

RACK = "gputopo.io/rack"
GIB = 1 << 30
LABELS = {"stock": "stock kube-scheduler", "gputopo": "gputopo"}


def stock_least_allocated(pod: PodRequest, node: NodeState, assignment: Assignment) -> float:
    """kube-scheduler's default NodeResourcesFit score: LeastAllocated over cpu and memory."""
    del assignment
    parts = [
        max(0, alloc - node.requested.get(name, 0) - qty) * 100 / alloc
        for name, qty in (("cpu", pod.cpu_milli), ("memory", pod.memory))
        if (alloc := node.allocatable.get(name, 0)) > 0
    ]
    return sum(parts) / len(parts) if parts else 0.0


def _scoring(policy: str) -> Scoring:
    if policy == "gputopo":
        return load_config(None).scoring()
    score = WeightedScore("leastAllocated", 1.0, stock_least_allocated)
    return Scoring(scores=(score,), prefer_used_nodes=False, candidate_limit=0)


def _usage(cluster: Cluster) -> str:
    parts = []
    for name in sorted(cluster.snapshot.nodes):
        node = cluster.snapshot.nodes[name]
        used = sum(1 for free in node.gpu_free if free == 0)
        parts.append(f"{name} {used}/{len(node.gpu_free)} GPUs used")
    return ", ".join(parts)


def _pod(key: str, gpus: int, group: str | None = None) -> PodRequest:
    return PodRequest(key=key, cpu_milli=4000, memory=32 * GIB, gpus=gpus, pod_group=group)


def fragmentation(out: TextIO, policy: str) -> bool:
    """Eight 1-GPU pods, then an 8-GPU pod, on two 8-GPU nodes. True when the 8-GPU pod fits."""
    cluster = Cluster.from_specs(NodeSpec(name=f"node-{i}") for i in "ab")
    scoring = _scoring(policy)
    for i in range(8):
        cluster.place(_pod(f"small-{i}", 1), scoring)
    label = LABELS[policy]
    out.write(f"  {label:<20} after eight 1-GPU pods: {_usage(cluster)}\n")
    big = cluster.place(_pod("train-8gpu", 8), scoring)
    verdict = f"bound on {big.node}" if big.node else f"Pending: {big.message()}"
    out.write(f"  {'':<20} the 8-GPU pod: {verdict}\n")
    return big.node is not None


def deadlock(out: TextIO) -> None:
    """10 free GPUs; an 8-pod gang arrives one pod at a time, a 5-GPU job after its 5th pod."""
    gang = [_pod(f"train-{i}", 1, "train") for i in range(8)]
    job = _pod("infer-5gpu", 5)
    out.write(
        "  10 of 16 GPUs free; an 8-pod training gang (1 GPU each), a 5-GPU job after pod 5\n"
    )
    # Per pod, as kube-scheduler does: each pod is placed on its own as it arrives.
    stock = _cluster_with_six_taken()
    per_pod = _scoring("stock")
    early = [stock.place(pod, per_pod).node for pod in gang[:5]]
    job_node = stock.place(job, per_pod).node
    late = [stock.place(pod, per_pod).node for pod in gang[5:]]
    bound = sum(n is not None for n in early + late)
    out.write(
        f"  {LABELS['stock']:<20} {bound} training pods bound, the 5-GPU job "
        f"{'bound on ' + job_node if job_node else 'Pending'}, "
        f"{late.count(None)} training pods Pending while {bound} hold GPUs"
        f"{': deadlock' if late.count(None) and bound else ''}\n"
    )
    # gputopo: the gang is placed only as a whole; while it waits it holds nothing.
    ours = _cluster_with_six_taken()
    default = _scoring("gputopo")
    job_decision = ours.place(job, default)
    waiting = ours.place_gang(gang, default)
    out.write(
        f"  {LABELS['gputopo']:<20} the 5-GPU job bound on {job_decision.node}; the gang "
        f"{'bound' if waiting.ok else 'waits holding 0 GPUs'} ({waiting.reason or 'fits'})\n"
    )
    ours.unbind(job.key)
    after = ours.place_gang(gang, default)
    nodes = sorted({a.node for a in after.assignments.values()})
    out.write(
        f"  {LABELS['gputopo']:<20} the job finishes: the whole gang binds at once on "
        f"{', '.join(nodes)}\n"
    )


def _cluster_with_six_taken() -> Cluster:
    """Two 8-GPU nodes with 3 GPUs taken on each by running pods; node-b's uses much more cpu."""
    cluster = Cluster.from_specs(NodeSpec(name=f"node-{i}") for i in "ab")
    for name, cpu in (("node-a", 4), ("node-b", 60)):
        pod = PodRequest(key=f"other-{name}", cpu_milli=cpu * 1000, memory=32 * GIB, gpus=3)
        cluster.bind(pod, Assignment(node=name, gpus=(0, 1, 2)))
    return cluster


def rack_gang(out: TextIO) -> Sequence[str]:
    """A PodGroup of 4 pods × 2 GPUs that must stay in one rack, on four DGX A100 in two racks."""
    inventory = load_inventory("dgx-a100")
    cluster = Cluster()
    for i, rack in enumerate(("r1", "r1", "r2", "r2")):
        cluster.add_inventory(f"dgx-{i}", inventory, labels={RACK: rack})
    scoring = _scoring("gputopo")
    cluster.place(_pod("busy", 6), scoring)  # rack r1 is partly used
    gang = [_pod(f"worker-{i}", 2, "gang") for i in range(4)]
    result = cluster.place_gang(
        gang, scoring, topology=TopologyConstraint(label=RACK, required=True)
    )
    lines = [
        f"{key} -> {a.node} GPUs {list(a.gpus)}" for key, a in sorted(result.assignments.items())
    ]
    out.write(f"  gang of 4 × 2 GPUs, topology-required {RACK}: domain {result.domain}\n")
    for line in lines:
        out.write(f"    {line}\n")
    return lines


def run(out: TextIO) -> None:
    out.write("\n== Fragmentation: eight 1-GPU pods, then one 8-GPU pod, on 2 × 8 GPUs ==\n")
    for policy in ("stock", "gputopo"):
        fragmentation(out, policy)
    out.write("\n== Deadlock: a gang and a job competing for 10 free GPUs ==\n")
    deadlock(out)
    out.write("\n== Topology: a rack-local gang with NVLink-aware GPU sets ==\n")
    rack_gang(out)
    out.write(
        "\n== The simulator's built-in cluster and workload (gangs, arrivals, durations): "
        "gputopo vs spread (the stock kube-scheduler's LeastAllocated) ==\n"
    )
    with contextlib.redirect_stdout(out):
        simulate_cmd.main(["--policy", "gputopo,spread"], {})
