"""Builders for claims tests: resource.k8s.io/v1 JSON dicts as the API server sends them, and the
parsed nodes, classes and allocators built from them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from agent.model import GpuUuid, LinkMatrix, NodeInventory
from scheduler.claims.allocator import ClaimAllocator
from scheduler.claims.decision import ClaimNode, PodClaims, PodDecision
from scheduler.claims.model import DeviceClass, ResourceClaim
from scheduler.claims.order import GpuMap
from scheduler.claims.parse import parse_claim, parse_device_class, parse_slice
from scheduler.claims.slices import node_devices
from scheduler.claims.usage import Usage
from scheduler.placement import Assignment, PodRequest
from tests.builders.topology import gpu_uuid, make_gpu, make_numa

DRIVER = "gpu.gputopo.io"
GPU_CLASS = "gpu.gputopo.io"
GPU_SELECTOR = f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "gpu"'
GIB = 1 << 30

Obj = dict[str, Any]


def gpu_device(minor: int, **attrs: object) -> Obj:
    """A whole-GPU device `gpu-<minor>` with the driver's attributes (ints, bools, strings;
    `versions` takes {name: "1.2.3"}), 80Gi of memory; `taints`, `shared`, `capacity` extra."""
    taints = attrs.pop("taints", None)
    shared = attrs.pop("shared", False)
    capacity = attrs.pop("capacity", None) or {"memory": {"value": "80Gi"}}
    versions = attrs.pop("versions", {})
    attributes: Obj = {"type": {"string": "gpu"}, "uuid": {"string": gpu_uuid(minor)}}
    for name, value in attrs.items():
        kind = "bool" if isinstance(value, bool) else "int" if isinstance(value, int) else "string"
        attributes[name] = {kind: value}
    for name, value in dict(versions).items():  # type: ignore[call-overload]
        attributes[name] = {"version": value}
    device: Obj = {"name": f"gpu-{minor}", "attributes": attributes, "capacity": capacity}
    if taints:
        device["taints"] = taints
    if shared:
        device["allowMultipleAllocations"] = True
    return device


def slice_obj(
    node: str,
    devices: Sequence[Obj],
    *,
    generation: int = 1,
    count: int = 1,
    name: str | None = None,
    driver: str = DRIVER,
) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node}-{driver}"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": count},
            "devices": list(devices),
        },
    }


def shared_slice_obj(
    name: str,
    pool: str,
    devices: Sequence[Obj],
    *,
    generation: int = 1,
    count: int = 1,
    label: tuple[str, str] | None = None,
    driver: str = DRIVER,
) -> Obj:
    """A slice of no one node: `allNodes`, or with `label` (key, value) a `nodeSelector`."""
    body = slice_obj(pool, devices, generation=generation, count=count, name=name, driver=driver)
    spec = body["spec"]
    del spec["nodeName"]
    if label is None:
        spec["allNodes"] = True
    else:
        key, value = label
        term = {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}
        spec["nodeSelector"] = {"nodeSelectorTerms": [term]}
    return body


def per_device_slice_obj(
    name: str, pool: str, reach: Mapping[str, object], *, driver: str = DRIVER
) -> Obj:
    """A slice with `perDeviceNodeSelection`: per device name of `reach`, a GPU device
    (`gpu_device` by its minor, `gpu-<minor>`) whose own selection is the value: a node's name,
    True (`allNodes`) or a (key, value) label (`nodeSelector`)."""
    devices = []
    for device_name, where in reach.items():
        device = gpu_device(int(device_name.removeprefix("gpu-")))
        if where is True:
            device["allNodes"] = True
        elif isinstance(where, tuple):
            key, value = where
            term = {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}
            device["nodeSelector"] = {"nodeSelectorTerms": [term]}
        else:
            device["nodeName"] = where
        devices.append(device)
    body = slice_obj(pool, devices, name=name, driver=driver)
    del body["spec"]["nodeName"]
    body["spec"]["perDeviceNodeSelection"] = True
    return body


def consuming(device: Obj, counter_set: str, **counters: str) -> Obj:
    """`device` consuming `counters` (name: quantity) of `counter_set` (a partitionable one)."""
    amounts = {name: {"value": value} for name, value in counters.items()}
    device.setdefault("consumesCounters", []).append(
        {"counterSet": counter_set, "counters": amounts}
    )
    return device


def counter_slice_obj(
    node: str,
    sets: Mapping[str, Mapping[str, str]],
    *,
    generation: int = 1,
    count: int = 2,
    driver: str = DRIVER,
) -> Obj:
    """The slice of `node`'s pool that holds its shared counters (`sets`: per counter set, each
    counter's quantity); a pool of partitionable devices has it beside its devices' slice
    (`count` 2)."""
    body = slice_obj(
        node, [], generation=generation, count=count, name=f"{node}-counters", driver=driver
    )
    del body["spec"]["devices"]
    body["spec"]["sharedCounters"] = [
        {"name": name, "counters": {c: {"value": v} for c, v in counters.items()}}
        for name, counters in sets.items()
    ]
    return body


def partition(gpu: int, size: int, index: int, slices: int = 8) -> Obj:
    """A partition of GPU `gpu` as a partitionable driver publishes it: `size` of its `slices`
    memory slices (10Gi each) and that much memory from counter set `gpu-<gpu>`; `size` equal
    to `slices` is the whole GPU (`gpu-<gpu>`, a `gpu` device), else `gpu-<gpu>-<size>g-<index>`
    (a `mig` device, `parentUUID` naming the GPU)."""
    if size == slices:
        device = gpu_device(gpu, size=size)
    else:
        attributes = {
            "type": {"string": "mig"},
            "parentUUID": {"string": gpu_uuid(gpu)},
            "size": {"int": size},
        }
        capacity = {"memory": {"value": f"{10 * size}Gi"}}
        device = {
            "name": f"gpu-{gpu}-{size}g-{index}",
            "attributes": attributes,
            "capacity": capacity,
        }
    return consuming(device, f"gpu-{gpu}", slices=str(size), memory=f"{10 * size}Gi")


def partitioned_node(
    name: str, devices: Sequence[Obj], gpus: int = 1, inventory: NodeInventory | None = None
) -> ClaimNode:
    """A node whose pool has `devices` and, in a second slice, one counter set per GPU
    (`gpu-<i>`: 8 memory slices, 80Gi)."""
    sets = {f"gpu-{g}": {"slices": "8", "memory": "80Gi"} for g in range(gpus)}
    published = [slice_obj(name, devices, count=2), counter_slice_obj(name, sets)]
    found = node_devices([parse_slice(s) for s in published], name, {})
    mapped = None if inventory is None else GpuMap.build(inventory, found.devices)
    return ClaimNode(name=name, devices=found, gpus=mapped)


def taint_rule_obj(
    name: str,
    *,
    key: str = "example.com/maintenance",
    effect: str = "NoSchedule",
    selector: Mapping[str, str] | None = None,
) -> Obj:
    """A DeviceTaintRule (resource.k8s.io/v1) adding taint `key` with `effect` to the devices
    `selector` picks (`driver`, `pool`, `device`; {}: every device; None: no selector)."""
    spec: Obj = {"taint": {"key": key, "effect": effect}}
    if selector is not None:
        spec["deviceSelector"] = dict(selector)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": spec,
    }


def class_obj(name: str = GPU_CLASS, *selectors: str, config: Sequence[Obj] = ()) -> Obj:
    exprs = selectors or (GPU_SELECTOR,)
    spec: Obj = {"selectors": [{"cel": {"expression": e}} for e in exprs]}
    if config:
        spec["config"] = list(config)
    return {"kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def request(name: str = "gpus", count: int = 1, *selectors: str, **extra: object) -> Obj:
    exactly: Obj = {"deviceClassName": GPU_CLASS, "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    exactly.update(extra)
    return {"name": name, "exactly": exactly}


def claim_obj(
    name: str,
    *requests: Obj,
    constraints: Sequence[Obj] = (),
    namespace: str = "ns",
    status: Obj | None = None,
) -> Obj:
    obj: Obj = {
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": list(requests), "constraints": list(constraints)}},
    }
    if status is not None:
        obj["status"] = status
    return obj


def classes(*objs: Obj) -> dict[str, DeviceClass]:
    parsed = [parse_device_class(o) for o in (objs or (class_obj(),))]
    return {c.name: c for c in parsed}


def claim(name: str, *requests: Obj, **kw: Any) -> ResourceClaim:
    return parse_claim(claim_obj(name, *(requests or (request(),)), **kw))


def claim_node(
    name: str,
    devices: Sequence[Obj],
    inventory: NodeInventory | None = None,
    labels: Mapping[str, str] | None = None,
) -> ClaimNode:
    found = node_devices([parse_slice(slice_obj(name, devices))], name, labels or {})
    gpus = None if inventory is None else GpuMap.build(inventory, found.devices)
    return ClaimNode(name=name, devices=found, gpus=gpus)


def device_names(decision: PodDecision) -> list[str]:
    """The devices a decision's claims hold, in order."""
    return [d.id.device for c in decision.claims for d in c.allocation.devices]


