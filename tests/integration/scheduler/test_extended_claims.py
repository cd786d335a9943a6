"""gputopo-scheduler placing pods that ask `nvidia.com/gpu` where a DeviceClass maps it to DRA
GPUs (KEP-5004, GA in 1.37), against the fake API server: the claim it creates, allocates and
names in the pod's status; the device plugin's nodes where they offer the resource, and a claim
on the others once those are full (a pod, a gang); a class that comes later; and a failed bind
that deletes the claim it created."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from scheduler.claims.decision import ClaimAllocation
from scheduler.claims.extended import CLAIM_ANNOTATION, claim_body, extended_ask, mapped_names
from scheduler.claims.model import AllocatedDevice, Allocation, DeviceClass, DeviceId
from scheduler.claims.parse import parse_claim
from scheduler.kubeapi.client import KubeClient
from scheduler.kubeapi.resourceclaims import ClaimApi
from scheduler.runtime.binding.claimbind import ExtendedClaim, PodRef, bind_with_claims
from scheduler.runtime.claims.extended import made_key
from tests.builders.claimcluster import (
    GANG_LABEL,
    NS,
    PROTECTION,
    allocated_elsewhere,
    claim_of,
    claim_pod,
    deallocate,
    devices_of,
    gpu_claim,
    reserved_for,
)
from tests.builders.claims import class_obj, island_devices, slice_obj, two_islands
from tests.builders.nrt import make_nrt
from tests.builders.queues import create_queue, queue_body, queue_status
from tests.builders.scheduler import (
    GPU,
    create_pod,
    create_podgroup,
    gpu_node,
    node_of,
    pod_body,
    podgroup,
    running,
    scheduled_condition,
)
from tests.builders.wait import wait_for
from tests.fakeapi import FakeApiServer

Obj = dict[str, Any]


def _mapping_class() -> Obj:
    body = class_obj()
    body["spec"]["extendedResourceName"] = GPU
    return body


def _dra_node(fake: FakeApiServer, name: str) -> None:
    """A node whose eight GPUs are DRA's alone: its allocatable has no `nvidia.com/gpu`."""
    gpu_node(fake, name, gpus=0)
    fake.put_object("noderesourcetopologies", make_nrt(name, two_islands()))
    fake.put_object("resourceslices", slice_obj(name, island_devices()))


def _mapped_dra_node(fake: FakeApiServer) -> None:
    """Node n1 with DRA GPUs alone, and the class mapping `nvidia.com/gpu` to them."""
    fake.put_object("deviceclasses", _mapping_class())
    _dra_node(fake, "n1")


def _claims_of(fake: FakeApiServer, pod: str) -> list[Obj]:
    return [
        c
        for c in fake.list_objects("resourceclaims", NS)
        if any(o.get("name") == pod for o in c["metadata"].get("ownerReferences") or ())
    ]


