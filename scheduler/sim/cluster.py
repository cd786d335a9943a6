"""An in-memory cluster for the simulator and the benchmarks: nodes, bound pods, a live snapshot.

Nodes come from `NodeInventory`s (real or fixture topologies) or from `NodeSpec`s (GPU count,
model, cpu, memory, labels; a link matrix is synthesised for the spec's NVLink fabric). Nodes with
the same link matrix share one `GpuSelector`, so the GPU-set search is memoised cluster-wide.
Binding charges the pod to the placement snapshot; `snapshot` is that live object, and
`placer(scoring)` the `Placer` that decides on it with a scoring (one per scoring, kept).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from agent.gpuset import GpuSelector
from agent.model import (
    MILLI_PER_GPU,
    GpuLink,
    LinkMatrix,
    NodeInventory,
    NvlinkFabric,
    TopoLevel,
)
from agent.resource_names import GPU_RESOURCE, mig_resource
from agent.shares import SHARED_GPU_RESOURCE
from scheduler.placement import (
    GPU_PRODUCT_LABEL,
    Assignment,
    Decision,
    GangPlacement,
    NodeState,
    Placer,
    PodRequest,
    Scoring,
    Snapshot,
    Taint,
    TopologyConstraint,
    TopologyPolicy,
    place_gang,
)
from scheduler.placement.request import CPU, EPHEMERAL_STORAGE, MEMORY, PODS

__all__ = ["Cluster", "ClusterStats", "NodeSpec", "make_links"]

GIB = 1 << 30
_NO_LABELS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSpec:
    """A synthetic node. `fabric` shapes the GPU links (see `make_links`); GPUs are split evenly
    over `numa_nodes`. GFD-style labels (`nvidia.com/gpu.product`, `.count`, `.present`) are
    added."""

    name: str
    gpus: int = 8
    model: str = "NVIDIA H100 80GB HBM3"
    cpu_milli: int = 96_000
    memory: int = 1024 * GIB
    ephemeral_storage: int = 1024 * GIB
    max_pods: int = 110
    numa_nodes: int = 2
    fabric: NvlinkFabric = NvlinkFabric.NVSWITCH
    labels: Mapping[str, str] = field(default_factory=lambda: _NO_LABELS)
    taints: tuple[Taint, ...] = ()
    topology_policy: TopologyPolicy = TopologyPolicy.NONE
    shares: int = 0  # replicas per GPU of nvidia.com/gpu.shared (0: GPUs not shared)
    gpu_memory: int = 80 * GIB  # per GPU, what shares split


def make_links(gpus: int, fabric: NvlinkFabric, numa_nodes: int = 1) -> LinkMatrix:
    """A plausible matrix: NVSWITCH = NV18 between all; DIRECT = NV4 within pairs (0-1, 2-3, ...)
    then PCIe; NONE = PCIe only. PCIe levels: PIX within a pair, NODE within a NUMA node, SYS
    across."""
    numa = _numa_of(gpus, numa_nodes)

    def cell(a: int, b: int) -> GpuLink | None:
        if a == b:
            return None
        if fabric is NvlinkFabric.NVSWITCH:
            return GpuLink(nvlinks=18)
        if a // 2 == b // 2:
            return (
                GpuLink(nvlinks=4)
                if fabric is NvlinkFabric.DIRECT
                else GpuLink(level=TopoLevel.PIX)
            )
        return GpuLink(level=TopoLevel.NODE if numa[a] == numa[b] else TopoLevel.SYS)

    return LinkMatrix(tuple(tuple(cell(a, b) for b in range(gpus)) for a in range(gpus)))


def _numa_of(gpus: int, numa_nodes: int) -> tuple[int, ...]:
    per = max(1, -(-gpus // max(1, numa_nodes)))
    return tuple(g // per for g in range(gpus))


@dataclass(frozen=True, slots=True)
class ClusterStats:
    """GPU capacity and allocation in milli-GPU over non-MIG GPUs, and pod counts."""

    gpu_capacity_milli: int
    gpu_allocated_milli: int
    fragmented_gpus: int  # GPUs partly used (0 < free < 1000)
    pods: int


class Cluster:
    """Nodes plus bound pods; `snapshot` is the live placement view."""

    def __init__(self, nodes: Iterable[NodeState] = ()) -> None:
        self.snapshot = Snapshot()
        self._placers: dict[int, Placer] = {}  # id(scoring) -> its Placer (which holds it)
        self._selectors: dict[tuple[LinkMatrix, tuple[int | None, ...]], GpuSelector] = {}
        self._links: dict[tuple[int, NvlinkFabric, int], LinkMatrix] = {}
        for node in nodes:
            self.add_node(node)

    @classmethod
    def from_specs(cls, specs: Iterable[NodeSpec]) -> Cluster:
        cluster = cls()
        for spec in specs:
            cluster.add_spec(spec)
        return cluster

    def add_node(self, node: NodeState) -> None:
        self.snapshot.add_node(node)

    def remove_node(self, name: str) -> NodeState | None:
        return self.snapshot.remove_node(name)

    def _selector(self, links: LinkMatrix, numa: tuple[int | None, ...]) -> GpuSelector:
        key = (links, numa)
        if key not in self._selectors:
            self._selectors[key] = GpuSelector(links, numa)
        return self._selectors[key]

    def add_spec(self, spec: NodeSpec) -> NodeState:
        """Add a synthetic node built from `spec`."""
        numa = _numa_of(spec.gpus, spec.numa_nodes)
        shape = (spec.gpus, spec.fabric, spec.numa_nodes)
        if shape not in self._links:
            self._links[shape] = make_links(*shape)
        links = self._links[shape]
        labels = dict(spec.labels)
        if spec.gpus:
            labels.setdefault(GPU_PRODUCT_LABEL, spec.model.replace(" ", "-"))
            labels.setdefault("nvidia.com/gpu.count", str(spec.gpus))
            labels.setdefault("nvidia.com/gpu.present", "true")
        zones = max(1, spec.numa_nodes)
        allocatable = _allocatable(
            spec.cpu_milli, spec.memory, spec.gpus, spec.max_pods, spec.ephemeral_storage
        )
        if spec.shares:
            del allocatable[GPU_RESOURCE]
            allocatable[SHARED_GPU_RESOURCE] = spec.gpus * spec.shares
        node = NodeState(
            name=spec.name,
            labels=labels,
            taints=spec.taints,
            allocatable=allocatable,
            gpu_numa=numa,
            links=links,
            topology_policy=spec.topology_policy,
            numa_free={
                z: {CPU: spec.cpu_milli // zones, MEMORY: spec.memory // zones}
                for z in range(zones)
            },
            selector=self._selector(links, numa),
            gpu_slots=(spec.shares,) * spec.gpus if spec.shares else (),
            gpu_memory=(spec.gpu_memory,) * spec.gpus,
            share_resource=SHARED_GPU_RESOURCE if spec.shares else None,
        )
        self.add_node(node)
        return node

    def add_inventory(
        self,
        name: str,
        inventory: NodeInventory,
        *,
        cpu_milli: int = 96_000,
        memory: int = 1024 * GIB,
        labels: Mapping[str, str] | None = None,
        taints: Sequence[Taint] = (),
        topology_policy: TopologyPolicy = TopologyPolicy.NONE,
    ) -> NodeState:
        """Add a node with the GPUs, MIG devices and links of `inventory`."""
        numa = tuple(g.numa_node for g in inventory.gpus)
        whole = sum(1 for g in inventory.gpus if not g.mig_devices)
        alloc = _allocatable(cpu_milli, memory, whole, 110, 1024 * GIB)
        for _gpu, mig in inventory.mig_devices():
            res = mig_resource(mig.profile)
            alloc[res] = alloc.get(res, 0) + 1
        all_labels = dict(labels or {})
        if inventory.gpus:
            all_labels.setdefault(GPU_PRODUCT_LABEL, inventory.gpus[0].product.replace(" ", "-"))
        node = NodeState.from_inventory(
            name,
            inventory,
            allocatable=alloc,
            labels=all_labels,
            taints=taints,
            topology_policy=topology_policy,
            selector=self._selector(inventory.links, numa),
        )
        self.add_node(node)
        return node

    # -- pods ----------------------------------------------------------------------------------
    def bind(self, pod: PodRequest, assignment: Assignment) -> None:
        self.snapshot.assume(pod, assignment)

    def unbind(self, key: str) -> Assignment | None:
        return self.snapshot.forget(key)

    def placer(self, scoring: Scoring) -> Placer:
        """The `Placer` deciding on `snapshot` with `scoring`, made on first use and kept."""
        placer = self._placers.get(id(scoring))
        if placer is None or placer.snapshot is not self.snapshot:
            placer = self._placers[id(scoring)] = Placer(self.snapshot, scoring)
        return placer

    def place(self, pod: PodRequest, scoring: Scoring) -> Decision:
        """Decide a node for `pod` and bind it there when one fits."""
        decision = self.placer(scoring).decide(pod)
        if decision.assignment is not None:
            self.bind(pod, decision.assignment)
        return decision

    def place_gang(
        self,
        pods: Sequence[PodRequest],
        scoring: Scoring,
        *,
        topology: TopologyConstraint | None = None,
        min_resources: Mapping[str, int] | None = None,
    ) -> GangPlacement:
        """Place a whole gang and bind every member, or bind none."""
        result = place_gang(
            pods, self.placer(scoring), topology=topology, min_resources=min_resources
        )
        if result.ok:
            by_key = {p.key: p for p in pods}
            for key, assignment in result.assignments.items():
                self.bind(by_key[key], assignment)
        return result

    def stats(self) -> ClusterStats:
        capacity = allocated = fragmented = pods = 0
        for node in self.snapshot.nodes.values():
            pods += len(node.pods)
            for g, free in enumerate(node.gpu_free):
                if node.gpu_mig[g]:
                    continue
                capacity += MILLI_PER_GPU
                allocated += MILLI_PER_GPU - free
                fragmented += 0 < free < MILLI_PER_GPU
        return ClusterStats(capacity, allocated, fragmented, pods)


def _allocatable(
    cpu_milli: int, memory: int, gpus: int, max_pods: int, ephemeral: int
) -> dict[str, int]:
    alloc = {CPU: cpu_milli, MEMORY: memory, PODS: max_pods, EPHEMERAL_STORAGE: ephemeral}
    if gpus:
        alloc[GPU_RESOURCE] = gpus
    return alloc
