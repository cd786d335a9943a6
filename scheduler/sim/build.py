"""Turn simulator inputs into placement objects: a `Cluster` from a `ClusterSpec`, `PodRequest`s.

Node names can be re-labelled per run (`rename`): the published FGD simulator prefixes every node
with a random 4-digit rank drawn from the seed, so that ties between equal scores (broken by the
lowest node name, as `pick` does) fall on an arbitrary but fixed node order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agent.errors import AgentError
from agent.model import NvlinkFabric
from agent.nvml.fixture import load_fixture
from scheduler.placement import GPU_PRODUCT_LABEL, PodRequest
from scheduler.sim.cluster import Cluster, NodeSpec
from scheduler.sim.sharing import share_fields
from scheduler.sim.workload import ClusterSpec, Job, PodSpec, WorkloadError

__all__ = ["build_cluster", "job_requests", "node_names", "pod_request", "ranked_names"]


def node_names(spec: ClusterSpec) -> list[str]:
    """Every node's name, in group order."""
    return [g.node_name(i) for g in spec.groups for i in range(g.count)]


def ranked_names(names: Sequence[str], order: Sequence[int]) -> dict[str, str]:
    """`name -> "<rank:04d>-<name>"` with ranks `order` given to the names in sorted order."""
    width = max(4, len(str(len(names))))
    pairs = zip(sorted(names), order, strict=True)
    return {name: f"{rank:0{width}d}-{name}" for name, rank in pairs}


def build_cluster(spec: ClusterSpec, rename: Callable[[str], str] = str) -> Cluster:
    """A fresh in-memory cluster with every node of `spec` empty."""
    cluster = Cluster()
    fixtures = {}
    for group in spec.groups:
        if group.fixture is not None and group.fixture not in fixtures:
            try:
                fixtures[group.fixture] = load_fixture(group.fixture).inventory
            except AgentError as exc:  # FixtureError names the file and the reason
                raise WorkloadError(f"{spec.source}: node group {group.name}: {exc}") from None
        for index in range(group.count):
            name = rename(group.node_name(index))
            labels = group.node_labels(index)
            if group.fixture is not None:
                cluster.add_inventory(
                    name,
                    fixtures[group.fixture],
                    cpu_milli=group.cpu_milli,
                    memory=group.memory,
                    labels=labels,
                )
                continue
            if group.gpus:
                labels.setdefault(GPU_PRODUCT_LABEL, group.model)
            cluster.add_spec(
                NodeSpec(
                    name=name,
                    gpus=group.gpus,
                    model=group.model or "none",
                    cpu_milli=group.cpu_milli,
                    memory=group.memory,
                    max_pods=group.max_pods,
                    numa_nodes=1,
                    fabric=NvlinkFabric.NVSWITCH,
                    labels=labels,
                    shares=group.shares,
                    gpu_memory=group.gpu_memory,
                )
            )
    return cluster


def pod_request(spec: PodSpec, key: str, group: str | None = None) -> PodRequest:
    return PodRequest(
        key=key,
        cpu_milli=spec.cpu_milli,
        memory=spec.memory,
        gpus=spec.gpus,
        gpu_milli=spec.gpu_milli,
        mig=dict(spec.mig),
        gpu_models=spec.gpu_models,
        pod_group=group,
        **share_fields(spec.gpu_memory, spec.gpu_compute),
    )


def job_requests(job: Job, suffix: str = "") -> list[PodRequest]:
    """One request per replica: `<job><suffix>-<i>`, in a pod group when the job is a gang."""
    group = job.name + suffix if job.is_gang else None
    if job.replicas == 1 and not job.is_gang:
        return [pod_request(job.pod, job.name + suffix)]
    return [pod_request(job.pod, f"{job.name}{suffix}-{i}", group) for i in range(job.replicas)]
