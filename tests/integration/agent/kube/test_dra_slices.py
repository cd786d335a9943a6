"""The ResourceSlice publisher against the fake API server, over the real client."""

from __future__ import annotations

import time

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from agent.dra import DRIVER, GROUP, SLICES, UNHEALTHY_TAINT, VERSION
from agent.dra.devices import dra_devices, unhealthy_devices
from agent.kube.dra import KubeDra, SlicePublisher
from tests.builders.deviceplugin import make_inventory

NODE = "gpu-node-1"


@pytest.fixture
def rig(fake_api):
    fake_api.add_node(NODE)
    api = fake_api.api_client()
    inventory = make_inventory(4, mig={3: ["3g.40gb", "3g.40gb"]})
    unhealthy: set[str] = set()  # GPU and MIG UUIDs, as the health tracker has them

    def devices():
        return dra_devices(inventory, range(4))

    publisher = SlicePublisher(
        KubeDra(api, NODE), devices, lambda: unhealthy_devices(devices(), unhealthy, None),
        poll_s=0.05,
    )  # fmt: skip
    yield publisher, client.CustomObjectsApi(api), inventory, unhealthy
    publisher.stop()
    api.close()


def _slices(custom):
    return custom.list_cluster_custom_object(
        GROUP, VERSION, SLICES, field_selector=f"spec.nodeName={NODE},spec.driver={DRIVER}"
    )["items"]


def _wait(predicate, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_publishes_one_pool_that_the_api_server_accepts_and_writes_it_once(rig, fake_api):
    publisher, custom, _, _ = rig
    assert not publisher.step().empty
    (obj,) = _slices(custom)
    assert obj["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    names = [d["name"] for d in obj["spec"]["devices"]]
    assert names == ["gpu-0", "gpu-1", "gpu-2", "gpu-3-mig-3g-40gb-0", "gpu-3-mig-3g-40gb-4"]
    assert obj["metadata"]["ownerReferences"][0]["name"] == NODE
    assert publisher.step().empty


def test_slices_wiped_by_the_kubelet_come_back(rig):
    publisher, custom, _, _ = rig
    publisher.start()
    assert _wait(lambda: len(_slices(custom)) == 1)
    # as the kubelet wipes a driver's slices: DeleteCollection by node and driver
    client.ResourceV1Api(custom.api_client).delete_collection_resource_slice(
        field_selector=f"spec.nodeName={NODE},spec.driver={DRIVER}", _preload_content=False
    )
    assert _wait(lambda: len(_slices(custom)) == 1)
    assert _slices(custom)[0]["spec"]["pool"]["generation"] == 1


def test_an_unhealthy_gpu_gets_a_taint_with_the_time_the_server_adds(rig):
    publisher, custom, inventory, unhealthy = rig
    publisher.step()
    unhealthy.add(inventory.gpus[3].uuid)
    publisher.step()
    (obj,) = _slices(custom)
    assert obj["spec"]["pool"]["generation"] == 2
    tainted = [d["name"] for d in obj["spec"]["devices"] if d.get("taints")]
    assert tainted == ["gpu-3-mig-3g-40gb-0", "gpu-3-mig-3g-40gb-4"]
    taint = obj["spec"]["devices"][3]["taints"][0]
    assert taint["key"] == UNHEALTHY_TAINT
    assert taint["timeAdded"]
    assert publisher.step().empty


def test_the_fake_refuses_a_slice_a_real_server_refuses(rig):
    _, custom, _, _ = rig
    device = {"name": "gpu-0", "attributes": {"driverVersion": {"version": "535.104.05"}}}
    spec = {"driver": DRIVER, "nodeName": NODE, "devices": [device]}
    spec["pool"] = {"name": NODE, "resourceSliceCount": 1}
    bad = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceSlice", "metadata": {"name": "bad"}}
    bad["spec"] = spec
    with pytest.raises(ApiException) as err:
        custom.create_cluster_custom_object(GROUP, VERSION, SLICES, bad)
    assert err.value.status == 422
    assert "spec.devices[0].attributes[driverVersion].version" in err.value.body


def test_a_shared_gpus_request_policy_is_accepted_and_a_wrong_default_refused(fake_api):
    fake_api.add_node(NODE)
    api = fake_api.api_client()
    custom = client.CustomObjectsApi(api)
    devices = dra_devices(make_inventory(2), range(2), shared={0: 2})
    publisher = SlicePublisher(KubeDra(api, NODE), lambda: devices, set)
    publisher.step()
    (obj,) = _slices(custom)
    assert obj["spec"]["devices"][0]["allowMultipleAllocations"] is True
    obj["metadata"] = {"name": "too-big"}
    obj["spec"]["devices"][0]["capacity"]["memory"]["requestPolicy"]["default"] = "900Gi"
    with pytest.raises(ApiException) as err:
        custom.create_cluster_custom_object(GROUP, VERSION, SLICES, obj)
    api.close()
    assert err.value.status == 422
    assert "capacity[memory].requestPolicy.default" in err.value.body


def test_a_new_mig_layout_is_published_under_a_new_generation(fake_api):
    fake_api.add_node(NODE)
    api = fake_api.api_client()
    layouts = [make_inventory(4, mig={3: ["3g.40gb", "3g.40gb"]})]
    publisher = SlicePublisher(KubeDra(api, NODE), lambda: dra_devices(layouts[-1], range(4)), set)
    publisher.step()
    layouts.append(make_inventory(4, mig={3: ["4g.40gb", "3g.40gb"]}))  # the MIG re-scan's
    assert len(publisher.step().update) == 1
    (obj,) = _slices(client.CustomObjectsApi(api))
    api.close()
    assert obj["spec"]["pool"]["generation"] == 2
    assert [d["name"] for d in obj["spec"]["devices"]][3:] == [
        "gpu-3-mig-4g-40gb-0",
        "gpu-3-mig-3g-40gb-4",
    ]


def test_an_api_outage_is_reported_once_and_the_slices_land_after_it(fake_api, caplog):
    fake_api.add_node(NODE)
    api = fake_api.api_client()
    devices = dra_devices(make_inventory(1), range(1))
    publisher = SlicePublisher(KubeDra(api, NODE), lambda: devices, set, poll_s=0.05)
    fake_api.down()
    publisher.start()
    try:
        assert _wait(lambda: publisher.problem and "unreachable" in publisher.problem)
        fake_api.up()
        assert _wait(lambda: publisher.problem is None)
    finally:
        publisher.stop()
    warnings = [
        r for r in caplog.records if r.levelname == "WARNING" and "ResourceSlices" in r.message
    ]
    assert len(warnings) == 1
    assert len(_slices(client.CustomObjectsApi(api))) == 1
    api.close()
