"""PodGroup-level ResourceClaims (DRAWorkloadResourceClaims) against the fake API server: the
group's claim is allocated once for the whole gang, reserved for the PodGroup (not its pods),
and the gang binds all or none of it, the group's claim included."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.builders.claimcluster import (
    NS,
    allocated_elsewhere,
    claim_of,
    devices_of,
    dra_cluster,
    gpu_claim,
)
from tests.builders.claims import claim_obj, class_obj, shared_slice_obj
from tests.builders.scheduler import bound_pods, create_pod, running, scheduled_condition, wait_for
from tests.builders.workloads import (
    PODGROUPS,
    create_upstream_podgroup,
    member_pod,
    upstream_podgroup,
)

pytestmark = pytest.mark.timeout(60)

NVL = {"name": "nvl", "resourceClaimName": "shared"}
FABRIC = "fabric.example.com"


@pytest.fixture
def upstream(fake_api):
    fake_api.serve_workload_api(("v1beta1", "v1alpha3"))
    return fake_api


def _group(custom, name: str, members: int | None, *claims: dict[str, str]) -> dict[str, Any]:
    body = upstream_podgroup(name, members, resourceClaims=list(claims))
    create_upstream_podgroup(custom, body)
    return body


def _member(core, name: str, group: str, *claims: dict[str, str]) -> None:
    create_pod(core, member_pod(name, group, gpus=0, resourceClaims=list(claims)))


def _uid(fake, group: str) -> str:
    stored = fake.get_object(PODGROUPS, group, NS) or {}
    return str(stored["metadata"]["uid"])


def test_a_group_claim_is_allocated_once_and_reserved_for_the_podgroup(
    upstream, core_v1, custom_objects
):
    dra_cluster(upstream, ("n1", "n2"))
    upstream.put_object("resourceclaims", gpu_claim("shared", 2))
    with running(upstream):
        _group(custom_objects, "g", 3, NVL)
        for i in range(3):
            _member(core_v1, f"g-{i}", "g", NVL)
        wait_for(lambda: len(bound_pods(upstream)) == 3, 10, "the gang bound")
    nodes = {bound_pods(upstream)[f"g-{i}"] for i in range(3)}
    reserved = claim_of(upstream, "shared")["status"]["reservedFor"]
    assert reserved == [
        {
            "apiGroup": "scheduling.k8s.io",
            "resource": "podgroups",
            "name": "g",
            "uid": _uid(upstream, "g"),
        }
    ]
    assert len(devices_of(upstream, "shared")) == 2
    assert len(nodes) == 1  # the claim's devices are on one node: every member is there
    writes = upstream.requests_matching("PUT", r"/resourceclaims/shared/status$")
    assert len(writes) == 1  # allocated and reserved once, for the group
    reads = upstream.requests_matching("GET", r"/resourceclaims/shared$")
    assert len(reads) == 3  # one per member, in order: none met the claim half written


def test_members_use_their_own_claims_beside_the_groups(upstream, core_v1, custom_objects):
    dra_cluster(upstream, ("n1",))
    upstream.put_object("resourceclaims", gpu_claim("shared", 2))
    for i in range(2):
        upstream.put_object("resourceclaims", gpu_claim(f"own-{i}", 2))
    with running(upstream):
        _group(custom_objects, "g", 2, NVL)
        for i in range(2):
            _member(core_v1, f"g-{i}", "g", NVL, {"name": "own", "resourceClaimName": f"own-{i}"})
        wait_for(lambda: len(bound_pods(upstream)) == 2, 10, "the gang bound")
    taken = [*devices_of(upstream, "shared"), *devices_of(upstream, "own-0")]
    taken += devices_of(upstream, "own-1")
    assert len(taken) == len(set(taken)) == 6  # nothing allocated twice
    for i in range(2):
        reserved = claim_of(upstream, f"own-{i}")["status"]["reservedFor"]
        assert [(r["resource"], r["name"]) for r in reserved] == [("pods", f"g-{i}")]


def test_a_gang_that_does_not_fit_whole_leaves_the_group_claim_unallocated(
    upstream, core_v1, custom_objects
):
    dra_cluster(upstream, ("n1",))
    allocated_elsewhere(upstream, "theirs", "n1", [0, 1, 2, 3])  # 4 GPUs left for 2 + 2 x 2
    upstream.put_object("resourceclaims", gpu_claim("shared", 2))
    for i in range(2):
        upstream.put_object("resourceclaims", gpu_claim(f"own-{i}", 2))
    with running(upstream) as rt:
        _group(custom_objects, "g", 2, NVL)
        for i in range(2):
            _member(core_v1, f"g-{i}", "g", NVL, {"name": "own", "resourceClaimName": f"own-{i}"})
        wait_for(lambda: scheduled_condition(upstream, "g-0"), 5, "the gang marked waiting")
        time.sleep(0.5)  # tried again meanwhile: still none of it
        rt.reporter.flush()
    assert bound_pods(upstream) == {}
    assert devices_of(upstream, "shared") == []
    assert upstream.requests_matching("PUT", r"/resourceclaims/") == []


def test_a_group_claim_made_from_a_template_is_used_once_the_controller_made_it(
    upstream, core_v1, custom_objects
):
    dra_cluster(upstream, ("n1",))
    entry = {"name": "nvl", "resourceClaimTemplateName": "two-gpus"}
    with running(upstream):
        _group(custom_objects, "g", None, entry)  # basic: members placed one by one
        for i in range(2):
            _member(core_v1, f"g-{i}", "g", entry)
        wait_for(lambda: scheduled_condition(upstream, "g-0"), 5, "g-0 waits for its claim")
        made = gpu_claim("g-nvl-abcde", 2)
        owner = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "name": "g"}
        owner |= {"uid": _uid(upstream, "g"), "controller": True}
        made["metadata"]["ownerReferences"] = [owner]
        upstream.put_object("resourceclaims", made)  # what the resourceclaim controller does
        statuses = [{"name": "nvl", "resourceClaimName": "g-nvl-abcde"}]
        for i in range(2):
            pod = upstream.get_object("pods", f"g-{i}", NS) or {}
            pod.setdefault("status", {})["resourceClaimStatuses"] = statuses
            upstream.put_object("pods", pod)
        wait_for(lambda: len(bound_pods(upstream)) == 2, 10, "both members bound")
    reserved = claim_of(upstream, "g-nvl-abcde")["status"]["reservedFor"]
    assert [(r["resource"], r["name"]) for r in reserved] == [("podgroups", "g")]
    assert len(devices_of(upstream, "g-nvl-abcde")) == 2


def test_a_group_claim_on_a_fabric_channel_reaches_members_on_two_nodes(
    upstream, core_v1, custom_objects
):
    """The group's claim is a channel of an `allNodes` slice (no node's own device), and each
    member's own claim takes all eight GPUs of a node: the members run on two nodes, and the
    group's claim is written with no nodeSelector, as Kubernetes' allocator writes it."""
    dra_cluster(upstream, ("n1", "n2"))
    upstream.put_object("deviceclasses", class_obj(FABRIC, f'device.driver == "{FABRIC}"'))
    channel = {"name": "channel-0", "attributes": {"type": {"string": "channel"}}}
    fabric = shared_slice_obj("fabric-0", "fabric", [channel], driver=FABRIC)
    upstream.put_object("resourceslices", fabric)
    ask = claim_obj("channel", {"name": "ch", "exactly": {"deviceClassName": FABRIC}}, namespace=NS)
    upstream.put_object("resourceclaims", ask)
    for i in range(2):
        upstream.put_object("resourceclaims", gpu_claim(f"own-{i}", 8))
    entry = {"name": "ch", "resourceClaimName": "channel"}
    with running(upstream):
        _group(custom_objects, "g", 2, entry)
        for i in range(2):
            _member(core_v1, f"g-{i}", "g", entry, {"name": "own", "resourceClaimName": f"own-{i}"})
        wait_for(lambda: len(bound_pods(upstream)) == 2, 10, "the gang bound")
    assert sorted(bound_pods(upstream).values()) == ["n1", "n2"]
    allocation = claim_of(upstream, "channel")["status"]["allocation"]
    assert [r["device"] for r in allocation["devices"]["results"]] == ["channel-0"]
    assert "nodeSelector" not in allocation
    for i in range(2):
        own = claim_of(upstream, f"own-{i}")["status"]["allocation"]
        node = bound_pods(upstream)[f"g-{i}"]
        assert own["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [node]
