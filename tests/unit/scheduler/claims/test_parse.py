"""resource.k8s.io/v1 JSON into the claims model, and errors naming the object and the field."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from scheduler.claims.errors import SpecError
from scheduler.claims.model import AllocationMode, ClaimKey, DeviceId
from scheduler.claims.parse import (
    parse_claim,
    parse_claim_template,
    parse_device_class,
    parse_slice,
)
from scheduler.claims.semver import Semver
from scheduler.claims.slices import node_devices
from scheduler.claims.status import allocation_status
from scheduler.claims.usage import Usage
from scheduler.placement import Effect
from tests.builders.claims import DRIVER, claim_obj, class_obj, gpu_device, request, slice_obj


def test_claim_with_exactly_first_available_and_constraints() -> None:
    obj = claim_obj(
        "train",
        request("gpus", 2, 'device.attributes["gpu.gputopo.io"].numaNode == 0'),
        {
            "name": "any",
            "firstAvailable": [
                {"name": "big", "deviceClassName": "gpu.gputopo.io", "count": 2},
                {"name": "small", "deviceClassName": "gpu.gputopo.io", "allocationMode": "All"},
            ],
        },
        constraints=[{"requests": ["gpus"], "matchAttribute": "gpu.gputopo.io/nvlinkIsland"}],
    )
    claim = parse_claim(obj)
    assert claim.key == ClaimKey("ns", "train")
    assert str(claim.key) == "ns/train"
    gpus, anyreq = claim.spec.requests
    assert gpus.alternatives[0].count == 2
    assert gpus.alternatives[0].selectors
    assert [a.name for a in anyreq.alternatives] == ["any/big", "any/small"]
    assert anyreq.first_available
    assert anyreq.alternatives[1].mode is AllocationMode.ALL
    assert claim.spec.constraints[0].match_attribute == "gpu.gputopo.io/nvlinkIsland"


def test_claim_status_allocation_is_read() -> None:
    status = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpus", "driver": DRIVER, "pool": "n1", "device": "gpu-0"},
                    {
                        "request": "share",
                        "driver": DRIVER,
                        "pool": "n1",
                        "device": "gpu-1",
                        "shareID": "abc",
                        "consumedCapacity": {"memory": "10Gi"},
                    },
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
                ]
            },
        },
        "reservedFor": [{"resource": "pods", "name": "p", "uid": "u1"}],
    }
    claim = parse_claim(claim_obj("c", request(), status=status))
    assert claim.allocation is not None
    assert claim.allocation.node == "n1"
    first, second = claim.allocation.devices
    assert first.id == DeviceId(DRIVER, "n1", "gpu-0")
    assert first.share_id is None
    assert second.consumed == {f"{DRIVER}/memory": Fraction(10 * 2**30)}
    assert claim.reserved_for == ("u1",)


def test_a_share_read_back_takes_the_room_it_was_allocated() -> None:
    """consumedCapacity names a capacity as the slice does (unqualified: the driver's); read
    back, it counts against the device's (qualified) capacity, as the allocator assumed it."""
    shared = gpu_device(1, shared=True, capacity={"memory": {"value": "40Gi"}})
    (device,) = parse_slice(slice_obj("n1", [shared])).devices
    result = {"request": "s", "driver": DRIVER, "pool": "n1", "device": "gpu-1", "shareID": "a"}
    result["consumedCapacity"] = {"memory": "10Gi"}
    status = {"allocation": {"devices": {"results": [result]}}}
    claim = parse_claim(claim_obj("c", request(), status=status))
    assert claim.allocation is not None
    usage = Usage.of([claim.allocation])
    assert usage.left(device, f"{DRIVER}/memory") == Fraction(30 * 2**30)
    written: Any = allocation_status(claim.allocation)
    assert written["devices"]["results"][0]["consumedCapacity"] == {"memory": "10737418240"}


def test_template_spec_is_the_claim_spec() -> None:
    obj = {
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t", "namespace": "ns"},
        "spec": {"spec": claim_obj("x", request("gpus", 4))["spec"]},
    }
    template = parse_claim_template(obj)
    assert template.key == ClaimKey("ns", "t")
    assert template.spec.requests[0].alternatives[0].count == 4


def test_device_class() -> None:
    cfg = {"opaque": {"driver": DRIVER, "parameters": {"kind": "GpuConfig"}}}
    cls = parse_device_class(class_obj("gpu.gputopo.io", 'device.driver == "x"', config=[cfg]))
    assert cls.selectors == ('device.driver == "x"',)
    assert cls.config[0].parameters == {"kind": "GpuConfig"}


def test_slice_qualifies_names_and_reads_every_attribute_kind() -> None:
    dev = gpu_device(
        3,
        numaNode=1,
        healthy=True,
        versions={"driverVersion": "550.54.15", "other.io/v": "1.0.0"},
        taints=[
            {"key": "gpu.gputopo.io/unhealthy", "effect": "NoSchedule"},
            {"key": "i", "effect": "None"},
        ],
        capacity={
            "memory": {
                "value": "80Gi",
                "requestPolicy": {"default": "10Gi", "validRange": {"min": "1Gi", "step": "1Gi"}},
            }
        },
        shared=True,
    )
    parsed = parse_slice(slice_obj("n1", [dev])).devices[0]
    attrs = parsed.attributes
    assert attrs[f"{DRIVER}/numaNode"] == 1
    assert attrs[f"{DRIVER}/healthy"] is True
    assert attrs[f"{DRIVER}/driverVersion"] == Semver(550, 54, 15)
    assert attrs["other.io/v"] == Semver(1, 0, 0)
    memory = parsed.capacity[f"{DRIVER}/memory"]
    assert memory.value == 80 * 2**30
    assert memory.policy is not None
    assert memory.policy.default == 10 * 2**30
    assert memory.policy.valid_step == 2**30
    assert [t.effect for t in parsed.taints] == [Effect.NO_SCHEDULE]
    assert parsed.allow_multiple_allocations


@pytest.mark.parametrize(
    ("obj", "match"),
    [
        pytest.param(
            claim_obj("c", {"name": "gpus"}),
            r"ResourceClaim ns/c: spec.devices.requests\[0\].exactly: set exactly one",
            id="neither exactly nor firstAvailable",
        ),
        pytest.param(
            claim_obj("c", request("gpus", 0)),
            r"ResourceClaim ns/c: spec.devices.requests\[0\].exactly.count: want at least 1",
            id="count 0",
        ),
        pytest.param(
            claim_obj("c", request("gpus", allocationMode="Some")),
            r"exactly.allocationMode: want ExactCount or All, got 'Some'",
            id="bad mode",
        ),
        pytest.param(
            claim_obj(
                "c", request(), constraints=[{"requests": ["nope"], "matchAttribute": "a/b"}]
            ),
            r"constraints\[0\].requests: unknown requests \['nope'\]",
            id="constraint names an unknown request",
        ),
        pytest.param(
            claim_obj("c", request(capacity={"requests": {"memory": "lots"}})),
            r"exactly.capacity.requests.memory: not a quantity: 'lots'",
            id="bad capacity request",
        ),
        pytest.param(
            {"kind": "ResourceClaim", "metadata": {}},
            r"ResourceClaim \?: metadata.name: missing",
            id="no name",
        ),
    ],
)
def test_malformed_claims_name_object_and_field(obj: dict[str, object], match: str) -> None:
    with pytest.raises(SpecError, match=match):
        parse_claim(obj)


def test_malformed_slice_names_the_device_field() -> None:
    bad = gpu_device(0)
    bad["attributes"]["numaNode"] = {"int": 1, "string": "x"}
    with pytest.raises(SpecError, match=r"ResourceSlice n1-gpu.gputopo.io: spec.devices\[0\]"):
        parse_slice(slice_obj("n1", [bad]))
    bad = gpu_device(0, versions={"driverVersion": "550.54"})
    with pytest.raises(SpecError, match=r"driverVersion.version: not a semantic version"):
        parse_slice(slice_obj("n1", [bad]))


def test_node_devices_keeps_the_newest_generation_and_marks_incomplete_pools() -> None:
    old = parse_slice(slice_obj("n1", [gpu_device(0)], generation=1, name="a"))
    new = parse_slice(slice_obj("n1", [gpu_device(1)], generation=2, count=2, name="b"))
    other = parse_slice(slice_obj("n2", [gpu_device(2)]))
    every = parse_slice(
        {
            "metadata": {"name": "net"},
            "spec": {
                "driver": "net.io",
                "allNodes": True,
                "pool": {"name": "fabric"},
                "devices": [{"name": "nic"}],
            },
        }
    )
    found = node_devices([old, new, other, every], "n1", {})
    assert [d.name for d in found.devices] == ["gpu-1", "nic"]
    assert found.incomplete_pools == {(DRIVER, "n1")}


def test_node_selector_slices_serve_matching_nodes() -> None:
    obj = slice_obj("x", [gpu_device(0)])
    del obj["spec"]["nodeName"]
    obj["spec"]["nodeSelector"] = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}
        ]
    }
    parsed = parse_slice(obj)
    assert len(node_devices([parsed], "n1", {"rack": "r1"}).devices) == 1
    assert node_devices([parsed], "n2", {"rack": "r2"}).devices == ()


def _likeness(node: str, numa: object = 1, *, count: int = 1, flip: bool = False) -> str:
    """The likeness of `node`'s two GPUs (the second on NUMA node `numa`; `flip`: listed the
    other way round)."""
    devices = [gpu_device(0), gpu_device(1, numaNode=numa)]
    if flip:
        devices.reverse()
    return node_devices([parse_slice(slice_obj(node, devices, count=count))], node, {}).likeness


@pytest.mark.parametrize(
    ("other", "alike"),
    [
        pytest.param(_likeness("n2"), True, id="another pool name"),
        pytest.param(_likeness("n2", flip=True), False, id="another order"),
        pytest.param(_likeness("n2", 0), False, id="an attribute's value"),
        pytest.param(_likeness("n2", "1"), False, id="an attribute's type (string)"),
        pytest.param(_likeness("n2", True), False, id="an attribute's type (bool)"),
        pytest.param(_likeness("n2", count=2), False, id="an incomplete pool"),
    ],
)
def test_node_devices_likeness_is_all_but_the_pool_names(other: str, alike: bool) -> None:
    assert (_likeness("n1") == other) is alike
