"""What the shares on a node use, per GPU, for the NRT GPU zones and the metrics (DESIGN §12).

A shared GPU's zone carries the replica resource (as `agent.availability` counts it) plus
`gputopo.io/gpu-memory` (bytes: capacity = allocatable = NVML's total less its reserved memory,
`Gpu.usable_memory_mib` x MiB) and `gputopo.io/gpu-compute` (percent, 100), each `available` =
that less what the shares on it use, and the attributes `sharing`, `shares` and `sharePods`
(each share container's use, `agent.share_pods`, which the scheduler charges after a restart).
A share is counted from what the agent gave it (`agent.share_record`: the GPU and size the share
Lease named, matched with the replica IDs the kubelet lists), never from the pod's annotations or
spec, which its author can write; a listed replica with no record (a pod another scheduler
placed, allocated before the record) counts an equal split on the GPU its replica ID names, which
is what such a pod is given. Only pods the kubelet lists count, and only their app containers (an
init container's share ends with it). `annotated_shares` reads the annotations, for what
`kubectl gputopo` shows of other nodes.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from agent.availability import (
    Availability,
    ContainerGrant,
    GpuAvailability,
    PodGrant,
    ResourceCounts,
    base_device_id,
)
from agent.model import GpuUuid, NodeInventory
from agent.objkey import key_of, object_key
from agent.podphase import finished
from agent.share_pods import PodShare
from agent.share_record import GivenShare
from agent.shares import (
    GPU_COMPUTE,
    GPU_MEMORY,
    GPUS_ANNOTATION,
    ShareRequestError,
    Sharing,
    decode_gpus,
    pod_shares,
)

log = logging.getLogger(__name__)

MIB = 1024 * 1024
FULL_COMPUTE = 100


@dataclass(frozen=True, slots=True, kw_only=True)
class SharedGpu:
    """A GPU the device plugin splits into `replicas` of `resource`."""

    uuid: GpuUuid
    sharing: Sharing
    replicas: int
    resource: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareUse:
    shares: tuple[PodShare, ...] = ()

    @property
    def memory_bytes(self) -> int:
        return sum(s.memory_bytes for s in self.shares)

    @property
    def compute_percent(self) -> int:
        return sum(s.compute_percent or 0 for s in self.shares)


def gpu_memory_bytes(inventory: NodeInventory, uuid: GpuUuid) -> int:
    """What shares of the GPU split: NVML's total less its reserved memory."""
    gpu = next(g for g in inventory.gpus if g.uuid == uuid)
    return gpu.usable_memory_mib * MIB


def share_use(
    inventory: NodeInventory,
    shared: Mapping[GpuUuid, SharedGpu],
    listed: Iterable[PodGrant],
    pods: Iterable[Mapping[str, Any]],
    given: Iterable[GivenShare] = (),
) -> dict[GpuUuid, ShareUse]:
    """Per shared GPU, the shares of the pods the kubelet lists (`listed`) and the API does not
    show finished (`pods`): what the record says each was `given`, else an equal split per
    replica on the replica's GPU."""
    finished_keys = {key_of(p) for p in pods if finished(p)}
    uids = {key_of(p): str((p.get("metadata") or {}).get("uid") or "") for p in pods}
    records = {(g.pod, g.container): g for g in given if not g.init}
    found: dict[GpuUuid, list[PodShare]] = defaultdict(list)
    for grant in listed:
        key = object_key(grant.namespace, grant.name)
        if key in finished_keys:
            continue
        for container in grant.containers:
            record = records.get((key, container.name))
            held = tuple(i for d in container.devices for i in d.device_ids)
            if record is not None and record.ids == held and record.gpu in shared:
                found[record.gpu].append(_given_share(inventory, shared[record.gpu], record))
            else:
                _unplaced(inventory, shared, key, uids.get(key, ""), container, found)
    return {uuid: ShareUse(shares=tuple(found[uuid])) for uuid in found}


def _given_share(inventory: NodeInventory, gpu: SharedGpu, record: GivenShare) -> PodShare:
    split = gpu_memory_bytes(inventory, gpu.uuid) // gpu.replicas * record.replicas
    return PodShare(
        pod=record.pod,
        uid=record.uid,
        container=record.container,
        memory_bytes=split if record.memory_bytes is None else record.memory_bytes,
        compute_percent=record.compute_percent,
        replicas=record.replicas,
        placed=record.how != "unplaced",
    )


