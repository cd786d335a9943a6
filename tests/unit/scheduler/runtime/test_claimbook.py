"""The claim book: objects read at intake (a malformed one skipped, naming it), what is
allocated by whom, a node's view kept while nothing it is built from changes, and the claims a
pod uses."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from agent.gpuset import GpuSelector
from scheduler.claims.decision import ClaimAllocation, PodClaims, PodDecision
from scheduler.claims.model import AllocatedDevice, Allocation, ClaimKey, DeviceId
from scheduler.claims.parse import parse_claim
from scheduler.placement import NodeState
from scheduler.runtime.claims.book import (
    CLAIMS,
    CLASSES,
    MAX_RESERVED,
    SLICES,
    ClaimBook,
    made_key,
)
from scheduler.runtime.claims.podrefs import claim_refs
from scheduler.runtime.cluster.groups import GroupClaim, GroupInfo
from tests.builders.claims import (
    DRIVER,
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


def test_a_claim_being_deleted_is_not_used():
    book = _book()
    going = claim_obj("going", request("gpus", 1))
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    book.replace(CLAIMS, [going])
    entry = {"name": "a", "resourceClaimName": "going"}
    pod = {"metadata": {"namespace": "ns", "uid": "u"}, "spec": {"resourceClaims": [entry]}}
    assert book.pod_claims("ns/p", pod) == 'resourceclaim "ns/going" is being deleted'


def _group(*claims: GroupClaim) -> GroupInfo:
    return GroupInfo(
        key="ns/g@scheduling.k8s.io", namespace="ns", name="g", uid="uid-g", obj={}, claims=claims
    )


def test_an_entry_equal_to_the_groups_claim_is_the_groups_and_others_the_pods():
    group = _group(
        GroupClaim(name="nvl", claim_name="shared"),
        GroupClaim(name="scratch", template_name="t"),
    )
    entries = [
        {"name": "nvl", "resourceClaimName": "shared"},
        {"name": "own", "resourceClaimName": "mine"},
        {"name": "scratch", "resourceClaimTemplateName": "t"},
        {"name": "same-claim-other-name", "resourceClaimName": "shared"},
    ]
    pod = {
        "metadata": {"namespace": "ns", "name": "p"},
        "spec": {"resourceClaims": entries},
        "status": {"resourceClaimStatuses": [{"name": "scratch", "resourceClaimName": "g-s-x"}]},
    }
    refs = claim_refs(pod, group.claims)
    assert [k.name for k in refs.keys] == ["shared", "mine", "g-s-x", "shared"]
    assert refs.for_group == {ClaimKey("ns", "shared"), ClaimKey("ns", "g-s-x")}
    assert claim_refs(pod).for_group == frozenset()


def test_a_group_claim_made_from_a_template_is_owned_by_the_podgroup_not_the_pod():
    book = _book()
    group = _group(GroupClaim(name="scratch", template_name="t"))
    entry = {"name": "scratch", "resourceClaimTemplateName": "t"}
    pod = {
        "metadata": {"namespace": "ns", "name": "p", "uid": "u1"},
        "spec": {"resourceClaims": [entry]},
        "status": {"resourceClaimStatuses": [{"name": "scratch", "resourceClaimName": "g-s"}]},
    }
    made = claim_obj("g-s", request("gpus", 1))
    made["metadata"]["ownerReferences"] = [{"kind": "Pod", "name": "p", "uid": "u1"}]
    book.apply(CLAIMS, "ADDED", made)
    assert "was not created for the pod" in str(book.pod_claims("ns/p", pod, group))
    made["metadata"]["ownerReferences"] = [{"kind": "PodGroup", "name": "g", "uid": "uid-g"}]
    book.apply(CLAIMS, "MODIFIED", made)
    found = book.pod_claims("ns/p", pod, group)
    assert isinstance(found, PodClaims)
    assert [c.key.name for c in found.claims] == ["g-s"]


def test_a_full_group_claim_still_serves_the_members_of_the_group_it_is_reserved_for():
    book = _book()
    full = claim_obj("shared", request("gpus", 1))
    consumers = [("g", "uid-g")] + [(f"p{i}", f"u{i}") for i in range(MAX_RESERVED - 1)]
    full.update(allocation_status("n1", [("gpus", "gpu-0")], consumers))
    book.apply(CLAIMS, "ADDED", full)
    entry = {"name": "nvl", "resourceClaimName": "shared"}
    pod = {"metadata": {"namespace": "ns", "uid": "new"}, "spec": {"resourceClaims": [entry]}}
    assert "reserved for 256 consumers" in str(book.pod_claims("ns/p", pod))
    found = book.pod_claims("ns/p", pod, _group(GroupClaim(name="nvl", claim_name="shared")))
    assert isinstance(found, PodClaims)


def test_a_node_view_orders_gpus_with_the_nodes_own_selector_and_decides_alike():
    """Placement's selector is shared by nodes of one layout; the claim view takes it (a map
    built apart makes its own from the same links: the same sets, a cold memo)."""
    book = _book()
    book.replace(
        CLAIMS, [claim_obj("theirs", request("gpus", 1)), claim_obj("pair", request("gpus", 2))]
    )
    inventory = two_islands()
    selector = GpuSelector(inventory.links, tuple(g.numa_node for g in inventory.gpus))
    state = NodeState.from_inventory("n1", inventory, allocatable={}, selector=selector)
    view = book.node("n1", {}, inventory, state)
    assert view.gpus is not None
    assert view.gpus.selector is selector
    apart = book.node("n1", {}, inventory, None)
    assert apart.gpus is not None
    assert apart.gpus.selector is not selector
    entry = {"name": "a", "resourceClaimName": "pair"}
    pod = {"metadata": {"namespace": "ns"}, "spec": {"resourceClaims": [entry]}}
    claims = book.pod_claims("ns/p", pod)
    assert isinstance(claims, PodClaims)
    usage = book.usage()
    with_own = book.allocator.on_node(claims, view, usage)
    with_apart = book.allocator.on_node(claims, apart, usage)
    assert isinstance(with_own, PodDecision)
    assert isinstance(with_apart, PodDecision)
    assert with_own.claims[0].allocation == with_apart.claims[0].allocation


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


def _assumed(book: ClaimBook, key: ClaimKey, claim: dict, *devices: str) -> None:
    """This scheduler's decision for `claim` (read as `key`): `devices` of n1, not yet written."""
    result = tuple(AllocatedDevice(request="gpus", id=DeviceId(DRIVER, "n1", d)) for d in devices)
    made = ClaimAllocation(
        claim=replace(parse_claim(claim), key=key),
        allocation=Allocation(devices=result, node="n1"),
        new=True,
    )
    book.assume(PodDecision(node="n1", claims=(made,)))


