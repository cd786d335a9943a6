"""What is free on the node, per GPU and per NUMA node, from the kubelet's PodResources view.

`available` never comes from the device plugin's memory (the device-plugin API has no Deallocate):
it is the kubelet's allocatable devices, CPUs and memory (GetAllocatableResources) minus what the
non-terminal pods hold (List). Without a PodResources socket (`source == "none"`), every device of
the inventory is free and available equals allocatable.

The PodResources dataclasses below are the plain-value form of the kubelet's messages; the gRPC
client in `deviceplugin.podresources` returns them (`agent.restart_hold` filters them right after
a kubelet restart).

GPUs given to the DRA driver (DESIGN §14) are not the device plugin's, so the kubelet's allocatable
devices do not list them: the caller names them (`DynamicDevice`, one per device the driver
publishes) and each counts in its GPU zone under its own resource line, used while a listed pod's
container holds it through a claim (`List`'s `dynamic_resources`). A pod holding only DRA devices
stays out of the pods fingerprint, as the scheduler's side computes it from pod requests.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass

from agent.fingerprint import METHOD_ALL, METHOD_WITH_EXCLUSIVE_RESOURCES, pods_fingerprint
from agent.gpu_load import GpuLoad
from agent.model import NodeInventory
from agent.numa_capacity import CPU, NATIVE_RESOURCES, NumaCapacity
from agent.resource_names import GPU_RESOURCE, MIG_RESOURCE_PREFIX, mig_resource
from agent.share_pods import PodShare
from agent.shares import Sharing

SOURCE_PODRESOURCES = "podresources"
SOURCE_NONE = "none"
REPLICA_SEPARATOR = "::"


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceGrant:
    resource_name: str
    device_ids: tuple[str, ...]
    numa_nodes: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryGrant:
    memory_type: str  # "memory", "hugepages-2Mi", "hugepages-1Gi"
    size: int  # bytes
    numa_nodes: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimDevice:
    """One device a DRA claim gave a container (PodResources `ClaimResource`)."""

    driver: str
    pool: str
    device: str
    cdi_devices: tuple[str, ...] = ()
    share_id: str | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.device)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimGrant:
    """The devices a container got through one ResourceClaim (PodResources `DynamicResource`)."""

    claim_namespace: str
    claim_name: str
    devices: tuple[ClaimDevice, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerGrant:
    name: str
    devices: tuple[DeviceGrant, ...] = ()
    cpu_ids: tuple[int, ...] = ()
    memory: tuple[MemoryGrant, ...] = ()
    claims: tuple[ClaimGrant, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class PodGrant:
    namespace: str
    name: str
    containers: tuple[ContainerGrant, ...] = ()

    @property
    def has_exclusive_resources(self) -> bool:
        return any(c.devices or c.cpu_ids or c.memory for c in self.containers)


@dataclass(frozen=True, slots=True, kw_only=True)
class PodResourcesSnapshot:
    """GetAllocatableResources + List, terminal pods already skipped."""

    devices: tuple[DeviceGrant, ...] = ()
    cpu_ids: tuple[int, ...] = ()
    memory: tuple[MemoryGrant, ...] = ()
    pods: tuple[PodGrant, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class DynamicDevice:
    """A device the node's DRA driver publishes, as the NRT counts it: in GPU zone `gpu_index`
    under `resource`; `uuid` (GPU or MIG) is what the health checker marks."""

    driver: str
    pool: str
    name: str
    gpu_index: int
    uuid: str
    resource: str

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.name)


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceCounts:
    """One NRT resource line; cpu in milli-CPUs, memory in bytes, devices in counts."""

    name: str
    capacity: int
    allocatable: int
    available: int


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuAvailability:
    """One GPU zone's resources. A shared GPU (`sharing` not NONE, DESIGN §12) is split into
    `shares` replicas; its resources then also carry `gputopo.io/gpu-memory` (bytes) and
    `gputopo.io/gpu-compute` (percent)."""

    index: int
    healthy: bool
    resources: tuple[ResourceCounts, ...]
    sharing: Sharing = Sharing.NONE
    shares: int = 0
    share_pods: tuple[PodShare, ...] = ()  # what each share container uses (agent.share_pods)
    load: GpuLoad | None = None  # what it really uses, measured (agent.gpu_load; issue 47)


@dataclass(frozen=True, slots=True, kw_only=True)
class NumaAvailability:
    numa_id: int
    resources: tuple[ResourceCounts, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Availability:
    source: str  # SOURCE_PODRESOURCES | SOURCE_NONE
    gpus: tuple[GpuAvailability, ...]
    numa: tuple[NumaAvailability, ...]
    fingerprint: str = ""  # empty when there is no PodResources view
    fingerprint_method: str = METHOD_ALL


def base_device_id(device_id: str) -> str:
    """A time-slicing replica `<uuid>::<n>` belongs to `<uuid>`."""
    return device_id.split(REPLICA_SEPARATOR, 1)[0]


def _gpu_owner(inventory: NodeInventory) -> dict[str, int]:
    owner = {str(g.uuid): g.index for g in inventory.gpus}
    owner.update({str(m.uuid): g.index for g, m in inventory.mig_devices()})
    return owner


def _inventory_devices(inventory: NodeInventory) -> list[tuple[str, str]]:
    """(resource, device id) the device plugin advertises under the mixed strategy."""
    out: list[tuple[str, str]] = []
    for gpu in inventory.gpus:
        if gpu.mig_devices:
            out += [(mig_resource(m.profile), str(m.uuid)) for m in gpu.mig_devices]
        else:
            out.append((GPU_RESOURCE, str(gpu.uuid)))
    return out


def _is_unhealthy(device_id: str, owner_uuid: str, unhealthy: Set[str]) -> bool:
    return (
        device_id in unhealthy or base_device_id(device_id) in unhealthy or owner_uuid in unhealthy
    )


def gpu_availability(
    inventory: NodeInventory,
    snapshot: PodResourcesSnapshot | None,
    unhealthy: Set[str],
    dynamic: Sequence[DynamicDevice] = (),
) -> tuple[GpuAvailability, ...]:
    """Per-GPU resources: advertised devices, minus unhealthy ones, minus those pods hold;
    `dynamic`: the DRA driver's devices (their GPUs are never the device plugin's)."""
    owner = _gpu_owner(inventory)
    if snapshot is None:
        dra_gpus = {d.gpu_index for d in dynamic}
        advertised = [
            (r, i)
            for r, i in _inventory_devices(inventory)
            if owner[base_device_id(i)] not in dra_gpus
        ]
        used: set[tuple[str, str]] = set()
    else:
        advertised = [(d.resource_name, i) for d in snapshot.devices for i in d.device_ids]
        used = {(d.resource_name, i) for d in _pod_devices(snapshot.pods) for i in d.device_ids}
    per_gpu: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0, 0]))
    _count_dynamic(per_gpu, inventory, dynamic, snapshot, unhealthy)
    for resource, device_id in advertised:
        index = owner.get(base_device_id(device_id))
        if index is None:
            continue  # another plugin's device; counted per NUMA only
        counts = per_gpu[index][resource]
        bad = _is_unhealthy(device_id, str(inventory.gpus[index].uuid), unhealthy)
        counts[0] += 1
        counts[1] += 0 if bad else 1
        counts[2] += 0 if bad or (resource, device_id) in used else 1
    return tuple(
        GpuAvailability(
            index=gpu.index,
            healthy=str(gpu.uuid) not in unhealthy,
            resources=tuple(
                ResourceCounts(name=n, capacity=c[0], allocatable=c[1], available=c[2])
                for n, c in sorted(per_gpu[gpu.index].items(), key=lambda kv: _resource_key(kv[0]))
            ),
        )
        for gpu in inventory.gpus
    )


def _count_dynamic(
    per_gpu: dict[int, dict[str, list[int]]],
    inventory: NodeInventory,
    dynamic: Sequence[DynamicDevice],
    snapshot: PodResourcesSnapshot | None,
    unhealthy: Set[str],
) -> None:
    """Each DRA device in its GPU's zone; used while a listed container holds it by a claim."""
    held = {d.key for d in claim_devices(snapshot.pods)} if snapshot is not None else set()
    for device in dynamic:
        counts = per_gpu[device.gpu_index][device.resource]
        bad = _is_unhealthy(device.uuid, str(inventory.gpus[device.gpu_index].uuid), unhealthy)
        counts[0] += 1
        counts[1] += 0 if bad else 1
        counts[2] += 0 if bad or device.key in held else 1