def pod(key: str, *claims: ResourceClaim) -> PodClaims:
    return PodClaims(key=key, claims=tuple(claims))


def allocator(*class_objs: Obj) -> ClaimAllocator:
    return ClaimAllocator(classes(*class_objs))


def two_islands() -> NodeInventory:
    """8 GPUs in two NVLink islands {0-3} and {4-7} (NV12 inside, SYS across); NUMA 0 and 1."""
    cells = [
        ["X" if a == b else "NV12" if a // 4 == b // 4 else "SYS" for b in range(8)]
        for a in range(8)
    ]
    return NodeInventory(
        gpus=tuple(make_gpu(i, i // 4) for i in range(8)),
        links=LinkMatrix.from_cells(cells),
        numa_nodes=make_numa([0, 1], ["0-31", "32-63"]),
        driver_version="550.54.15",
        cuda_driver_version=12040,
    )


def island_devices(used: Sequence[int] = ()) -> list[Obj]:
    """The eight GPUs of `two_islands` as devices, with `nvlinkIsland` and `numaNode`."""
    return [gpu_device(g, nvlinkIsland=g // 4, numaNode=g // 4) for g in range(8)]


def own_gpus(node: str) -> tuple[list[Obj], NodeInventory]:
    """`island_devices` and `two_islands` with GPU UUIDs of the node's own (`GPU-<node>-gpu-<n>`,
    in its devices and its inventory alike), as real GPUs have: no two nodes publish equal
    devices."""
    devices = island_devices()
    for device in devices:
        attributes = device["attributes"]
        assert isinstance(attributes, dict)
        attributes["uuid"] = {"string": f"GPU-{node}-{device['name']}"}
    inventory = two_islands()
    gpus = tuple(replace(g, uuid=GpuUuid(f"GPU-{node}-gpu-{g.minor}")) for g in inventory.gpus)
    return devices, replace(inventory, gpus=gpus)


def check_placed_as_fresh(
    kept: ClaimAllocator, want: PodClaims, nodes: Sequence[ClaimNode], usage: Usage
) -> PodDecision:
    """`kept`'s decision (no reasons), asserted equal to a fresh allocator's, then applied: its
    devices added to `usage`, the pod assumed on its node's state (if any)."""
    got = kept.place(want, nodes, usage, explain=False)
    assert got == ClaimAllocator(classes()).place(want, nodes, usage, explain=False)
    if got.node is not None:
        for made in got.claims:
            usage.add(made.allocation.devices)
        state = next(n.state for n in nodes if n.name == got.node)
        if state is not None:
            want_gpus = PodRequest(key=want.key, gpus=len(got.gpus))
            state.add_pod(want_gpus, Assignment(node=got.node, gpus=got.gpus))
    return got