def test_a_pod_asking_gpus_a_class_maps_gets_a_claim_made_allocated_and_named(fake_api, core_v1):
    _mapped_dra_node(fake_api)
    with running(fake_api):
        create_pod(core_v1, pod_body("p1", gpus=2))
        wait_for(lambda: node_of(fake_api, "p1"), 5, "p1 bound")
    pod = fake_api.get_object("pods", "p1", NS)
    [claim] = _claims_of(fake_api, "p1")
    name = claim["metadata"]["name"]
    assert name.startswith("p1-extended-resources-")
    assert claim["metadata"]["annotations"][CLAIM_ANNOTATION] == "true"
    owner = claim["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "Pod",
        pod["metadata"]["uid"],
        True,
    )
    assert claim["spec"]["devices"]["requests"] == [
        {
            "name": "container-0-request-0",
            "exactly": {
                "deviceClassName": "gpu.gputopo.io",
                "allocationMode": "ExactCount",
                "count": 2,
            },
        }
    ]
    devices = devices_of(fake_api, name)
    assert len(devices) == 2
    assert len({int(d.removeprefix("gpu-")) // 4 for d in devices}) == 1  # one NVLink island
    assert PROTECTION in claim["metadata"]["finalizers"]
    assert reserved_for(fake_api, name) == ["p1"]
    assert pod["status"]["extendedResourceClaimStatus"] == {
        "resourceClaimName": name,
        "requestMappings": [
            {"containerName": "main", "resourceName": GPU, "requestName": "container-0-request-0"}
        ],
    }


def test_the_gpus_a_made_claim_holds_are_used_for_the_next_pod(fake_api, core_v1):
    _mapped_dra_node(fake_api)
    with running(fake_api):
        create_pod(core_v1, pod_body("p1", gpus=6))
        wait_for(lambda: node_of(fake_api, "p1"), 5, "p1 bound")
        create_pod(core_v1, pod_body("p2", gpus=4))
        wait_for(lambda: scheduled_condition(fake_api, "p2"), 5, "p2 refused")
        create_pod(core_v1, pod_body("p3", gpus=2))
        wait_for(lambda: node_of(fake_api, "p3"), 5, "p3 bound")
    assert node_of(fake_api, "p2") is None
    held = [
        set(devices_of(fake_api, c["metadata"]["name"]))
        for p in ("p1", "p3")
        for c in _claims_of(fake_api, p)
    ]
    assert len(held) == 2
    assert not held[0] & held[1]
    assert len(held[0] | held[1]) == 8


def test_where_a_device_plugin_offers_the_resource_the_pod_uses_it_and_no_claim(fake_api, core_v1):
    _mapped_dra_node(fake_api)
    gpu_node(fake_api, "plugin", gpus=8)
    with running(fake_api):
        create_pod(core_v1, pod_body("p1", gpus=2))
        wait_for(lambda: node_of(fake_api, "p1"), 5, "p1 bound")
    assert node_of(fake_api, "p1") == "plugin"
    assert _claims_of(fake_api, "p1") == []
    assert "extendedResourceClaimStatus" not in fake_api.get_object("pods", "p1", NS)["status"]


def test_a_pod_the_device_plugins_nodes_cannot_fit_gets_a_claim_on_a_dra_node(fake_api, core_v1):
    """A cluster half moved to DRA (kube-scheduler 1.37 decides node by node): the device
    plugin's node first, then a claim on the node whose allocatable does not offer the
    resource; a pod neither fits waits, saying why on both."""
    _mapped_dra_node(fake_api)
    gpu_node(fake_api, "plugin", gpus=2)
    with running(fake_api):
        create_pod(core_v1, pod_body("p1", gpus=2))
        wait_for(lambda: node_of(fake_api, "p1"), 5, "p1 bound")
        create_pod(core_v1, pod_body("p2", gpus=2))
        wait_for(lambda: node_of(fake_api, "p2"), 5, "p2 bound")
        create_pod(core_v1, pod_body("p3", gpus=8))
        wait_for(lambda: scheduled_condition(fake_api, "p3"), 5, "p3 refused")
    assert (node_of(fake_api, "p1"), node_of(fake_api, "p2")) == ("plugin", "n1")
    assert _claims_of(fake_api, "p1") == []
    [claim] = _claims_of(fake_api, "p2")
    assert len(devices_of(fake_api, claim["metadata"]["name"])) == 2
    status = fake_api.get_object("pods", "p2", NS)["status"]
    assert status["extendedResourceClaimStatus"]["resourceClaimName"] == claim["metadata"]["name"]
    assert node_of(fake_api, "p3") is None
    assert _claims_of(fake_api, "p3") == []
    said = scheduled_condition(fake_api, "p3")["message"]
    assert "Insufficient nvidia.com/gpu" in said
    assert "with a claim for nvidia.com/gpu, on the nodes that do not offer it" in said


def test_a_node_offering_the_resource_is_never_given_a_claim_for_it(fake_api, core_v1):
    """A node whose device plugin offers `nvidia.com/gpu` and which publishes DRA GPUs too:
    its device plugin serves the resource there (as kube-scheduler decides), so once its
    plugin GPUs are taken a pod waits, though its DRA GPUs are free."""
    fake_api.put_object("deviceclasses", _mapping_class())
    _dra_node(fake_api, "both")
    node = fake_api.get_object("nodes", "both")
    for part in ("capacity", "allocatable"):
        node["status"][part][GPU] = "2"
    fake_api.put_object("nodes", node)
    with running(fake_api):
        create_pod(core_v1, pod_body("p1", gpus=2))
        wait_for(lambda: node_of(fake_api, "p1"), 5, "p1 bound")
        create_pod(core_v1, pod_body("p2", gpus=2))
        wait_for(lambda: scheduled_condition(fake_api, "p2"), 5, "p2 refused")
    assert node_of(fake_api, "p1") == "both"
    assert _claims_of(fake_api, "p1") == []
    assert node_of(fake_api, "p2") is None
    assert _claims_of(fake_api, "p2") == []


def test_a_gang_the_device_plugins_nodes_cannot_fit_gets_claims_on_a_dra_node(
    fake_api, core_v1, custom_objects
):
    """All or none, each way: a gang of two 2-GPU pods, one device plugin node of 2 GPUs; both
    pods get claims on the DRA node, none is left on the device plugin's node."""
    _mapped_dra_node(fake_api)
    gpu_node(fake_api, "plugin", gpus=2)
    with running(fake_api):
        create_podgroup(custom_objects, podgroup("g", 2))
        for name in ("g-0", "g-1"):
            create_pod(core_v1, pod_body(name, gpus=2, labels={GANG_LABEL: "g"}))
        wait_for(lambda: node_of(fake_api, "g-0") and node_of(fake_api, "g-1"), 5, "g bound")
    assert (node_of(fake_api, "g-0"), node_of(fake_api, "g-1")) == ("n1", "n1")
    held = [_made_devices(fake_api, p) for p in ("g-0", "g-1")]
    assert [len(h) for h in held] == [2, 2]
    assert not held[0] & held[1]


def test_a_pod_waiting_on_full_dra_gpus_binds_on_a_device_plugin_node_that_comes(fake_api, core_v1):
    """Read when no node offered the resource, tried again when one does: as it is, there."""
    _mapped_dra_node(fake_api)
    with running(fake_api):
        create_pod(core_v1, pod_body("p1", gpus=8))
        wait_for(lambda: node_of(fake_api, "p1"), 5, "p1 bound")
        create_pod(core_v1, pod_body("p2", gpus=2))
        wait_for(lambda: scheduled_condition(fake_api, "p2"), 5, "p2 refused")
        gpu_node(fake_api, "plugin", gpus=2)
        wait_for(lambda: node_of(fake_api, "p2"), 5, "p2 bound")
    assert node_of(fake_api, "p2") == "plugin"
    assert _claims_of(fake_api, "p2") == []
    assert "extendedResourceClaimStatus" not in fake_api.get_object("pods", "p2", NS)["status"]


def test_a_pod_waiting_for_gpus_binds_once_a_class_maps_them(fake_api, core_v1):
    _dra_node(fake_api, "n1")
    fake_api.put_object("deviceclasses", class_obj())  # no extendedResourceName yet
    with running(fake_api):
        create_pod(core_v1, pod_body("p1", gpus=1))
        wait_for(lambda: scheduled_condition(fake_api, "p1"), 5, "p1 refused")
        assert node_of(fake_api, "p1") is None
        fake_api.put_object("deviceclasses", _mapping_class())
        wait_for(lambda: node_of(fake_api, "p1"), 5, "p1 bound")
    [claim] = _claims_of(fake_api, "p1")
    assert len(devices_of(fake_api, claim["metadata"]["name"])) == 1


@pytest.fixture
def claims_api(fake_api: FakeApiServer) -> Iterator[ClaimApi]:
    kube = KubeClient(fake_api.api_client(), "test", f"t-{uuid.uuid4().hex[:6]}")
    yield ClaimApi(kube)
    kube.close()


def test_a_bind_that_fails_deletes_the_claim_it_created(fake_api, claims_api):
    pod = pod_body("p1", gpus=1)
    pod["metadata"]["uid"] = "uid-p1"
    classes = mapped_names([DeviceClass(name="gpu.gputopo.io", extended_resource_name=GPU)])
    ask = extended_ask(pod, classes)
    assert ask is not None
    key = made_key(NS, "p1")
    body = claim_body(pod, ask, key.name)
    result = AllocatedDevice(
        request="container-0-request-0", id=DeviceId("gpu.gputopo.io", "n1", "gpu-7")
    )
    decided = ClaimAllocation(
        claim=parse_claim(body), allocation=Allocation(devices=(result,), node="n1"), new=True
    )
    recorded: list[str] = []
    extended = ExtendedClaim(key=key, body=body, record=recorded.append)
    outcome = bind_with_claims(
        claims_api,
        PodRef(namespace=NS, name="p1", uid="uid-p1"),
        [decided],
        lambda: "error",
        None,
        extended,
    )
    assert outcome == "error"
    [created] = recorded
    assert created.startswith("p1-extended-resources-")
    assert fake_api.get_object("resourceclaims", created, NS) is None
    writes = [
        (r.method, r.path.rsplit("/", 1)[-1])
        for r in fake_api.writes()
        if "resourceclaims" in r.path
    ]
    assert writes[0] == ("POST", "resourceclaims")
    assert ("PUT", "status") in writes
    assert writes[-1] == ("DELETE", created)


def _made_devices(fake: FakeApiServer, pod: str) -> set[str]:
    return {d for c in _claims_of(fake, pod) for d in devices_of(fake, c["metadata"]["name"])}


def test_a_gang_of_pods_asking_gpus_binds_whole_or_makes_no_claim(
    fake_api, core_v1, custom_objects
):
    _mapped_dra_node(fake_api)
    with running(fake_api):
        create_podgroup(custom_objects, podgroup("big", 2))
        for name in ("big-0", "big-1"):
            create_pod(core_v1, pod_body(name, gpus=6, labels={GANG_LABEL: "big"}))
        wait_for(lambda: scheduled_condition(fake_api, "big-0"), 5, "the big gang refused")
        create_podgroup(custom_objects, podgroup("fits", 2))
        for name in ("fits-0", "fits-1"):
            create_pod(core_v1, pod_body(name, gpus=4, labels={GANG_LABEL: "fits"}))
        wait_for(lambda: node_of(fake_api, "fits-0") and node_of(fake_api, "fits-1"), 5, "fits")
    assert node_of(fake_api, "big-0") is None
    assert node_of(fake_api, "big-1") is None
    assert _claims_of(fake_api, "big-0") == []
    assert _claims_of(fake_api, "big-1") == []
    held = [_made_devices(fake_api, p) for p in ("fits-0", "fits-1")]
    assert [len(h) for h in held] == [4, 4]
    assert not held[0] & held[1]


def _high_priority_class(core_v1: client.CoreV1Api) -> None:
    client.SchedulingV1Api(core_v1.api_client).create_priority_class(
        {"metadata": {"name": "high"}, "value": 100}
    )


def _two_low_pods_fill_n1(fake: FakeApiServer, core_v1: client.CoreV1Api) -> None:
    """low-a and low-b, 4 GPUs each, bound on n1 through made claims."""
    for name in ("low-a", "low-b"):
        create_pod(core_v1, pod_body(name, gpus=4, terminationGracePeriodSeconds=30))
        wait_for(lambda n=name: node_of(fake, n) == "n1", 5, f"{name} on n1")


@pytest.mark.parametrize("plugin", [False, True], ids=["dra-only", "beside-a-plugin-node"])
def test_a_pod_asking_gpus_evicts_a_lower_one_and_binds_on_the_gpus_its_claim_frees(
    fake_api, core_v1, plugin: bool
):
    """Beside a device plugin's node of 2 GPUs (too few for the 4-GPU pod, even emptied), the
    victim search reads the pod with its made claim once the pod as it is finds no victims."""
    _mapped_dra_node(fake_api)
    if plugin:
        gpu_node(fake_api, "plugin", gpus=2)
    _high_priority_class(core_v1)
    with running(fake_api):
        _two_low_pods_fill_n1(fake_api, core_v1)
        create_pod(core_v1, pod_body("high", gpus=4, priorityClassName="high"))
        wait_for(lambda: _terminating(fake_api), 10, "a victim terminating")
        (victim,) = _terminating(fake_api)
        freed = _made_devices(fake_api, victim)
        fake_api.complete_pod_deletions()
        [claim] = _claims_of(fake_api, victim)
        deallocate(fake_api, claim["metadata"]["name"])  # the resourceclaim controller's part
        wait_for(lambda: node_of(fake_api, "high"), 10, "high bound")
    assert node_of(fake_api, "high") == "n1"
    assert _made_devices(fake_api, "high") == freed
    survivor = ({"low-a", "low-b"} - {victim}).pop()
    assert node_of(fake_api, survivor) == "n1"


def test_a_gang_no_device_plugin_node_can_take_evicts_on_a_dra_node_and_binds_with_claims(
    fake_api, core_v1, custom_objects
):
    """A high-priority gang of two 4-GPU pods beside a device plugin's node of 2 GPUs: the
    search as it is finds nothing; with its made claims it evicts both lower pods on the DRA
    node, and the gang binds there on the GPUs their claims free."""
    _mapped_dra_node(fake_api)
    gpu_node(fake_api, "plugin", gpus=2)
    _high_priority_class(core_v1)
    with running(fake_api):
        _two_low_pods_fill_n1(fake_api, core_v1)
        create_podgroup(custom_objects, podgroup("g", 2, priorityClassName="high"))
        for name in ("g-0", "g-1"):
            body = pod_body(name, gpus=4, priorityClassName="high", labels={GANG_LABEL: "g"})
            create_pod(core_v1, body)
        wait_for(lambda: len(_terminating(fake_api)) == 2, 10, "both lower pods terminating")
        freed = _made_devices(fake_api, "low-a") | _made_devices(fake_api, "low-b")
        fake_api.complete_pod_deletions()
        for claim in _claims_of(fake_api, "low-a") + _claims_of(fake_api, "low-b"):
            deallocate(fake_api, claim["metadata"]["name"])
        wait_for(lambda: node_of(fake_api, "g-0") and node_of(fake_api, "g-1"), 10, "g bound")
    assert (node_of(fake_api, "g-0"), node_of(fake_api, "g-1")) == ("n1", "n1")
    assert _made_devices(fake_api, "g-0") | _made_devices(fake_api, "g-1") == freed


def _terminating(fake: FakeApiServer) -> set[str]:
    pods = fake.list_objects("pods", NS)
    return {p["metadata"]["name"] for p in pods if p["metadata"].get("deletionTimestamp")}


def test_a_claim_an_unfinished_bind_made_is_deleted_and_the_pod_gets_a_new_one(fake_api, core_v1):
    """The scheduler stopped between creating a pod's claim and binding the pod: the claim,
    allocated (6 of the node's 8 GPUs), keeps the pod's 4 from fitting until it is deleted."""
    _mapped_dra_node(fake_api)
    create_pod(core_v1, pod_body("p1", gpus=4))
    uid = fake_api.get_object("pods", "p1", NS)["metadata"]["uid"]
    allocated_elsewhere(fake_api, "p1-extended-resources-old", "n1", range(6))
    stale = claim_of(fake_api, "p1-extended-resources-old")
    stale["metadata"]["annotations"] = {CLAIM_ANNOTATION: "true"}
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "p1", "uid": uid, "controller": True}
    stale["metadata"]["ownerReferences"] = [owner]
    fake_api.put_object("resourceclaims", stale)
    with running(fake_api):
        wait_for(lambda: node_of(fake_api, "p1"), 5, "p1 bound")
    assert fake_api.get_object("resourceclaims", "p1-extended-resources-old", NS) is None
    [claim] = _claims_of(fake_api, "p1")
    assert len(devices_of(fake_api, claim["metadata"]["name"])) == 4


@pytest.mark.parametrize("nrt", [True, False], ids=["gpu-map", "foreign-driver-no-nrt"])
def test_a_queue_is_charged_the_gpus_of_made_claims_and_its_max_holds_back_more(
    fake_api, core_v1, custom_objects, nrt: bool
):
    """With or without the node's NRT (a foreign DRA driver publishes none): the GPUs a pod's
    claims take are charged when it is decided, not only once it is bound."""
    if nrt:
        _mapped_dra_node(fake_api)
    else:
        fake_api.put_object("deviceclasses", _mapping_class())
        gpu_node(fake_api, "n1", gpus=0)
        fake_api.put_object("resourceslices", slice_obj("n1", island_devices()))
    create_queue(custom_objects, queue_body("team", gpu_max=4, namespaces=[NS]))
    with running(fake_api) as rt:
        create_pod(core_v1, pod_body("p1", gpus=4))
        wait_for(lambda: node_of(fake_api, "p1"), 5, "p1 bound")
        used = wait_for(
            lambda: queue_status(fake_api, "team").get("used", {}).get(GPU), 5, "team's usage"
        )
        create_pod(core_v1, pod_body("p2", gpus=2))
        wait_for(lambda: scheduled_condition(fake_api, "p2"), 5, "p2 held back")
        rt.reporter.flush()
    assert used == "4"
    condition = scheduled_condition(fake_api, "p2")
    assert condition is not None
    assert "max" in condition["message"]
    assert node_of(fake_api, "p2") is None
    assert _claims_of(fake_api, "p2") == []


def test_a_restarted_scheduler_reads_a_bound_pod_with_the_claim_its_status_names(fake_api, core_v1):
    _mapped_dra_node(fake_api)
    with running(fake_api):
        create_pod(core_v1, pod_body("p1", gpus=6))
        wait_for(lambda: node_of(fake_api, "p1"), 5, "p1 bound")
    with running(fake_api):
        create_pod(core_v1, pod_body("p2", gpus=4))
        wait_for(lambda: scheduled_condition(fake_api, "p2"), 5, "p2 refused")
        create_pod(core_v1, pod_body("p3", gpus=2))
        wait_for(lambda: node_of(fake_api, "p3"), 5, "p3 bound")
    assert node_of(fake_api, "p2") is None
    assert not _made_devices(fake_api, "p1") & _made_devices(fake_api, "p3")


def test_a_pod_with_a_claim_of_its_own_and_extended_gpus_gets_both_on_one_node(fake_api, core_v1):
    _mapped_dra_node(fake_api)
    fake_api.put_object("resourceclaims", gpu_claim("mine", 1))
    body = claim_pod("p1", "mine")
    body["spec"]["containers"][0]["resources"] = {"limits": {GPU: "2"}}
    with running(fake_api):
        create_pod(core_v1, body)
        wait_for(lambda: node_of(fake_api, "p1"), 5, "p1 bound")
    made = _made_devices(fake_api, "p1")
    own = set(devices_of(fake_api, "mine"))
    assert len(made) == 2
    assert len(own) == 1
    assert not made & own
    assert reserved_for(fake_api, "mine") == ["p1"]
