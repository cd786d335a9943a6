"""A ResourceClaim's status as the fake API server checks and authorizes it, as kube-apiserver
1.36+ does: `reservedFor` needs an allocation, an allocation is never changed in place, and a
write that allocates or reserves is also authorized on `resourceclaims/binding`."""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException

from tests.builders.claimcluster import NS, gpu_claim
from tests.builders.dra import allocation_status

GROUP, VERSION, PLURAL = "resource.k8s.io", "v1", "resourceclaims"


def _write_status(custom_objects, fake_api, name: str, status: dict) -> None:
    claim = fake_api.get_object(PLURAL, name, NS)
    claim["status"] = status
    custom_objects.replace_namespaced_custom_object_status(GROUP, VERSION, NS, PLURAL, name, claim)


def _allocated(devices: list[str], pods: list[str]) -> dict:
    taken = [("gpus", d) for d in devices]
    return allocation_status("n1", taken, [(p, f"uid-{p}") for p in pods])["status"]


def _binding_checks(fake_api) -> list[str]:
    return [c.verb for c in fake_api.authorization_checks if c.rbac_resource == f"{PLURAL}/binding"]


def test_allocating_and_reserving_is_authorized_on_the_binding_subresource(
    fake_api, custom_objects
):
    fake_api.put_object(PLURAL, gpu_claim("c", 1))
    _write_status(custom_objects, fake_api, "c", _allocated(["gpu-0"], ["p"]))
    assert _binding_checks(fake_api) == ["update"]
    status = fake_api.get_object(PLURAL, "c", NS)["status"]
    _write_status(custom_objects, fake_api, "c", dict(status))  # changes neither field
    assert _binding_checks(fake_api) == ["update"]


@pytest.mark.parametrize(
    ("before", "after", "problem"),
    [
        pytest.param(
            {},
            {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]},
            "may not be specified when `allocated` is not set",
            id="reserved without an allocation",
        ),
        pytest.param(
            _allocated(["gpu-0"], []),
            _allocated(["gpu-1"], []),
            "status.allocation: Invalid value: field is immutable",
            id="allocation changed in place",
        ),
        pytest.param(
            _allocated(["gpu-0"], []),
            _allocated(["gpu-0"], ["p", "p"]),
            "status.reservedFor: Duplicate value",
            id="a consumer twice",
        ),
    ],
)
def test_an_invalid_status_is_refused(fake_api, custom_objects, before, after, problem):
    claim = gpu_claim("c", 1)
    if before:
        claim["status"] = before
    fake_api.put_object(PLURAL, claim)
    with pytest.raises(ApiException, match="422") as raised:
        _write_status(custom_objects, fake_api, "c", after)
    assert problem in str(raised.value.body)


def test_clearing_an_allocation_no_one_holds_is_allowed(fake_api, custom_objects):
    claim = gpu_claim("c", 1)
    claim["status"] = _allocated(["gpu-0"], [])
    fake_api.put_object(PLURAL, claim)
    _write_status(custom_objects, fake_api, "c", {})
    assert "allocation" not in (fake_api.get_object(PLURAL, "c", NS).get("status") or {})