def claim_devices(pods: Iterable[PodGrant]) -> Iterable[ClaimDevice]:
    """Every device the pods' containers hold through DRA claims."""
    for pod in pods:
        for container in pod.containers:
            for claim in container.claims:
                yield from claim.devices


def _pod_devices(pods: Iterable[PodGrant]) -> Iterable[DeviceGrant]:
    for pod in pods:
        for container in pod.containers:
            yield from container.devices


def _resource_key(name: str) -> tuple[int, str]:
    if name in NATIVE_RESOURCES:
        return (NATIVE_RESOURCES.index(name), name)
    if name == GPU_RESOURCE:
        return (len(NATIVE_RESOURCES), name)
    if name.startswith(MIG_RESOURCE_PREFIX):
        return (len(NATIVE_RESOURCES) + 1, name)
    return (len(NATIVE_RESOURCES) + 2, name)


def sort_resources(counts: Iterable[ResourceCounts]) -> tuple[ResourceCounts, ...]:
    """Native resources first, then nvidia.com/gpu, nvidia.com/mig-*, then the rest."""
    return tuple(sorted(counts, key=lambda r: _resource_key(r.name)))


def _cpu_numa(inventory: NodeInventory) -> dict[int, int]:
    return {cpu: node.id for node in inventory.numa_nodes for cpu in node.cpus}


