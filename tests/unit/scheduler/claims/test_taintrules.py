"""DeviceTaintRules (resource.k8s.io/v1, 1.37): the taint of each rule is added to the devices
its selector picks, and keeps requests that do not tolerate it off them, as a slice's own
taint does."""

from __future__ import annotations

import pytest

from scheduler.claims.decision import ClaimNode
from scheduler.claims.errors import SpecError
from scheduler.claims.parse import parse_slice, parse_taint_rule
from scheduler.claims.slices import node_devices
from scheduler.claims.usage import Usage
from scheduler.placement import Effect, Taint
from tests.builders.claims import (
    DRIVER,
    allocator,
    claim,
    device_names,
    gpu_device,
    pod,
    request,
    slice_obj,
    taint_rule_obj,
)

MAINTENANCE = Taint(key="example.com/maintenance", value="", effect=Effect.NO_SCHEDULE)


def _node(*rules: dict[str, object]) -> ClaimNode:
    found = node_devices(
        [parse_slice(slice_obj("n1", [gpu_device(g) for g in range(4)]))],
        "n1",
        {},
        [parse_taint_rule(r) for r in rules],
    )
    return ClaimNode(name="n1", devices=found)


def _taints(node: ClaimNode) -> dict[str, tuple[Taint, ...]]:
    return {d.name: d.taints for d in node.devices.devices if d.taints}


def test_a_rule_taints_the_devices_its_selector_picks() -> None:
    by_device = taint_rule_obj("one", selector={"driver": DRIVER, "device": "gpu-1"})
    assert _taints(_node(by_device)) == {"gpu-1": (MAINTENANCE,)}
    every = taint_rule_obj("all", selector={})
    assert set(_taints(_node(every))) == {"gpu-0", "gpu-1", "gpu-2", "gpu-3"}
    assert _taints(_node(taint_rule_obj("none", selector=None))) == {}
    other_pool = taint_rule_obj("other", selector={"pool": "n2"})
    assert _taints(_node(other_pool)) == {}
    informational = taint_rule_obj("info", effect="None", selector={})
    assert _taints(_node(informational)) == {}


def test_tainted_devices_are_left_unless_the_request_tolerates_the_taint() -> None:
    rules = [
        taint_rule_obj(f"r{g}", selector={"device": f"gpu-{g}"}, effect="NoExecute")
        for g in range(3)
    ]
    node = _node(*rules)
    alloc = allocator()
    decision = alloc.place(pod("ns/p", claim("c", request("g"))), [node], Usage())
    assert device_names(decision) == ["gpu-3"]
    two = alloc.place(pod("ns/q", claim("d", request("g", 2))), [node], Usage())
    assert two.reasons == ("claim ns/d request g: 1 of 2 devices tolerate their taints on node n1",)
    toleration = {"key": "example.com/maintenance", "operator": "Exists"}
    tolerant = claim("e", request("g", 2, tolerations=[toleration]))
    assert device_names(alloc.place(pod("ns/r", tolerant), [node], Usage())) == [
        "gpu-0",
        "gpu-1",
    ]


def test_a_malformed_rule_names_its_field() -> None:
    bad = taint_rule_obj("bad", effect="Evict", selector={})
    with pytest.raises(SpecError, match=r"DeviceTaintRule bad.*spec\.taint\.effect"):
        parse_taint_rule(bad)
    keyless = taint_rule_obj("keyless", selector={})
    del keyless["spec"]["taint"]["key"]
    with pytest.raises(SpecError, match=r"DeviceTaintRule keyless.*spec\.taint\.key"):
        parse_taint_rule(keyless)
