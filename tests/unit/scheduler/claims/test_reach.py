"""Where a claim's allocation may be used: the nodeSelector Kubernetes' allocator writes
(`createNodeSelector` in k8s.io/dynamic-resource-allocation/structured, 1.34-1.37): a device that
is one node's own pins the claim to that node; devices of `nodeSelector` slices give their
requirements, each once, in one term; devices of `allNodes` slices alone give no selector. Read
back, the selector decides which nodes the claim's other pods may use: a PodGroup's claim on a
fabric device reaches members on several nodes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from scheduler.claims.decision import ClaimNode
from scheduler.claims.errors import SpecError
from scheduler.claims.parse import parse_claim, parse_slice
from scheduler.claims.slices import node_devices
from scheduler.claims.status import allocation_status
from scheduler.claims.usage import Usage
from tests.builders.claims import (
    DRIVER,
    allocator,
    claim,
    claim_obj,
    class_obj,
    gpu_device,
    pod,
    request,
    shared_slice_obj,
    slice_obj,
)

FABRIC_CLASS = "fabric.example.com"
FABRIC = class_obj(FABRIC_CLASS, f'device.attributes["{DRIVER}"].type == "channel"')


def node(name: str, labels: Mapping[str, str], *slices: dict[str, Any]) -> ClaimNode:
    """`name` with `labels`, as claims see it from `slices` (those it is served by)."""
    found = node_devices([parse_slice(s) for s in slices], name, labels)
    return ClaimNode(name=name, devices=found, labels=labels)


def channel(index: int) -> dict[str, Any]:
    """A fabric channel device: no node's own GPU."""
    return {"name": f"channel-{index}", "attributes": {"type": {"string": "channel"}}}


def rack_term(key: str, value: str) -> dict[str, object]:
    return {"key": key, "operator": "In", "values": [value]}


def read_back(status: dict[str, object]) -> Any:
    """The allocation as the scheduler reads it again from the claim it wrote."""
    return parse_claim(claim_obj("c", request(), status={"allocation": status})).allocation


def test_a_device_of_an_all_nodes_slice_is_allocated_with_no_node_selector() -> None:
    fabric = shared_slice_obj("fabric-0", "fabric", [gpu_device(0)])
    nodes = [node("a", {}, fabric), node("b", {}, fabric)]
    decision = allocator().place(pod("ns/p", claim("c")), nodes, Usage())
    assert decision.node == "a"
    allocation = decision.claims[0].allocation
    assert (allocation.node, allocation.node_selector) == (None, None)
    status = allocation_status(allocation)
    assert "nodeSelector" not in status
    again = read_back(status)
    assert (again.node, again.node_selector) == (None, None)
    allocated = parse_claim(claim_obj("c", request(), status={"allocation": status}))
    second = allocator().place(pod("ns/q", allocated), [nodes[1]], Usage())
    assert second.node == "b"  # the claim reaches b too
    assert not second.claims[0].new


def test_devices_of_node_selector_slices_give_their_requirements_once_in_one_term() -> None:
    rack = shared_slice_obj("rack-0", "rack-0", [gpu_device(0)], label=("rack", "r1"))
    rack_too = shared_slice_obj("rack-1", "rack-1", [gpu_device(1)], label=("rack", "r1"))
    zone = shared_slice_obj("zone-0", "zone-0", [gpu_device(2)], label=("zone", "z1"))
    inside = node("a", {"rack": "r1", "zone": "z1"}, rack, rack_too, zone)
    decision = allocator().place(pod("ns/p", claim("c", request("g", 3))), [inside], Usage())
    allocation = decision.claims[0].allocation
    assert allocation.node is None
    terms = [{"matchExpressions": [rack_term("rack", "r1"), rack_term("zone", "z1")]}]
    status = allocation_status(allocation)
    assert status["nodeSelector"] == {"nodeSelectorTerms": terms}
    allocated = parse_claim(claim_obj("c", request(), status={"allocation": status}))
    assert allocated.allocation is not None
    assert allocation_status(allocated.allocation)["nodeSelector"] == {"nodeSelectorTerms": terms}
    other_zone = node("b", {"rack": "r1", "zone": "z2"})
    same_place = node("c", {"rack": "r1", "zone": "z1"})
    refused = allocator().place(pod("ns/q", allocated), [other_zone], Usage())
    assert refused.node is None
    assert refused.reasons == ("claim ns/c is allocated for other nodes (its nodeSelector)",)
    assert allocator().place(pod("ns/q", allocated), [other_zone, same_place], Usage()).node == "c"