def test_its_own_allocation_read_written_leaves_usage_as_it_was():
    """Every claim this scheduler allocates comes back written: usage, which counted it when
    assumed, is kept (built again, it cost a claim pod 5 ms at 1,000 nodes in the end-to-end
    bench); a written allocation other than the assumed one is counted as written."""
    book = _book()
    mine = claim_obj("mine", request("gpus", 2))
    book.replace(CLAIMS, [mine])
    _assumed(book, ClaimKey("ns", "mine"), mine, "gpu-2", "gpu-3")
    usage = book.usage()
    written = {**mine, **allocation_status("n1", [("gpus", "gpu-2"), ("gpus", "gpu-3")], [])}
    book.apply(CLAIMS, "MODIFIED", written)
    assert book.usage() is usage
    assert {d.device for d in usage.exclusive} == {"gpu-2", "gpu-3"}
    other = claim_obj("other", request("gpus", 1))
    book.apply(CLAIMS, "ADDED", other)
    _assumed(book, ClaimKey("ns", "other"), other, "gpu-4")
    elsewhere = {**other, **allocation_status("n1", [("gpus", "gpu-6")], [])}
    book.apply(CLAIMS, "MODIFIED", elsewhere)  # someone else's write won
    assert {d.device for d in book.usage().exclusive} == {"gpu-2", "gpu-3", "gpu-6"}


def test_a_made_claim_read_allocated_before_its_bind_tells_the_book_is_counted_once():
    book = _book()
    made = made_key("ns", "p")
    body = claim_obj("p-extended-resources-x", request("gpus", 1))
    body["metadata"]["annotations"] = {"resource.kubernetes.io/extended-resource-claim": "true"}
    owner = {"kind": "Pod", "name": "p", "uid": "u1", "controller": True}
    body["metadata"]["ownerReferences"] = [owner]
    _assumed(book, made, body, "gpu-1")
    usage = book.usage()
    written = {**body, **allocation_status("n1", [("gpus", "gpu-1")], [("p", "u1")])}
    book.apply(CLAIMS, "ADDED", written)  # the watch is quicker than the bind's thread
    book.created(made, ClaimKey("ns", "p-extended-resources-x"))
    assert book.usage() is usage
    assert {d.device for d in book.usage().exclusive} == {"gpu-1"}
    book.apply(CLAIMS, "DELETED", written)
    assert book.usage().exclusive == set()
