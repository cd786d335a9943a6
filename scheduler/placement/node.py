"""One node as placement sees it: labels, taints, capacity, and which GPUs and MIG devices are free.

`NodeState` is mutable: `add_pod` / `remove_pod` (assume / forget) cost O(the pod's request).
Free capacity is `allocatable - requested`, where `requested` sums every non-terminal pod bound or
assumed on the node, whichever scheduler placed it. The per-GPU view (free milli-GPU per GPU, free
MIG devices per GPU and profile) says *which* devices are free; an `Assignment` names them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from agent.gpuset import GpuSelector, mask_indices
from agent.model import MILLI_PER_GPU, LinkMatrix, MigMode, NodeInventory

from .gpushare import GpuShare, MeasuredUse, shared_free_milli
from .request import CPU, MEMORY, PodRequest, Taint

__all__ = ["GPU_PRODUCT_LABEL", "Assignment", "NodeState", "TopologyPolicy"]

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"


class TopologyPolicy(StrEnum):
    """The kubelet's topology manager policy on the node."""

    NONE = "none"
    BEST_EFFORT = "best-effort"
    RESTRICTED = "restricted"
    SINGLE_NUMA_NODE = "single-numa-node"


@dataclass(frozen=True, slots=True, kw_only=True)
class Assignment:
    """Where one pod goes and which devices it gets there.

    `gpus`: whole GPUs (indices, ascending). `shares`: one per share container (one for a
    simulator `gpu_milli` pod), each naming its GPU. `mig`: one (GPU index, profile) per MIG device.
    `numa`: the NUMA node charged with the pod's cpu and memory under `single-numa-node` (None
    otherwise).
    """

    node: str
    gpus: tuple[int, ...] = ()
    shares: tuple[GpuShare, ...] = ()
    mig: tuple[tuple[int, str], ...] = ()
    numa: int | None = None

    @property
    def share_milli(self) -> int:
        """The milli-GPU the shares take (the fragmentation score's size of the pod's share)."""
        return sum(s.milli for s in self.shares)

    def on(self, node: str) -> Assignment:
        """The same devices on node `node` (`dataclasses.replace(self, node=node)`, without its
        look at the fields: the verdict memo names a kept assignment after its node on every
        decision)."""
        return Assignment(
            node=node, gpus=self.gpus, shares=self.shares, mig=self.mig, numa=self.numa
        )


