"""gputopo-scheduler allocating partitionable devices (DRAPartitionableDevices) against the fake
API server: a node's pool published as two slices through the real client, its partitions in
one and the GPU's shared counters in the other; claims get partitions while the counters last,
and a claim they do not leave room for waits, naming them. The fake refuses what a real server
refuses of such slices."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from tests.builders.claimcluster import NS, claim_pod, devices_of, refusal, reserved_for
from tests.builders.claims import (
    DRIVER,
    claim_obj,
    class_obj,
    counter_slice_obj,
    partition,
    request,
    slice_obj,
)
from tests.builders.scheduler import (
    create_pod,
    gpu_node,
    node_of,
    running,
    scheduled_condition,
)
from tests.builders.wait import wait_for

PARTS = "parts.gputopo.io"
GROUP, VERSION, SLICES = "resource.k8s.io", "v1", "resourceslices"


def _publish(fake_api: Any, *bodies: dict[str, Any]) -> None:
    api = fake_api.api_client()
    try:
        for body in bodies:
            body["apiVersion"] = f"{GROUP}/{VERSION}"
            client.CustomObjectsApi(api).create_cluster_custom_object(GROUP, VERSION, SLICES, body)
    finally:
        api.close()


def _partitioned_cluster(fake_api: Any) -> None:
    """n1 with GPU 0 published whole, as two halves and as four quarters (one pool, two
    slices: partitions and counter set gpu-0 of 8 slices, 80Gi)."""
    gpu_node(fake_api, "n1", gpus=0)
    fake_api.put_object("deviceclasses", class_obj(PARTS, f'device.driver == "{DRIVER}"'))
    devices = [partition(0, 8, 0), *(partition(0, 4, i) for i in range(2))]
    devices += [partition(0, 2, i) for i in range(4)]
    sets = {"gpu-0": {"slices": "8", "memory": "80Gi"}}
    _publish(fake_api, slice_obj("n1", devices, count=2), counter_slice_obj("n1", sets))


def _sized(name: str, size: int) -> dict[str, Any]:
    selector = f'device.attributes["{DRIVER}"].size == {size}'
    return claim_obj(name, request("part", 1, selector, deviceClassName=PARTS), namespace=NS)


def test_partitions_bind_while_the_gpus_counters_last_and_the_whole_gpu_waits(fake_api, core_v1):
    _partitioned_cluster(fake_api)
    for name, size in (("half-a", 4), ("whole", 8), ("half-b", 4)):
        fake_api.put_object("resourceclaims", _sized(name, size))
    with running(fake_api) as rt:
        create_pod(core_v1, claim_pod("a", "half-a"))
        wait_for(lambda: node_of(fake_api, "a"), 5, "a bound")
        create_pod(core_v1, claim_pod("w", "whole"))
        create_pod(core_v1, claim_pod("b", "half-b"))
        wait_for(lambda: node_of(fake_api, "b"), 5, "b bound")
        wait_for(lambda: scheduled_condition(fake_api, "w"), 5, "w marked unschedulable")
        rt.reporter.flush()
    halves = devices_of(fake_api, "half-a") + devices_of(fake_api, "half-b")
    assert sorted(halves) == ["gpu-0-4g-0", "gpu-0-4g-1"]
    assert reserved_for(fake_api, "half-b") == ["b"]
    assert node_of(fake_api, "w") is None
    assert devices_of(fake_api, "whole") == []
    condition = scheduled_condition(fake_api, "w")
    assert condition is not None
    assert "claim default/whole request part" in condition["message"]
    assert "within their pools' shared counters" in condition["message"]


def test_a_pool_missing_the_counter_set_its_devices_consume_allocates_nothing(fake_api, core_v1):
    gpu_node(fake_api, "n1", gpus=0)
    fake_api.put_object("deviceclasses", class_obj(PARTS, f'device.driver == "{DRIVER}"'))
    sets = {"gpu-1": {"slices": "8", "memory": "80Gi"}}  # not gpu-0's
    _publish(
        fake_api, slice_obj("n1", [partition(0, 4, 0)], count=2), counter_slice_obj("n1", sets)
    )
    fake_api.put_object("resourceclaims", _sized("half", 4))
    condition = refusal(fake_api, core_v1, claim_pod("p", "half"))
    assert "in a valid pool" in condition["message"]
    assert node_of(fake_api, "p") is None


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda s: s["spec"].update(devices=[partition(0, 4, 0)]), "only one of `sharedCounters`"),
        (lambda s: s["spec"]["sharedCounters"].append(dict(s["spec"]["sharedCounters"][0])),
         "spec.sharedCounters[1].name: Duplicate value"),
        (lambda s: s["spec"]["sharedCounters"][0].update(counters={}),
         "spec.sharedCounters[0].counters: Required value"),
        (lambda s: s["spec"]["sharedCounters"][0].update(name="GPU_0"),
         "spec.sharedCounters[0].name: Invalid value"),
    ],
)  # fmt: skip
def test_the_fake_refuses_counter_slices_a_real_server_refuses(fake_api, change, field):
    body = counter_slice_obj("n1", {"gpu-0": {"slices": "8"}})
    change(body)
    with pytest.raises(ApiException) as err:
        _publish(fake_api, body)
    assert err.value.status == 422
    assert field in str(err.value.body)


def test_the_fake_refuses_a_device_consuming_three_counter_sets(fake_api):
    device = partition(0, 4, 0)
    for extra in ("gpu-1", "gpu-2"):
        device["consumesCounters"].append(
            {"counterSet": extra, "counters": {"slices": {"value": "1"}}}
        )
    with pytest.raises(ApiException) as err:
        _publish(fake_api, slice_obj("n1", [device]))
    assert err.value.status == 422
    assert "spec.devices[0].consumesCounters: Too many: 3" in str(err.value.body)