def test_one_device_of_the_nodes_own_pins_the_claim_to_the_node() -> None:
    fabric = shared_slice_obj("fabric-0", "fabric", [gpu_device(0)])
    own = slice_obj("a", [gpu_device(1)])
    decision = allocator().place(
        pod("ns/p", claim("c", request("g", 2))), [node("a", {}, fabric, own)], Usage()
    )
    allocation = decision.claims[0].allocation
    assert len(allocation.devices) == 2
    assert (allocation.node, allocation.node_selector) == ("a", None)
    field = {"key": "metadata.name", "operator": "In", "values": ["a"]}
    status = allocation_status(allocation)
    assert status["nodeSelector"] == {"nodeSelectorTerms": [{"matchFields": [field]}]}
    assert read_back(status).node == "a"


def test_a_gangs_claim_on_a_fabric_device_reaches_members_on_two_nodes() -> None:
    """Each member needs its node's one GPU, so the two run on two nodes; the claim they share
    (a PodGroup's) is a channel of an allNodes slice. Pinned to the first member's node, the
    second member would find no GPU there and the gang would not start."""
    fabric = shared_slice_obj("fabric-0", "fabric", [channel(0)])
    nodes = [node(n, {}, fabric, slice_obj(n, [gpu_device(0)])) for n in ("a", "b")]
    group = claim("group", {"name": "ch", "exactly": {"deviceClassName": FABRIC_CLASS}})
    members = [pod(f"ns/m{i}", claim(f"own{i}"), group) for i in range(2)]
    decision = allocator(class_obj(), FABRIC).place_gang(members, nodes, Usage())
    assert decision.placed, decision.reasons
    assert sorted(p.node or "" for p in decision.pods) == ["a", "b"]
    made = {str(c.claim.key): c.allocation for p in decision.pods for c in p.claims if c.new}
    assert sorted(made) == ["ns/group", "ns/own0", "ns/own1"]
    assert [d.id.device for d in made["ns/group"].devices] == ["channel-0"]
    assert (made["ns/group"].node, made["ns/group"].node_selector) == (None, None)
    assert {made["ns/own0"].node, made["ns/own1"].node} == {"a", "b"}


@pytest.mark.parametrize(
    ("selector", "field"),
    [
        ({"nodeSelectorTerms": "rack"}, "nodeSelectorTerms: want a list"),
        ({"nodeSelectorTerms": [{"matchFields": ["x"]}]}, "nodeSelectorTerms[0].matchFields[0]: "),
        (
            {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name"}]}]},
            "nodeSelectorTerms[0].matchFields[0].operator: None is not one of In, NotIn",
        ),
        (
            {"nodeSelectorTerms": [{"matchFields": [{"key": "rack", "operator": "In"}]}]},
            "nodeSelectorTerms[0].matchFields[0].key: 'rack' is not a node field",
        ),
    ],
)
def test_a_malformed_allocation_node_selector_is_refused_naming_the_field(
    selector: dict[str, object], field: str
) -> None:
    status = {"allocation": {"devices": {"results": []}, "nodeSelector": selector}}
    with pytest.raises(SpecError) as refused:
        parse_claim(claim_obj("c", request(), status=status))
    assert str(refused.value).startswith("ResourceClaim ns/c: status.allocation.nodeSelector.")
    assert field in str(refused.value)


def test_a_slice_node_selector_is_one_term_and_reads_gt_as_the_api_does() -> None:
    """The API admits a slice's nodeSelector of exactly one term; `Gt` compares integers."""
    fabric = shared_slice_obj("fabric-0", "fabric", [gpu_device(0)])
    term = {"matchExpressions": [{"key": "generation", "operator": "Gt", "values": ["3"]}]}
    fabric["spec"]["nodeSelector"] = {"nodeSelectorTerms": [term]}
    del fabric["spec"]["allNodes"]
    assert len(node("new", {"generation": "4"}, fabric).devices.devices) == 1
    assert node("old", {"generation": "3"}, fabric).devices.devices == ()
    fabric["spec"]["nodeSelector"] = {"nodeSelectorTerms": [term, term]}
    with pytest.raises(
        SpecError, match=r"spec\.nodeSelector\.nodeSelectorTerms: want one term, got 2"
    ):
        parse_slice(fabric)