@dataclass(slots=True, kw_only=True)
class NodeState:
    """Mutable state of one node. Build with `from_inventory` or the plain constructor.

    Per GPU (index order): `gpu_numa`, `gpu_free` (milli-GPU free; 0 for a MIG-enabled GPU, whose
    capacity is its MIG devices), `gpu_mig` (MIG enabled), `mig_free` (profile -> free devices).
    `numa_free` (NUMA id -> {"cpu": milli, "memory": bytes}) is None when unknown.
    Shares (DESIGN §12): `gpu_slots` (replicas a shared GPU is split into; 0: not shared),
    `gpu_memory` (bytes), `share_resource` (the replica resource of the shared GPUs), and what
    the shares on each shared GPU leave free: `slots_free`, `memory_free`, `compute_free`
    (percent); a shared GPU's `gpu_free` follows from those (`shared_free_milli`).
    """

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    allocatable: dict[str, int] = field(default_factory=dict)
    requested: dict[str, int] = field(default_factory=dict)
    gpu_numa: tuple[int | None, ...] = ()
    gpu_free: list[int] = field(default_factory=list)
    gpu_mig: tuple[bool, ...] = ()
    mig_free: list[dict[str, int]] = field(default_factory=list)
    links: LinkMatrix | None = None
    topology_policy: TopologyPolicy = TopologyPolicy.NONE
    numa_free: dict[int, dict[str, int]] | None = None
    pods: dict[str, tuple[PodRequest, Assignment]] = field(default_factory=dict)
    gpu_slots: tuple[int, ...] = ()
    gpu_memory: tuple[int, ...] = ()
    share_resource: str | None = None
    slots_free: list[int] = field(default_factory=list)
    memory_free: list[int] = field(default_factory=list)
    compute_free: list[int] = field(default_factory=list)
    gpu_load: tuple[MeasuredUse | None, ...] = ()
    """Fresh measured use per GPU where load-awareness holds it (`load.hold_measured_use`)."""
    selector: GpuSelector | None = field(default=None, repr=False, compare=False)
    idle_mask: int = field(init=False, default=0, repr=False, compare=False)
    used_milli: int = field(init=False, default=0, repr=False, compare=False)
    mig_in_use: list[int] = field(init=False, default_factory=list, repr=False, compare=False)
    shared_gpus: tuple[int, ...] = field(init=False, default=(), repr=False, compare=False)
    """The shared GPUs that can take a share (replica slots and a known memory size)."""
    derived: dict[str, object] | None = field(init=False, default=None, repr=False, compare=False)
    """What callers derived from this state (`derive`); dropped on every change. Copies made by
    `copy_as` share it until either changes: what one of them derives serves them all."""

    def __post_init__(self) -> None:
        n = len(self.gpu_numa)
        if not self.gpu_free:
            self.gpu_free = [MILLI_PER_GPU] * n
        if not self.gpu_mig:
            self.gpu_mig = (False,) * n
        if not self.mig_free:
            self.mig_free = [{} for _ in range(n)]
        self._init_shares(n)
        lengths = {len(self.gpu_free), len(self.gpu_mig), len(self.mig_free), len(self.gpu_slots)}
        if lengths != {n} or (self.links is not None and self.links.size != n):
            raise ValueError(f"node {self.name}: per-GPU fields disagree on the GPU count {n}")
        if self.selector is None and self.links is not None:
            self.selector = GpuSelector(self.links, self.gpu_numa)
        self.mig_in_use = [0] * n
        for _pod, assignment in self.pods.values():
            for g, _profile in assignment.mig:
                self.mig_in_use[g] += 1
        for g in range(n):
            self._update_gpu(g)
        self.used_milli = sum(
            MILLI_PER_GPU - free for g, free in enumerate(self.gpu_free) if not self.gpu_mig[g]
        )

    def _init_shares(self, n: int) -> None:
        self.gpu_slots = self.gpu_slots or (0,) * n
        self.gpu_memory = self.gpu_memory or (0,) * n
        if not self.slots_free:
            self.slots_free = list(self.gpu_slots)
            self.memory_free = list(self.gpu_memory)
            self.compute_free = [100] * n
        for g, slots in enumerate(self.gpu_slots):
            if slots and g < len(self.gpu_free):
                self.gpu_free[g] = self._shared_free(g)
        self.shared_gpus = tuple(
            g for g, slots in enumerate(self.gpu_slots) if slots > 0 and self.gpu_memory[g] > 0
        )

    def _shared_free(self, g: int) -> int:
        return shared_free_milli(
            self.gpu_slots[g],
            self.gpu_memory[g],
            self.slots_free[g],
            self.memory_free[g],
            self.compute_free[g],
        )

    def _update_gpu(self, g: int) -> None:
        if self.gpu_free[g] == MILLI_PER_GPU and not self.gpu_mig[g] and not self.gpu_slots[g]:
            self.idle_mask |= 1 << g
        else:
            self.idle_mask &= ~(1 << g)

    @classmethod
    def from_inventory(
        cls,
        name: str,
        inventory: NodeInventory,
        *,
        allocatable: Mapping[str, int],
        labels: Mapping[str, str] | None = None,
        taints: Sequence[Taint] = (),
        topology_policy: TopologyPolicy = TopologyPolicy.NONE,
        numa_free: Mapping[int, Mapping[str, int]] | None = None,
        selector: GpuSelector | None = None,
        gpu_slots: Sequence[int] = (),
        share_resource: str | None = None,
    ) -> NodeState:
        """A node with every GPU and MIG device of `inventory` free; `selector` may be shared.
        `gpu_slots`: the replicas each GPU is shared into (empty: none shared)."""
        mig_free: list[dict[str, int]] = []
        for gpu in inventory.gpus:
            counts: dict[str, int] = {}
            for mig in gpu.mig_devices:
                counts[mig.profile] = counts.get(mig.profile, 0) + 1
            mig_free.append(counts)
        is_mig = tuple(g.mig_mode is MigMode.ENABLED for g in inventory.gpus)
        return cls(
            name=name,
            labels=dict(labels or {}),
            taints=tuple(taints),
            allocatable=dict(allocatable),
            gpu_numa=tuple(g.numa_node for g in inventory.gpus),
            gpu_free=[0 if m else MILLI_PER_GPU for m in is_mig],
            gpu_mig=is_mig,
            mig_free=mig_free,
            links=inventory.links,
            topology_policy=topology_policy,
            numa_free=None if numa_free is None else {k: dict(v) for k, v in numa_free.items()},
            selector=selector,
            gpu_slots=tuple(gpu_slots),
            gpu_memory=tuple(g.memory_mib << 20 for g in inventory.gpus),
            share_resource=share_resource if any(gpu_slots) else None,
        )

    def clone(self) -> NodeState:
        """An independent copy (the link matrix and selector are shared: both are read-only)."""
        copy = self.copy_as(self.name, self.labels)
        copy.derived = None
        return copy

    def copy_as(self, name: str, labels: Mapping[str, str]) -> NodeState:
        """An independent copy named `name` with `labels`, without checking the per-GPU fields
        again (this state passed `__post_init__`). Immutable parts are shared, and so is what
        was derived from this state (`derived`: nothing derived reads the name or labels)."""
        if self.derived is None:
            self.derived = {}  # so that the copies share it
        copy: NodeState = object.__new__(NodeState)
        copy.name, copy.labels, copy.taints = name, labels, self.taints
        copy.unschedulable, copy.allocatable = self.unschedulable, self.allocatable
        copy.gpu_numa, copy.gpu_mig, copy.links = self.gpu_numa, self.gpu_mig, self.links
        copy.topology_policy, copy.selector = self.topology_policy, self.selector
        copy.gpu_slots, copy.gpu_memory = self.gpu_slots, self.gpu_memory
        copy.share_resource, copy.shared_gpus = self.share_resource, self.shared_gpus
        copy.gpu_load = self.gpu_load
        copy.idle_mask, copy.used_milli, copy.derived = (
            self.idle_mask,
            self.used_milli,
            self.derived,
        )
        copy.requested = dict(self.requested)
        copy.gpu_free = list(self.gpu_free)
        copy.mig_free = [dict(m) for m in self.mig_free]
        copy.numa_free = (
            None if self.numa_free is None else {k: dict(v) for k, v in self.numa_free.items()}
        )
        copy.pods = dict(self.pods)
        copy.slots_free = list(self.slots_free)
        copy.memory_free = list(self.memory_free)
        copy.compute_free = list(self.compute_free)
        copy.mig_in_use = list(self.mig_in_use)
        return copy

    def derive(self, key: str, compute: Callable[[NodeState], object]) -> object:
        """`compute(self)`, kept under `key` until this state changes (`add_pod`, `remove_pod`,
        `Snapshot.refresh`); `compute` must not read the name or labels."""
        derived = self.derived
        if derived is None:
            derived = self.derived = {}
        found = derived.get(key)
        if found is None:
            found = derived[key] = compute(self)
        return found

    # -- derived views ---------------------------------------------------------------------
    @property
    def gpu_count(self) -> int:
        return len(self.gpu_numa)

    def free(self, resource: str) -> int:
        return self.allocatable.get(resource, 0) - self.requested.get(resource, 0)

    def free_whole_gpus(self) -> list[int]:
        """Indices of GPUs with nothing on them (MIG-enabled GPUs excluded)."""
        return mask_indices(self.idle_mask)

    def gpu_used(self) -> bool:
        """True when any GPU share or MIG device is taken (binpack's "node already open")."""
        return self.used_milli > 0 or any(self.mig_in_use)

    def gpu_capacity_milli(self) -> int:
        """Milli-GPU capacity of the non-MIG GPUs."""
        return MILLI_PER_GPU * (len(self.gpu_mig) - sum(self.gpu_mig))

    def gpu_used_milli(self) -> int:
        """Milli-GPU in use on the non-MIG GPUs."""
        return self.used_milli

    def used_gpu_indices(self) -> set[int]:
        """GPUs that carry any share or MIG device in use."""
        return {
            g
            for g, free in enumerate(self.gpu_free)
            if self.mig_in_use[g] or (not self.gpu_mig[g] and free < MILLI_PER_GPU)
        }

    # -- assume / forget -------------------------------------------------------------------
    def add_pod(self, pod: PodRequest, assignment: Assignment) -> None:
        """Charge `pod` with `assignment` (assume). Re-adding a known key replaces it."""
        if pod.key in self.pods:
            self.remove_pod(pod.key)
        self._charge(pod, assignment, 1)
        self.pods[pod.key] = (pod, assignment)

    def remove_pod(self, key: str) -> tuple[PodRequest, Assignment] | None:
        """Undo `add_pod` (forget); returns what was removed, or None if the key is unknown."""
        entry = self.pods.pop(key, None)
        if entry is not None:
            self._charge(entry[0], entry[1], -1)
        return entry

    def _charge(self, pod: PodRequest, assignment: Assignment, sign: int) -> None:
        self.derived = None
        requested = self.requested
        for name, qty in pod.vector:
            total = requested.get(name, 0) + sign * qty
            if total:
                requested[name] = total
            else:
                requested.pop(name, None)
        for g in assignment.gpus:
            self.gpu_free[g] -= sign * MILLI_PER_GPU
            self.used_milli += sign * MILLI_PER_GPU
            self._update_gpu(g)
        for share in assignment.shares:
            self._charge_share(share, sign)
        for g, profile in assignment.mig:
            self.mig_free[g][profile] = self.mig_free[g].get(profile, 0) - sign
            self.mig_in_use[g] += sign
        if (
            assignment.numa is not None
            and self.numa_free is not None
            and assignment.numa in self.numa_free
        ):
            zone = self.numa_free[assignment.numa]
            zone[CPU] = zone.get(CPU, 0) - sign * pod.cpu_milli
            zone[MEMORY] = zone.get(MEMORY, 0) - sign * pod.memory

    def hold_share_room(self, g: int, *, memory: int, compute: int) -> None:
        """Charge shared GPU `g` `memory` bytes and `compute` percent that no pod here explains
        (the node reports its shares use more); kept until the state is built again."""
        self.derived = None
        self._charge_share(GpuShare(gpu=g, milli=0, memory=memory, compute=compute), 1)

    def _charge_share(self, share: GpuShare, sign: int) -> None:
        g = share.gpu
        before = self.gpu_free[g]
        if self.gpu_slots[g]:
            self.slots_free[g] -= sign * share.slots
            self.memory_free[g] -= sign * share.memory
            self.compute_free[g] -= sign * share.compute
            self.gpu_free[g] = self._shared_free(g)
        else:
            self.gpu_free[g] -= sign * share.milli
        self.used_milli += before - self.gpu_free[g]
        self._update_gpu(g)
