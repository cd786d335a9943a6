"""The claim book: objects read at intake (a malformed one skipped, naming it), what is
allocated by whom, a node's view kept while nothing it is built from changes, and the claims a
pod uses."""

from __future__ import annotations

import logging

import pytest

from scheduler.claims.decision import PodClaims
from scheduler.claims.model import ClaimKey
from scheduler.runtime.claims.book import CLAIMS, CLASSES, SLICES, ClaimBook
from scheduler.runtime.claims.podrefs import claim_refs
from tests.builders.claims import (
    claim_obj,
    class_obj,
    gpu_device,
    island_devices,
    request,
    slice_obj,
    two_islands,
)
from tests.builders.dra import allocation_status


def _book() -> ClaimBook:
    book = ClaimBook()
    book.replace(CLASSES, [class_obj()])
    book.replace(SLICES, [slice_obj("n1", island_devices())])
    return book


def test_a_malformed_claim_is_skipped_and_its_pods_are_told_why(caplog):
    book = _book()
    bad = claim_obj("bad", request("gpus", 1))
    bad["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] = "Most"
    with caplog.at_level(logging.WARNING):
        book.replace(CLAIMS, [bad, claim_obj("good", request("gpus", 1))])
    assert "ResourceClaim ns/bad" in caplog.text
    assert "allocationMode" in caplog.text
    assert set(book.claims) == {ClaimKey("ns", "good")}
    entry = {"name": "a", "resourceClaimName": "bad"}
    pod = {"metadata": {"namespace": "ns"}, "spec": {"resourceClaims": [entry]}}
    reason = book.pod_claims("ns/p", pod)
    assert isinstance(reason, str)
    assert "ns/bad cannot be used" in reason


def test_a_malformed_slice_is_skipped_and_the_others_still_serve(caplog):
    book = _book()
    broken = slice_obj("n2", [gpu_device(0)])
    del broken["spec"]["pool"]
    with caplog.at_level(logging.WARNING):
        book.apply(SLICES, "ADDED", broken)
    assert "ResourceSlice n2-gpu.gputopo.io" in caplog.text
    assert len(book.node("n1", {}, None, None).devices.devices) == 8
    assert book.node("n2", {}, None, None).devices.devices == ()


def test_usage_counts_every_claims_allocation_whoever_made_it():
    book = _book()
    theirs = claim_obj("theirs", request("gpus", 2))
    theirs.update(allocation_status("n1", [("gpus", "gpu-0"), ("gpus", "gpu-5")], [("x", "u")]))
    book.replace(CLAIMS, [theirs])
    assert {d.device for d in book.usage().exclusive} == {"gpu-0", "gpu-5"}
    book.apply(CLAIMS, "DELETED", theirs)
    assert book.usage().exclusive == set()


def test_a_node_view_is_kept_until_its_slices_inventory_or_state_change():
    book = _book()
    inventory = two_islands()
    first = book.node("n1", {}, inventory, None)
    book.apply(SLICES, "ADDED", slice_obj("n2", [gpu_device(0)]))  # another node's slice
    assert book.node("n1", {}, inventory, None) is first
    assert first.gpus is not None
    assert book.node("n1", {}, two_islands(), None) is not first
    book.apply(SLICES, "MODIFIED", slice_obj("n1", island_devices()[:4]))
    assert len(book.node("n1", {}, inventory, None).devices.devices) == 4


@pytest.mark.parametrize(
    ("entries", "statuses", "expected"),
    [
        pytest.param([{"name": "a", "resourceClaimName": "c"}], [], ["c"], id="direct"),
        pytest.param(
            [{"name": "a", "resourceClaimTemplateName": "t"}],
            [{"name": "a", "resourceClaimName": "p-a-xyz"}],
            ["p-a-xyz"],
            id="made from a template",
        ),
        pytest.param(
            [{"name": "a", "resourceClaimTemplateName": "t"}],
            [{"name": "a"}],
            [],
            id="a template whose claim is not needed",
        ),
    ],
)
def test_a_pods_claims_are_named_directly_or_by_its_status(entries, statuses, expected):
    pod = {
        "metadata": {"namespace": "ns", "name": "p"},
        "spec": {"resourceClaims": entries},
        "status": {"resourceClaimStatuses": statuses},
    }
    refs = claim_refs(pod)
    assert refs.waiting is None
    assert [k.name for k in refs.keys] == expected


def test_a_pod_waits_for_the_claim_of_its_template_and_then_gets_it():
    book = _book()
    entry = {"name": "a", "resourceClaimTemplateName": "t"}
    meta = {"namespace": "ns", "name": "p", "uid": "u1"}
    pod = {"metadata": meta, "spec": {"resourceClaims": [entry]}}
    waiting = book.pod_claims("ns/p", pod)
    assert isinstance(waiting, str)
    assert "resourceclaim controller" in waiting
    pod["status"] = {"resourceClaimStatuses": [{"name": "a", "resourceClaimName": "p-a"}]}
    assert book.pod_claims("ns/p", pod) == 'resourceclaim "ns/p-a" not found'
    made = claim_obj("p-a", request("gpus", 1))
    book.apply(CLAIMS, "ADDED", made)
    assert "was not created for the pod" in str(book.pod_claims("ns/p", pod))
    made["metadata"]["ownerReferences"] = [{"kind": "Pod", "name": "p", "uid": "u1"}]
    book.apply(CLAIMS, "MODIFIED", made)
    found = book.pod_claims("ns/p", pod)
    assert isinstance(found, PodClaims)
    assert [c.key.name for c in found.claims] == ["p-a"]


def test_a_pod_holds_the_whole_gpus_of_its_allocated_claims_and_their_shares():
    book = ClaimBook()
    book.replace(CLASSES, [class_obj()])
    shared = gpu_device(4, shared=True, capacity={"memory": {"value": "80Gi"}})
    book.replace(SLICES, [slice_obj("n1", [*island_devices()[:4], shared])])
    mine = claim_obj("mine", request("gpus", 2))
    mine.update(allocation_status("n1", [("gpus", "gpu-2"), ("gpus", "gpu-3")], [("p", "u")]))
    part = claim_obj("part", request("gpus", 1))
    part.update(allocation_status("n1", [("gpus", "gpu-4")], [("p", "u")]))
    result = part["status"]["allocation"]["devices"]["results"][0]
    result.update(shareID="s1", consumedCapacity={"memory": "20Gi"})
    book.replace(CLAIMS, [mine, part, claim_obj("later", request("gpus", 1))])
    entries = [{"name": n, "resourceClaimName": n} for n in ("mine", "part", "later", "mine")]
    pod = {"metadata": {"namespace": "ns"}, "spec": {"resourceClaims": entries}}
    held = book.charge(pod)
    assert sorted(d.device for d in held.gpus) == ["gpu-2", "gpu-3"]
    assert [(s.device.device, s.milli, s.memory) for s in held.shares] == [("gpu-4", 250, 20 << 30)]


def test_a_claim_is_freed_once_every_pod_it_is_reserved_for_leaves():
    book = _book()
    objs = []
    for name, gpu, pods in (
        ("alone", 0, [("v", "uid-v")]),
        ("both", 1, [("v", "uid-v"), ("w", "uid-w")]),
        ("gone", 2, [("x", "uid-x")]),
    ):
        obj = claim_obj(name, request("gpus", 1))
        obj.update(allocation_status("n1", [("gpus", f"gpu-{gpu}")], pods))
        objs.append(obj)
    book.replace(CLAIMS, objs)
    freed = book.freed_by({"uid-v"}, alive={"uid-v", "uid-w"})
    assert freed == {ClaimKey("ns", "alone"), ClaimKey("ns", "gone")}
    assert book.freed_by(set(), alive={"uid-v", "uid-w", "uid-x"}) == set()
    usage = book.usage_without(freed)
    devices = {d.name: d for d in book.node("n1", {}, None, None).devices.devices}
    assert [usage.is_free(devices[f"gpu-{g}"]) for g in range(3)] == [True, False, True]
    assert not book.usage().is_free(devices["gpu-0"])