def annotated_shares(
    inventory: NodeInventory, shared: Mapping[GpuUuid, SharedGpu], pods: Iterable[Mapping[str, Any]]
) -> dict[GpuUuid, list[PodShare]]:
    """The shares of the non-terminal `pods` with `gputopo.io/gpus`, per shared GPU (what
    `kubectl gputopo topo` lists; it cannot see replicas of pods placed by others)."""
    found: dict[GpuUuid, list[PodShare]] = defaultdict(list)
    resources = {s.resource for s in shared.values()}
    for pod in pods:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        if finished(pod) or GPUS_ANNOTATION not in annotations:
            continue
        try:
            _placed(inventory, shared, pod, resources, found)
        except ShareRequestError as exc:
            log.debug("share of pod %s not counted: %s", key_of(pod), exc)
    return found


def _placed(
    inventory: NodeInventory,
    shared: Mapping[GpuUuid, SharedGpu],
    pod: Mapping[str, Any],
    resources: Collection[str],
    found: dict[GpuUuid, list[PodShare]],
) -> None:
    gpus = decode_gpus(pod["metadata"]["annotations"][GPUS_ANNOTATION])
    for share in pod_shares(pod, resources):
        gpu = shared.get(gpus.get(share.container, GpuUuid("")))
        if share.init or gpu is None:
            continue
        split = gpu_memory_bytes(inventory, gpu.uuid) // gpu.replicas * share.replicas
        found[gpu.uuid].append(
            PodShare(
                pod=key_of(pod),
                container=share.container,
                memory_bytes=share.memory_bytes if share.memory_bytes is not None else split,
                compute_percent=share.compute_percent,
            )
        )


def _unplaced(
    inventory: NodeInventory,
    shared: Mapping[GpuUuid, SharedGpu],
    key: str,
    uid: str,
    container: ContainerGrant,
    found: dict[GpuUuid, list[PodShare]],
) -> None:
    for devices in container.devices:
        for device_id in devices.device_ids:
            gpu = shared.get(GpuUuid(base_device_id(device_id)))
            if gpu is None or devices.resource_name != gpu.resource:
                continue
            split = gpu_memory_bytes(inventory, gpu.uuid) // gpu.replicas
            found[gpu.uuid].append(
                PodShare(
                    pod=key, uid=uid, container=container.name, memory_bytes=split, placed=False
                )
            )


def with_shares(
    availability: Availability,
    inventory: NodeInventory,
    shared: Mapping[GpuUuid, SharedGpu],
    use: Mapping[GpuUuid, ShareUse],
) -> Availability:
    """`availability` with every shared GPU's zone entry marked and its memory/compute lines."""
    if not shared:
        return availability
    uuid_of = {g.index: g.uuid for g in inventory.gpus}
    gpus = tuple(
        _shared_entry(entry, inventory, shared[uuid_of[entry.index]], use)
        if uuid_of.get(entry.index) in shared
        else entry
        for entry in availability.gpus
    )
    return replace(availability, gpus=gpus)


def _shared_entry(
    entry: GpuAvailability,
    inventory: NodeInventory,
    gpu: SharedGpu,
    use: Mapping[GpuUuid, ShareUse],
) -> GpuAvailability:
    used = use.get(gpu.uuid, ShareUse())
    memory = gpu_memory_bytes(inventory, gpu.uuid)
    lines = (
        ResourceCounts(
            name=GPU_MEMORY,
            capacity=memory,
            allocatable=memory,
            available=max(0, memory - used.memory_bytes),
        ),
        ResourceCounts(
            name=GPU_COMPUTE,
            capacity=FULL_COMPUTE,
            allocatable=FULL_COMPUTE,
            available=max(0, FULL_COMPUTE - used.compute_percent),
        ),
    )
    return replace(
        entry,
        sharing=gpu.sharing,
        shares=gpu.replicas,
        resources=entry.resources + lines,
        share_pods=used.shares,
    )


def share_figures(availability: Availability) -> dict[int, tuple[int, int]]:
    """Per shared GPU index: (replicas, bytes of memory its shares use), for the metrics."""
    out: dict[int, tuple[int, int]] = {}
    for entry in availability.gpus:
        memory = next((r for r in entry.resources if r.name == GPU_MEMORY), None)
        if entry.sharing is not Sharing.NONE and memory is not None:
            out[entry.index] = (entry.shares, memory.capacity - memory.available)
    return out
