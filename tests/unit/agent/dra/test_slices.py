from __future__ import annotations

from agent.dra import DRIVER, UNHEALTHY_TAINT
from agent.dra.devices import dra_devices
from agent.dra.slices import CONTENT_ANNOTATION, MAX_TAINTED_DEVICES, plan_slices
from tests.builders.deviceplugin import make_inventory

NODE = "gpu-node-1"


def _held(objs):
    """What the API server would hand back: the objects with a resourceVersion."""
    return [{**o, "metadata": {**o["metadata"], "resourceVersion": "7"}} for o in objs]


def test_first_plan_creates_one_slice_for_the_pool():
    devices = dra_devices(make_inventory(2), range(2))
    plan = plan_slices(NODE, devices, set(), [], node_uid="u-1")
    assert not plan.update
    assert not plan.delete
    (obj,) = plan.create
    assert obj["spec"]["driver"] == DRIVER
    assert obj["spec"]["nodeName"] == NODE
    assert obj["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    assert [d["name"] for d in obj["spec"]["devices"]] == ["gpu-0", "gpu-1"]
    assert obj["metadata"]["ownerReferences"][0]["uid"] == "u-1"


def test_unchanged_pool_writes_nothing():
    devices = dra_devices(make_inventory(2), range(2))
    held = _held(plan_slices(NODE, devices, set(), []).create)
    assert plan_slices(NODE, devices, set(), held).empty


def test_an_unhealthy_gpu_is_tainted_under_a_new_generation():
    inventory = make_inventory(2)
    devices = dra_devices(inventory, range(2))
    held = _held(plan_slices(NODE, devices, set(), []).create)
    plan = plan_slices(NODE, devices, {"gpu-1"}, held)
    (obj,) = plan.update
    assert obj["spec"]["pool"]["generation"] == 2
    assert obj["metadata"]["resourceVersion"] == "7"
    taints = obj["spec"]["devices"][1]["taints"]
    assert taints == [{"key": UNHEALTHY_TAINT, "value": "true", "effect": "NoSchedule"}]
    assert "taints" not in obj["spec"]["devices"][0]


def test_a_slice_edited_by_someone_else_is_rewritten():
    devices = dra_devices(make_inventory(2), range(2))
    held = _held(plan_slices(NODE, devices, set(), []).create)
    held[0]["metadata"]["annotations"] = {CONTENT_ANNOTATION: "other"}
    assert len(plan_slices(NODE, devices, set(), held).update) == 1


def test_many_tainted_devices_split_into_slices_and_stale_ones_go():
    inventory = make_inventory(10, mig={i: ["1g.10gb"] * 7 for i in range(10)})
    devices = dra_devices(inventory, range(10))
    unhealthy = {d.name for d in devices if d.gpu_uuid == inventory.gpus[0].uuid}
    stale = {"metadata": {"name": "old", "resourceVersion": "1"},
             "spec": {"driver": DRIVER, "nodeName": NODE, "pool": {"generation": 4}}}  # fmt: skip
    plan = plan_slices(NODE, devices, unhealthy, [stale])
    counts = [len(o["spec"]["devices"]) for o in plan.create]
    assert counts == [MAX_TAINTED_DEVICES, 70 - MAX_TAINTED_DEVICES]
    assert {o["spec"]["pool"]["resourceSliceCount"] for o in plan.create} == {len(counts)}
    assert {o["spec"]["pool"]["generation"] for o in plan.create} == {5}
    assert plan.delete == ("old",)


def test_slices_of_other_nodes_and_drivers_are_left_alone():
    other = {"metadata": {"name": "x"}, "spec": {"driver": "gpu.nvidia.com", "nodeName": NODE}}
    devices = dra_devices(make_inventory(1), range(1))
    plan = plan_slices(NODE, devices, set(), [other])
    assert plan.delete == ()
    assert len(plan.create) == 1


def test_a_shared_gpu_allows_several_allocations_with_an_equal_split_default():
    inventory = make_inventory(2)
    devices = dra_devices(inventory, range(2), shared={1: 4})
    (obj,) = plan_slices(NODE, devices, set(), []).create
    plain, shared = obj["spec"]["devices"]
    assert "allowMultipleAllocations" not in plain
    assert shared["allowMultipleAllocations"] is True
    split = inventory.gpus[1].usable_memory_mib // 4
    assert shared["capacity"]["memory"] == {
        "value": f"{inventory.gpus[1].usable_memory_mib}Mi",
        "requestPolicy": {"default": f"{split}Mi", "validRange": {"min": "1Mi"}},
    }
    # the equal split, not 100: a share asking memory alone leaves room for the others
    assert shared["capacity"]["compute"] == {
        "value": "100",
        "requestPolicy": {"default": "25", "validRange": {"min": "1", "max": "100"}},
    }
    assert "compute" not in plain["capacity"]
    assert (plain["attributes"]["shared"], shared["attributes"]["shared"]) == (
        {"bool": False},
        {"bool": True},
    )


def _as_a_server_without_the_gates_stores(objs):
    """What a 1.34 or 1.35 API server with its alpha DRA gates off holds of `objs`: the devices
    without allowMultipleAllocations, request policies and taints (seen on a real 1.35.4)."""
    held = _held(objs)
    for obj in held:
        devices = []
        for device in obj["spec"]["devices"]:
            kept = {
                k: v for k, v in device.items() if k not in ("allowMultipleAllocations", "taints")
            }
            kept["capacity"] = {k: {"value": v["value"]} for k, v in device["capacity"].items()}
            devices.append(kept)
        obj["spec"] = {**obj["spec"], "devices": devices}
    return held


def test_what_a_server_without_the_gates_dropped_is_said_naming_the_gate():
    devices = dra_devices(make_inventory(3), range(3), shared={1: 4})
    written = plan_slices(NODE, devices, {"gpu-2"}, []).create
    plan = plan_slices(NODE, devices, {"gpu-2"}, _as_a_server_without_the_gates_stores(written))
    assert plan.empty  # the content annotation holds: nothing to write again, no loop
    shares, taints = plan.dropped
    assert shares.startswith(
        f"the API server dropped allowMultipleAllocations from ResourceSlice {NODE}-{DRIVER}-0 "
        "(devices gpu-1): its DRAConsumableCapacity feature gate is off"
    )
    assert "dropped taints" in taints
    assert "(devices gpu-2): its DRADeviceTaints feature gate is off" in taints
    assert plan_slices(NODE, devices, {"gpu-2"}, _held(written)).dropped == ()
