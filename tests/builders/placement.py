"""Small builders for placement tests: link matrices, nodes, pods, snapshots."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence

from agent.model import GpuLink, LinkMatrix, NvlinkFabric, TopoLevel
from agent.resource_names import GPU_RESOURCE
from agent.shares import SHARED_GPU_RESOURCE, ContainerShare
from scheduler.placement import (
    GPU_PRODUCT_LABEL,
    NodeState,
    PodRequest,
    Snapshot,
    Taint,
    TopologyPolicy,
)
from scheduler.placement.node import Assignment
from scheduler.placement.request import CPU, EPHEMERAL_STORAGE, MEMORY, PODS
from scheduler.sim.cluster import make_links

GIB = 1 << 30
H100 = "NVIDIA-H100-80GB-HBM3"


def links(preset: str, gpus: int = 8) -> LinkMatrix:
    """`nvswitch` (NV18 everywhere), `pairs` (NV4 within pairs, then PCIe), `pcie`."""
    fabric = {
        "nvswitch": NvlinkFabric.NVSWITCH,
        "pairs": NvlinkFabric.DIRECT,
        "pcie": NvlinkFabric.NONE,
    }[preset]
    return make_links(gpus, fabric, 2)


def random_links(n: int, rng: random.Random, nvlink_share: float) -> LinkMatrix:
    rows: list[list[GpuLink | None]] = [[None] * n for _ in range(n)]
    levels = [lv for lv in TopoLevel if lv is not TopoLevel.INTERNAL]
    for a in range(n):
        for b in range(a + 1, n):
            if rng.random() < nvlink_share:
                cell = GpuLink(nvlinks=rng.choice([1, 2, 4, 6, 12]))
            else:
                cell = GpuLink(level=rng.choice(levels))
            rows[a][b] = rows[b][a] = cell
    return LinkMatrix(tuple(tuple(r) for r in rows))


def make_node(
    name: str = "node-a",
    *,
    gpus: int = 8,
    preset: str = "nvswitch",
    cpu_milli: int = 64_000,
    memory: int = 512 * GIB,
    max_pods: int = 110,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Taint] = (),
    unschedulable: bool = False,
    policy: TopologyPolicy = TopologyPolicy.NONE,
    numa_cpu: int | None = None,
    mig: Mapping[int, Mapping[str, int]] | None = None,
    extended: Mapping[str, int] | None = None,
) -> NodeState:
    """A node with `gpus` GPUs over two NUMA nodes (first half on 0). `mig` turns GPUs into MIG
    GPUs with the given free devices per profile. `numa_cpu` gives per-NUMA cpu (memory halves)."""
    numa = tuple(0 if g < max(1, gpus // 2) else 1 for g in range(gpus))
    mig = mig or {}
    alloc = {CPU: cpu_milli, MEMORY: memory, PODS: max_pods, EPHEMERAL_STORAGE: 100 * GIB}
    whole = gpus - len(mig)
    if whole:
        alloc["nvidia.com/gpu"] = whole
    for free in mig.values():
        for profile, count in free.items():
            key = "nvidia.com/mig-" + profile
            alloc[key] = alloc.get(key, 0) + count
    alloc.update(extended or {})
    all_labels = {GPU_PRODUCT_LABEL: H100} if gpus else {}
    all_labels.update(labels or {})
    numa_free = None
    if numa_cpu is not None:
        numa_free = {z: {CPU: numa_cpu, MEMORY: memory // 2} for z in (0, 1)}
    return NodeState(
        name=name,
        labels=all_labels,
        taints=tuple(taints),
        unschedulable=unschedulable,
        allocatable=alloc,
        gpu_numa=numa,
        gpu_free=[0 if g in mig else 1000 for g in range(gpus)],
        gpu_mig=tuple(g in mig for g in range(gpus)),
        mig_free=[dict(mig.get(g, {})) for g in range(gpus)],
        links=links(preset, gpus) if gpus else None,
        topology_policy=policy,
        numa_free=numa_free,
    )


def pod(key: str = "default/p", **kwargs: object) -> PodRequest:
    """A pod; cpu 100m and 1 GiB unless given."""
    kwargs.setdefault("cpu_milli", 100)
    kwargs.setdefault("memory", GIB)
    return PodRequest(key=key, **kwargs)  # type: ignore[arg-type]


def snapshot(*nodes: NodeState) -> Snapshot:
    return Snapshot(nodes)


def shared_node(
    name: str = "node-s",
    *,
    shared: int = 2,
    whole: int = 0,
    slots: int = 4,
    gpu_memory: int = 80 * GIB,
    resource: str = SHARED_GPU_RESOURCE,
    links_known: bool = True,
) -> NodeState:
    """A node whose first `shared` GPUs are split into `slots` replicas of `resource` (DESIGN
    §12) and whose other `whole` GPUs are not shared. `links_known` False: as without an NRT."""
    gpus = shared + whole
    alloc = {CPU: 64_000, MEMORY: 512 * GIB, PODS: 110, EPHEMERAL_STORAGE: 100 * GIB}
    alloc[resource] = shared * slots
    if whole:
        alloc[GPU_RESOURCE] = whole
    return NodeState(
        name=name,
        labels={GPU_PRODUCT_LABEL: H100},
        allocatable=alloc,
        gpu_numa=tuple(0 if g < max(1, gpus // 2) else 1 for g in range(gpus)),
        links=links("nvswitch", gpus) if links_known else None,
        gpu_slots=(slots,) * shared + (0,) * whole if links_known else (),
        gpu_memory=(gpu_memory,) * gpus,
        share_resource=resource if links_known else None,
    )


def share(
    container: str = "c",
    *,
    memory: int | None = None,
    compute: int | None = None,
    replicas: int = 1,
    resource: str = SHARED_GPU_RESOURCE,
    init: bool = False,
) -> ContainerShare:
    """One share container: `memory` bytes (None: an equal split), `compute` percent."""
    return ContainerShare(
        container=container,
        init=init,
        resource=resource,
        replicas=replicas,
        memory_bytes=memory,
        compute_percent=compute,
    )


def share_pod(key: str, *shares: ContainerShare, cpu_milli: int = 100) -> PodRequest:
    """A pod of share containers; its replicas are in its resource check as the API asks them."""
    replicas: dict[str, int] = {}
    for s in shares:
        replicas[s.resource] = replicas.get(s.resource, 0) + s.replicas
    return PodRequest(key=key, cpu_milli=cpu_milli, memory=GIB, extended=replicas, shares=shares)


def bind_and_churn(
    bound: list[str],
    pod: PodRequest,
    assignment: Assignment | None,
    turn: int,
    rng: random.Random,
    bind: Callable[[PodRequest, Assignment], object],
    release: Callable[[str], object],
    *,
    every: int = 4,
) -> None:
    """A decision's aftermath in a placement test: `pod` bound where it was placed (its key
    kept in `bound`), and at every `every`-th turn one bound pod, drawn from `rng`, released."""
    if assignment is not None:
        bind(pod, assignment)
        bound.append(pod.key)
    if turn % every == every - 1 and bound:
        release(bound.pop(rng.randrange(len(bound))))
