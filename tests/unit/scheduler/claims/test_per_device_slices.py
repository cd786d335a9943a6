"""ResourceSlices with `perDeviceNodeSelection` (DRAPartitionableDevices, on by default since
1.36), as Kubernetes' allocator reads them (`GatherPools`, `deviceMatches` and
`createNodeSelector` in k8s.io/dynamic-resource-allocation/structured/internal/incubating,
v0.37.2): a node is served the devices that name it, select it or serve every node; a device
named for one node pins its claim there, one of every node leaves the claim anywhere, a selected
one gives its selector; a device whose selector has several terms is never allocated. A pool's
shared counters that devices of several nodes consume are not allocated from (a node's view
holds its own devices' allocations only); those of devices every node is served are."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.claims.decision import ClaimNode
from scheduler.claims.parse import parse_slice
from scheduler.claims.slices import node_devices, serves
from scheduler.claims.usage import Usage
from tests.builders.claims import (
    DRIVER,
    allocator,
    claim,
    class_obj,
    counter_slice_obj,
    partition,
    per_device_slice_obj,
    pod,
    request,
)

REACH = {"gpu-0": "a", "gpu-1": "b", "gpu-2": True, "gpu-3": ("rack", "r1")}


def _node(name: str, labels: dict[str, str], *slices: dict[str, Any]) -> ClaimNode:
    found = node_devices([parse_slice(s) for s in slices], name, labels)
    return ClaimNode(name=name, devices=found, labels=labels)


@pytest.mark.parametrize(
    ("name", "labels", "served"),
    [
        ("a", {}, ["gpu-0", "gpu-2"]),
        ("b", {"rack": "r1"}, ["gpu-1", "gpu-2", "gpu-3"]),
        ("c", {"rack": "r2"}, ["gpu-2"]),
    ],
)
def test_each_node_is_served_the_devices_that_name_select_or_serve_every_node(
    name: str, labels: dict[str, str], served: list[str]
) -> None:
    body = per_device_slice_obj("fabric", "fabric", REACH)
    found = node_devices([parse_slice(body)], name, labels)
    assert [d.name for d in found.devices] == served
    assert serves(parse_slice(body), name, labels)


def test_a_slice_whose_devices_name_other_nodes_serves_none_here() -> None:
    body = per_device_slice_obj("fabric", "fabric", {"gpu-0": "a", "gpu-1": "b"})
    assert not serves(parse_slice(body), "c", {})
    assert node_devices([parse_slice(body)], "c", {}).devices == ()


def _placed_on(node: ClaimNode, count: int) -> tuple[list[str], Any]:
    decision = allocator().place(pod("ns/p", claim("c", request("g", count))), [node], Usage())
    [made] = decision.claims
    return sorted(r.id.device for r in made.allocation.devices), made.allocation


def test_a_device_named_for_the_node_pins_the_claim_to_it() -> None:
    body = per_device_slice_obj("fabric", "fabric", {"gpu-0": "a", "gpu-2": True})
    devices, allocation = _placed_on(_node("a", {}, body), 2)
    assert devices == ["gpu-0", "gpu-2"]
    assert (allocation.node, allocation.node_selector) == ("a", None)


def test_devices_of_every_node_and_of_a_selector_give_the_selector_alone() -> None:
    body = per_device_slice_obj("fabric", "fabric", {"gpu-2": True, "gpu-3": ("rack", "r1")})
    devices, allocation = _placed_on(_node("b", {"rack": "r1"}, body), 2)
    assert devices == ["gpu-2", "gpu-3"]
    assert allocation.node is None
    [term] = allocation.node_selector
    assert [(r.key, r.values) for r in term.match_expressions] == [("rack", ("r1",))]


def test_a_device_whose_selector_has_two_terms_is_never_allocated_and_says_why() -> None:
    body = per_device_slice_obj("fabric", "fabric", {"gpu-3": ("rack", "r1")})
    terms = body["spec"]["devices"][0]["nodeSelector"]["nodeSelectorTerms"]
    terms.append(terms[0])
    node = _node("b", {"rack": "r1"}, body)
    [device] = node.devices.devices
    assert device.unsupported == "its nodeSelector has 2 terms (an allocation's has one)"
    decision = allocator().place(pod("ns/p", claim("c")), [node], Usage())
    assert decision.node is None


def _split_pool(reach: dict[str, object]) -> list[dict[str, Any]]:
    """Pool `split`: GPU 0 as two halves consuming counter set gpu-0, each half's node as
    `reach` says, and the counter slice (every node's)."""
    body = per_device_slice_obj("split", "split", {})
    body["spec"]["pool"]["resourceSliceCount"] = 2
    for name, where in reach.items():
        half = partition(0, 4, int(name[-1]))
        half.update({"nodeName": where} if isinstance(where, str) else {"allNodes": True})
        body["spec"]["devices"].append(half)
    counters = counter_slice_obj("split", {"gpu-0": {"slices": "8", "memory": "80Gi"}})
    del counters["spec"]["nodeName"]
    counters["spec"]["perDeviceNodeSelection"] = True
    return [body, counters]


def test_counters_consumed_by_devices_of_two_nodes_are_not_allocated_on_either() -> None:
    """Half 0 is a's, half 1 is b's: what b's allocations take of the counters is not in a's
    view, so neither half is allocated (Kubernetes reads the whole pool)."""
    slices = _split_pool({"h0": "a", "h1": "b"})
    node = _node("a", {}, *slices)
    [half] = node.devices.devices
    assert half.unsupported == "its pool split shares counters with other nodes' devices"
    parts = class_obj("parts.gputopo.io", f'device.driver == "{DRIVER}"')
    asked = claim("c", request("g", 1, deviceClassName="parts.gputopo.io"))
    assert allocator(parts).place(pod("ns/p", asked), [node], Usage()).node is None


def test_counters_consumed_by_devices_of_every_node_are_charged_on_each() -> None:
    """Both halves serve every node: each node sees the whole pool and its counters."""
    slices = _split_pool({"h0": True, "h1": True})
    node = _node("a", {}, *slices)
    assert [d.unsupported for d in node.devices.devices] == [None, None]
    assert node.devices.counters
    parts = class_obj("parts.gputopo.io", f'device.driver == "{DRIVER}"')
    asked = claim("c", request("g", 2, deviceClassName="parts.gputopo.io"))
    decision = allocator(parts).place(pod("ns/p", asked), [node], Usage())
    [made] = decision.claims
    assert sorted(r.id.device for r in made.allocation.devices) == ["gpu-0-4g-0", "gpu-0-4g-1"]
    three = claim("d", request("g", 3, deviceClassName="parts.gputopo.io"))
    assert allocator(parts).place(pod("ns/q", three), [node], Usage()).node is None
