"""gputopo-scheduler allocating devices of a ResourceSlice with `perDeviceNodeSelection` (on by
default since 1.36) against the fake API server, published through the real client: one pool's
slice names gpu-0 for n1 and gpu-1 for n2, and gpu-2 for every node. Claims of one device each
get a node's own device there, pinned to that node; a claim of two gets a node's own and the
every-node device; the fake refuses what a real server refuses of such slices."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from tests.builders.claimcluster import claim_of, claim_pod, devices_of, gpu_claim
from tests.builders.claims import class_obj, per_device_slice_obj
from tests.builders.scheduler import create_pod, gpu_node, node_of, running, scheduled_condition
from tests.builders.wait import wait_for

GROUP, VERSION, SLICES = "resource.k8s.io", "v1", "resourceslices"
REACH = {"gpu-0": "n1", "gpu-1": "n2", "gpu-2": True}


def _publish(fake_api: Any, body: dict[str, Any]) -> None:
    api = fake_api.api_client()
    try:
        body["apiVersion"] = f"{GROUP}/{VERSION}"
        client.CustomObjectsApi(api).create_cluster_custom_object(GROUP, VERSION, SLICES, body)
    finally:
        api.close()


def _cluster(fake_api: Any) -> None:
    for name in ("n1", "n2"):
        gpu_node(fake_api, name, gpus=0)
    fake_api.put_object("deviceclasses", class_obj())
    _publish(fake_api, per_device_slice_obj("fabric", "fabric", REACH))


def _pinned_to(fake_api: Any, claim: str) -> list[str]:
    """The nodes the claim's allocation nodeSelector names (`metadata.name` In ...)."""
    selector = claim_of(fake_api, claim)["status"]["allocation"]["nodeSelector"]
    [term] = selector["nodeSelectorTerms"]
    [field] = term["matchFields"]
    assert (field["key"], field["operator"]) == ("metadata.name", "In")
    return list(field["values"])


def test_each_node_gives_its_own_device_and_a_claim_of_two_adds_the_every_node_one(
    fake_api, core_v1
):
    _cluster(fake_api)
    for name, count in (("one", 1), ("two", 2), ("more", 2)):
        fake_api.put_object("resourceclaims", gpu_claim(name, count))
    with running(fake_api):
        create_pod(core_v1, claim_pod("p1", "one"))
        wait_for(lambda: node_of(fake_api, "p1"), 5, "p1 bound")
        create_pod(core_v1, claim_pod("p2", "two"))
        wait_for(lambda: node_of(fake_api, "p2"), 5, "p2 bound")
        create_pod(core_v1, claim_pod("p3", "more"))
        wait_for(lambda: scheduled_condition(fake_api, "p3"), 5, "p3 refused")
    first, second = node_of(fake_api, "p1"), node_of(fake_api, "p2")
    own = {"n1": "gpu-0", "n2": "gpu-1"}
    assert first in own
    assert devices_of(fake_api, "one") == [own[first]]  # first fit: the node's own first
    assert _pinned_to(fake_api, "one") == [first]
    assert second in own
    assert sorted(devices_of(fake_api, "two")) == sorted([own[second], "gpu-2"])
    assert _pinned_to(fake_api, "two") == [second]
    assert node_of(fake_api, "p3") is None  # each node has one device left at most


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda s: s["spec"]["devices"][0].pop("nodeName"), "spec.devices[0]: Required value"),
        (lambda s: s["spec"]["devices"][2].update(nodeName="n1"),
         "spec.devices[2]: Required value: exactly one of"),
        (lambda s: s["spec"].update(nodeName="n1"), "but multiple fields are set"),
        (lambda s: s["spec"].pop("perDeviceNodeSelection"), "can only be set if"),
        (lambda s: s["spec"].update(perDeviceNodeSelection=False),
         "spec.perDeviceNodeSelection: Invalid value: false"),
    ],
)  # fmt: skip
def test_the_fake_refuses_per_device_slices_a_real_server_refuses(fake_api, change, field):
    body = per_device_slice_obj("fabric", "fabric", REACH)
    change(body)
    with pytest.raises(ApiException) as err:
        _publish(fake_api, body)
    assert err.value.status == 422
    assert field in str(err.value.body)
