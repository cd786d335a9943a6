"""A cluster with DRA GPUs in the fake API server, for gputopo-scheduler's claim tests: nodes
with two NVLink islands (an NRT and a ResourceSlice of eight GPUs each), the gputopo DeviceClass,
ResourceClaims, pods that use them and what the scheduler wrote to them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kubernetes import client

from tests.builders.claims import (
    claim_obj,
    class_obj,
    gpu_device,
    island_devices,
    request,
    slice_obj,
    two_islands,
)
from tests.builders.dra import allocation_status
from tests.builders.nrt import make_nrt
from tests.builders.scheduler import (
    create_pod,
    create_podgroup,
    gpu_node,
    node_of,
    pod_body,
    podgroup,
    running,
    scheduled_condition,
    wait_for,
)
from tests.fakeapi import FakeApiServer

Obj = dict[str, Any]
NS = "default"
PROTECTION = "resource.kubernetes.io/delete-protection"
RACK = "gputopo.io/rack"
GANG_LABEL = "scheduling.x-k8s.io/pod-group"


def dra_cluster(
    fake: FakeApiServer, nodes: Sequence[str] = ("n1",), racks: Sequence[str] = ()
) -> None:
    """`nodes`, each with eight GPUs in islands {0-3} and {4-7}, published as NRT and as a
    ResourceSlice, labelled `rack` by `racks` (in order); the gputopo DeviceClass."""
    fake.put_object("deviceclasses", class_obj())
    for i, name in enumerate(nodes):
        gpu_node(fake, name, gpus=8, labels={RACK: racks[i]} if racks else None)
        fake.put_object("noderesourcetopologies", make_nrt(name, two_islands()))
        fake.put_object("resourceslices", slice_obj(name, island_devices()))


def shared_cluster(fake: FakeApiServer, node: str = "n1", shared: int = 2) -> None:
    """`node` with eight GPUs (NRT) whose first `shared` are published for shares (capacity
    `memory` 80Gi and `compute` 100, as the agent publishes a GPU `sharing` shares), the other
    whole; the gputopo DeviceClass."""
    fake.put_object("deviceclasses", class_obj())
    gpu_node(fake, node, gpus=8)
    fake.put_object("noderesourcetopologies", make_nrt(node, two_islands()))
    capacity = {"memory": {"value": "80Gi"}, "compute": {"value": "100"}}
    devices = island_devices()
    for g in range(shared):
        devices[g] = gpu_device(g, nvlinkIsland=0, numaNode=0, shared=True, capacity=capacity)
    fake.put_object("resourceslices", slice_obj(node, devices))


def share_claim(name: str, memory: str, compute: int, *selectors: str) -> Obj:
    """A claim for one share of a shared GPU: `memory` and `compute` (percent) of it."""
    wanted = {"memory": memory, "compute": str(compute)}
    exprs = ("device.allowMultipleAllocations", *selectors)
    share = request("share", 1, *exprs, capacity={"requests": wanted})
    return claim_obj(name, share, namespace=NS)


def shared_elsewhere(
    fake: FakeApiServer, name: str, node: str, device: int, memory: str, compute: int
) -> None:
    """A share claim another scheduler allocated on `node`'s shared `device` (gpu-<n>)."""
    claim = share_claim(name, memory, compute)
    claim["metadata"]["finalizers"] = [PROTECTION]
    claim.update(allocation_status(node, [("share", f"gpu-{device}")], [(name, f"uid-{name}")]))
    result = claim["status"]["allocation"]["devices"]["results"][0]
    consumed = {"memory": memory, "compute": str(compute)}
    result.update(shareID=f"share-{name}", consumedCapacity=consumed)
    fake.put_object("resourceclaims", claim)


def gpu_claim(name: str, count: int = 1, *selectors: str) -> Obj:
    return claim_obj(name, request("gpus", count, *selectors), namespace=NS)


def allocated_elsewhere(fake: FakeApiServer, name: str, node: str, devices: Sequence[int]) -> None:
    """A claim another scheduler allocated on `node`'s `devices` (gpu-<n>), for a pod of its own."""
    claim = gpu_claim(name, len(devices))
    claim["metadata"]["finalizers"] = [PROTECTION]
    taken = [("gpus", f"gpu-{d}") for d in devices]
    claim.update(allocation_status(node, taken, [(f"{name}-pod", f"uid-{name}-pod")]))
    fake.put_object("resourceclaims", claim)


def claim_pod(name: str, *claims: str, template: str | None = None) -> Obj:
    """A pod of gputopo-scheduler using `claims` by name (and one from `template`)."""
    entries: list[Obj] = [{"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)]
    if template is not None:
        entries.append({"name": "tpl", "resourceClaimTemplateName": template})
    return pod_body(name, resourceClaims=entries)


def claim_of(fake: FakeApiServer, name: str) -> Obj:
    found = fake.get_object("resourceclaims", name, NS)
    assert found is not None, f"resourceclaim {name} is gone"
    return found


def devices_of(fake: FakeApiServer, name: str) -> list[str]:
    """The devices the claim's allocation holds (empty when it is not allocated)."""
    allocation = (claim_of(fake, name).get("status") or {}).get("allocation") or {}
    return [r["device"] for r in (allocation.get("devices") or {}).get("results") or ()]


def reserved_for(fake: FakeApiServer, name: str) -> list[str]:
    return [r["name"] for r in (claim_of(fake, name).get("status") or {}).get("reservedFor") or ()]


def refusal(fake: FakeApiServer, core: client.CoreV1Api, pod: Obj) -> Obj:
    """Run the scheduler until it marks `pod` unschedulable; its `PodScheduled` condition."""
    name = pod["metadata"]["name"]
    with running(fake) as rt:
        create_pod(core, pod)
        wait_for(lambda: scheduled_condition(fake, name), 5, f"{name} marked unschedulable")
        rt.reporter.flush()
    condition = scheduled_condition(fake, name)
    assert condition is not None
    return condition


def waiting(fake: FakeApiServer, pod: str, claim: str) -> tuple[str, str | None, list[str]]:
    """A pod that waits: its `PodScheduled` message, its node and its claim's devices."""
    condition = scheduled_condition(fake, pod)
    message = "" if condition is None else str(condition.get("message") or "")
    return message, node_of(fake, pod), devices_of(fake, claim)


def claim_gang(
    fake: FakeApiServer,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    name: str,
    members: int,
    gpus: int,
    spec: dict[str, Any] | None = None,
    **annotations: str,
) -> list[str]:
    """A PodGroup `name` of `members` pods `name-<i>`, each with its own claim of `gpus` GPUs
    (`name-<i>-gpus`) and `spec` added to its spec; the pods' names."""
    create_podgroup(custom, podgroup(name, members, annotations=annotations))
    pods = []
    for i in range(members):
        pod = f"{name}-{i}"
        fake.put_object("resourceclaims", gpu_claim(f"{pod}-gpus", gpus))
        body = claim_pod(pod, f"{pod}-gpus")
        body["metadata"]["labels"] = {GANG_LABEL: name}
        body["spec"].update(spec or {})
        create_pod(core, body)
        pods.append(pod)
    return pods


def deallocate(fake: FakeApiServer, name: str) -> None:
    """What the resourceclaim controller does once every pod a claim is reserved for is gone:
    `reservedFor` emptied, the allocation cleared and the delete-protection finalizer removed
    (the fake API server runs no controllers)."""
    claim = claim_of(fake, name)
    claim["status"] = {}
    claim["metadata"]["finalizers"] = [
        f for f in claim["metadata"].get("finalizers") or () if f != PROTECTION
    ]
    fake.put_object("resourceclaims", claim)
