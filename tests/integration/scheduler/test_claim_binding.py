"""A bind's claim writes against the fake API server when the claim changed since the decision:
allocated by someone else, deallocated, or written meanwhile; the bind does not happen and what
was written is taken back."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from scheduler.claims.decision import ClaimAllocation
from scheduler.claims.model import AllocatedDevice, Allocation, ClaimKey, DeviceId
from scheduler.claims.parse import parse_claim
from scheduler.kubeapi.client import KubeClient
from scheduler.kubeapi.resourceclaims import ClaimApi
from scheduler.runtime.binding.claimbind import GroupRef, PodRef, bind_with_claims
from tests.builders.claimcluster import NS, PROTECTION, allocated_elsewhere, claim_of, gpu_claim

POD = PodRef(namespace=NS, name="p1", uid="uid-p1")


@pytest.fixture
def claims_api(fake_api) -> Iterator[ClaimApi]:
    kube = KubeClient(fake_api.api_client(), "test", f"t-{uuid.uuid4().hex[:6]}")
    yield ClaimApi(kube)
    kube.close()


def _decided(fake, name: str, *, new: bool) -> ClaimAllocation:
    """The claim as the scheduler read it, with the allocation it decided (gpu-7 on n1)."""
    result = AllocatedDevice(request="gpus", id=DeviceId("gpu.gputopo.io", "n1", "gpu-7"))
    allocation = Allocation(devices=(result,), node="n1")
    return ClaimAllocation(claim=parse_claim(claim_of(fake, name)), allocation=allocation, new=new)


def _never_bound() -> str:
    raise AssertionError("the pod must not be bound")


def test_a_claim_allocated_by_someone_else_meanwhile_fails_the_bind_untouched(fake_api, claims_api):
    fake_api.put_object("resourceclaims", gpu_claim("c", 1))
    decided = _decided(fake_api, "c", new=True)
    allocated_elsewhere(fake_api, "c", "n1", [3])  # kube-scheduler was quicker
    fake_api.clear_requests()
    assert bind_with_claims(claims_api, POD, [decided], _never_bound) == "conflict"
    assert fake_api.requests_matching("PUT") == []
    assert [
        r["device"] for r in claim_of(fake_api, "c")["status"]["allocation"]["devices"]["results"]
    ] == ["gpu-3"]


def test_a_shared_claim_deallocated_meanwhile_fails_the_bind(fake_api, claims_api):
    allocated_elsewhere(fake_api, "c", "n1", [7])
    decided = _decided(fake_api, "c", new=False)
    fake_api.put_object("resourceclaims", gpu_claim("c", 1))  # deallocated by its controller
    assert bind_with_claims(claims_api, POD, [decided], _never_bound) == "conflict"
    assert "status" not in claim_of(fake_api, "c") or not claim_of(fake_api, "c")["status"]


def test_a_stale_allocation_write_takes_its_finalizer_back(fake_api, claims_api):
    fake_api.put_object("resourceclaims", gpu_claim("c", 1))
    decided = _decided(fake_api, "c", new=True)
    fake_api.fail_next(1, 409, r"/resourceclaims/c/status$", "PUT")
    assert bind_with_claims(claims_api, POD, [decided], _never_bound) == "conflict"
    finalizers = [
        PROTECTION in (w.body["metadata"].get("finalizers") or ())
        for w in fake_api.requests_matching("PUT", r"/resourceclaims/c$")
    ]
    assert finalizers == [True, False]
    assert PROTECTION not in (claim_of(fake_api, "c")["metadata"].get("finalizers") or ())


def test_a_bound_pod_is_reserved_on_every_claim_in_order(fake_api, claims_api):
    fake_api.put_object("resourceclaims", gpu_claim("a", 1))
    allocated_elsewhere(fake_api, "b", "n1", [5])
    made = [_decided(fake_api, "a", new=True), _decided(fake_api, "b", new=False)]
    assert bind_with_claims(claims_api, POD, made, lambda: "bound") == "bound"
    assert [r["name"] for r in claim_of(fake_api, "a")["status"]["reservedFor"]] == ["p1"]
    assert [r["name"] for r in claim_of(fake_api, "b")["status"]["reservedFor"]] == ["b-pod", "p1"]
    paths = [r.path.rsplit("/resourceclaims/", 1)[1] for r in fake_api.requests_matching("PUT")]
    assert paths == ["a", "a/status", "b/status"]


GROUP = GroupRef(name="g", uid="uid-g", claims=frozenset({ClaimKey(NS, "shared")}))


def test_a_group_claim_is_reserved_for_the_podgroup_and_a_failed_bind_takes_it_back(
    fake_api, claims_api
):
    fake_api.put_object("resourceclaims", gpu_claim("shared", 1))
    fake_api.put_object("resourceclaims", gpu_claim("own", 1))
    made = [_decided(fake_api, "shared", new=True), _decided(fake_api, "own", new=True)]
    seen: list[list[dict[str, str]]] = []

    def refused() -> str:
        seen.append(claim_of(fake_api, "shared")["status"]["reservedFor"])
        return "conflict"

    assert bind_with_claims(claims_api, POD, made, refused, GROUP) == "conflict"
    assert seen == [[GROUP.consumer]]
    assert GROUP.consumer["apiGroup"] == "scheduling.k8s.io"
    assert GROUP.consumer["resource"] == "podgroups"
    assert not (claim_of(fake_api, "shared").get("status") or {}).get("allocation")
    assert not (claim_of(fake_api, "own").get("status") or {}).get("allocation")


def test_a_member_finding_its_group_reserved_writes_nothing_and_undoes_nothing(
    fake_api, claims_api
):
    allocated_elsewhere(fake_api, "shared", "n1", [7])
    claim = claim_of(fake_api, "shared")
    claim["status"]["reservedFor"] = [GROUP.consumer]
    fake_api.put_object("resourceclaims", claim)
    decided = _decided(fake_api, "shared", new=False)
    fake_api.clear_requests()
    assert bind_with_claims(claims_api, POD, [decided], lambda: "conflict", GROUP) == "conflict"
    assert fake_api.requests_matching("PUT") == []
    assert claim_of(fake_api, "shared")["status"]["reservedFor"] == [GROUP.consumer]
