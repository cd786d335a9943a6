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


def claim_gang(
    fake: FakeApiServer,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    name: str,
    members: int,
    gpus: int,
    **annotations: str,
) -> list[str]:
    """A PodGroup `name` of `members` pods `name-<i>`, each with its own claim of `gpus` GPUs
    (`name-<i>-gpus`); the pods' names."""
    create_podgroup(custom, podgroup(name, members, annotations=annotations))
    pods = []
    for i in range(members):
        pod = f"{name}-{i}"
        fake.put_object("resourceclaims", gpu_claim(f"{pod}-gpus", gpus))
        body = claim_pod(pod, f"{pod}-gpus")
        body["metadata"]["labels"] = {GANG_LABEL: name}
        create_pod(core, body)
        pods.append(pod)
    return pods