def _native_used(
    inventory: NodeInventory, snapshot: PodResourcesSnapshot
) -> dict[int, Counter[str]]:
    """Per NUMA node: milli-CPUs of exclusive CPUs and bytes of memory/hugepages the pods hold."""
    cpu_numa = _cpu_numa(inventory)
    used: dict[int, Counter[str]] = defaultdict(Counter)
    for pod in snapshot.pods:
        for container in pod.containers:
            for cpu in container.cpu_ids:
                used[cpu_numa.get(cpu, 0)][CPU] += 1000
            for grant in container.memory:
                used[grant.numa_nodes[0] if grant.numa_nodes else 0][grant.memory_type] += (
                    grant.size
                )
    return used


def _native_counts(
    cap: NumaCapacity, inventory: NodeInventory, snapshot: PodResourcesSnapshot | None
) -> list[ResourceCounts]:
    allocatable = dict(cap.allocatable)
    used: Counter[str] = Counter()
    if snapshot is not None:
        if snapshot.cpu_ids:  # static CPU manager: the kubelet says which CPUs it hands out
            cpu_numa = _cpu_numa(inventory)
            allocatable[CPU] = 1000 * sum(
                1 for c in snapshot.cpu_ids if cpu_numa.get(c, 0) == cap.numa_id
            )
        used = _native_used(inventory, snapshot).get(cap.numa_id, Counter())
    return [
        ResourceCounts(
            name=name,
            capacity=cap.capacity.get(name, 0),
            allocatable=allocatable.get(name, 0),
            available=max(0, allocatable.get(name, 0) - used[name]),
        )
        for name in NATIVE_RESOURCES
    ]


def _gpu_counts_on(
    numa_id: int, inventory: NodeInventory, gpus: Sequence[GpuAvailability]
) -> list[ResourceCounts]:
    """The GPU resources of the GPUs published under this NUMA node, summed; a resource none of
    them has is left out rather than listed at capacity 0 (DESIGN.md §5)."""
    totals: dict[str, list[int]] = {}
    for entry in gpus:
        if inventory.gpu_numa_zone(inventory.gpus[entry.index]) != numa_id:
            continue
        for r in entry.resources:
            t = totals.setdefault(r.name, [0, 0, 0])
            t[0], t[1], t[2] = t[0] + r.capacity, t[1] + r.allocatable, t[2] + r.available
    return [
        ResourceCounts(name=n, capacity=t[0], allocatable=t[1], available=t[2])
        for n, t in totals.items()
        if t[0] > 0
    ]


def _other_device_counts(
    numa_id: int, inventory: NodeInventory, snapshot: PodResourcesSnapshot | None
) -> list[ResourceCounts]:
    """Devices of other plugins (NICs, ...) that report this NUMA node in their TopologyInfo."""
    if snapshot is None:
        return []
    owner = _gpu_owner(inventory)
    used = {(d.resource_name, i) for d in _pod_devices(snapshot.pods) for i in d.device_ids}
    totals: dict[str, list[int]] = {}
    for grant in snapshot.devices:
        if numa_id not in grant.numa_nodes:
            continue
        for device_id in grant.device_ids:
            if base_device_id(device_id) in owner:
                continue
            t = totals.setdefault(grant.resource_name, [0, 0])
            t[0] += 1
            t[1] += 0 if (grant.resource_name, device_id) in used else 1
    return [
        ResourceCounts(name=n, capacity=t[0], allocatable=t[0], available=t[1])
        for n, t in totals.items()
    ]


def compute_availability(
    inventory: NodeInventory,
    capacity: Sequence[NumaCapacity],
    snapshot: PodResourcesSnapshot | None,
    unhealthy: Set[str] = frozenset(),
    dynamic: Sequence[DynamicDevice] = (),
) -> Availability:
    """Per-GPU and per-NUMA capacity/allocatable/available, and the pods fingerprint.

    `unhealthy` holds GPU UUIDs, MIG UUIDs or device IDs the health checker marked Unhealthy;
    `snapshot` is None when the kubelet's PodResources socket is absent; `dynamic` names the DRA
    driver's devices.
    """
    gpus = gpu_availability(inventory, snapshot, unhealthy, dynamic)
    numa = tuple(
        NumaAvailability(
            numa_id=cap.numa_id,
            resources=sort_resources(
                _native_counts(cap, inventory, snapshot)
                + _gpu_counts_on(cap.numa_id, inventory, gpus)
                + _other_device_counts(cap.numa_id, inventory, snapshot)
            ),
        )
        for cap in capacity
    )
    if snapshot is None:
        return Availability(source=SOURCE_NONE, gpus=gpus, numa=numa)
    # RTE's default method: only pods holding exclusive resources (devices, CPUs, memory) count.
    fingerprint = pods_fingerprint(
        (p.namespace, p.name) for p in snapshot.pods if p.has_exclusive_resources
    )
    return Availability(
        source=SOURCE_PODRESOURCES,
        gpus=gpus,
        numa=numa,
        fingerprint=fingerprint,
        fingerprint_method=METHOD_WITH_EXCLUSIVE_RESOURCES,
    )


def allocated_devices(availability: Availability) -> Mapping[int, int]:
    """Per GPU index: devices (whole GPU, MIG slices or replicas) held by pods."""
    return {
        g.index: sum(r.allocatable - r.available for r in g.resources) for g in availability.gpus
    }
