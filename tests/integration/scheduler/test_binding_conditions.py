"""Devices with binding conditions (DRADeviceBindingConditions, beta and on since 1.36) against
the fake API server: the claim is written with the conditions and `allocationTimestamp`, the pod
is bound only once its devices' conditions are True in the claim's `status.devices` (what the
driver's controller writes once it has attached them), and a failure condition or the timeout
undoes the claim's writes instead of binding."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from typing import Any, cast

import pytest
from kubernetes import client

from scheduler.claims.decision import ClaimAllocation
from scheduler.claims.model import AllocatedDevice, Allocation, DeviceId
from scheduler.claims.parse import parse_claim
from scheduler.config import load_config
from scheduler.kubeapi.client import KubeClient
from scheduler.kubeapi.resourceclaims import ClaimApi
from scheduler.runtime.binding.claimbind import ConditionWait, PodRef, bind_with_claims
from tests.builders.claimcluster import NS, PROTECTION, claim_of, claim_pod, gpu_claim
from tests.builders.claims import class_obj, gpu_device, shared_slice_obj
from tests.builders.scheduler import create_pod, gpu_node, node_of, running
from tests.builders.wait import wait_for

POD = PodRef(namespace=NS, name="p1", uid="uid-p1")
FABRIC = "fabric.example.com"
ATTACHED, FAILED = "Attached", "AttachFailed"


@pytest.fixture
def claims_api(fake_api: Any) -> Iterator[ClaimApi]:
    kube = KubeClient(fake_api.api_client(), "test", f"t-{uuid.uuid4().hex[:6]}")
    yield ClaimApi(kube)
    kube.close()


def _decided(fake: Any, name: str) -> ClaimAllocation:
    """The claim as read, with the allocation decided: fabric device gpu-7, which must be
    attached before the pod may run."""
    result = AllocatedDevice(
        request="gpus",
        id=DeviceId(FABRIC, "fabric", "gpu-7"),
        binding_conditions=(ATTACHED,),
        binding_failure_conditions=(FAILED,),
    )
    allocation = Allocation(devices=(result,), node="n1")
    return ClaimAllocation(claim=parse_claim(claim_of(fake, name)), allocation=allocation)


def _report(fake: Any, claim: str, kind: str, status: str = "True") -> None:
    """What the driver's controller writes: the device's condition in `status.devices`."""
    api = fake.api_client()
    custom = client.CustomObjectsApi(api)
    group = ("resource.k8s.io", "v1", NS, "resourceclaims")
    try:
        body = cast("dict[str, Any]", custom.get_namespaced_custom_object(*group, claim))
        condition = {"type": kind, "status": status, "reason": "Driver", "message": kind,
                     "lastTransitionTime": "2026-12-05T12:00:00Z"}  # fmt: skip
        body["status"]["devices"] = [
            {"driver": FABRIC, "pool": "fabric", "device": "gpu-7", "conditions": [condition]}
        ]
        custom.replace_namespaced_custom_object_status(*group, claim, body)
    finally:
        api.close()


class _Controller:
    """A `ConditionWait.pause` that plays the driver's controller: at its `at`th pause it
    reports `kind` on the claim; it counts the pauses and the binds seen meanwhile."""

    def __init__(self, fake: Any, claim: str, kind: str | None, at: int = 2) -> None:
        self.fake, self.claim, self.kind, self.at = fake, claim, kind, at
        self.pauses = 0

    def __call__(self, _seconds: float) -> bool:
        self.pauses += 1
        if self.kind is not None and self.pauses == self.at:
            _report(self.fake, self.claim, self.kind)
        return False


def test_the_pod_is_bound_once_its_devices_binding_conditions_are_true(fake_api, claims_api):
    fake_api.put_object("resourceclaims", gpu_claim("c", 1))
    controller = _Controller(fake_api, "c", ATTACHED)
    bound: list[int] = []

    def bind() -> str:
        bound.append(controller.pauses)
        return "bound"

    wait = ConditionWait(poll_s=0.0, pause=controller)
    assert bind_with_claims(claims_api, POD, [_decided(fake_api, "c")], bind, None, None, wait) == (
        "bound"
    )
    assert bound == [2]  # after the controller reported the device attached, not before
    allocation = claim_of(fake_api, "c")["status"]["allocation"]
    assert allocation["devices"]["results"][0]["bindingConditions"] == [ATTACHED]
    assert allocation["devices"]["results"][0]["bindingFailureConditions"] == [FAILED]
    assert allocation["allocationTimestamp"]


def test_a_failure_condition_undoes_the_claim_and_never_binds(fake_api, claims_api):
    fake_api.put_object("resourceclaims", gpu_claim("c", 1))
    wait = ConditionWait(poll_s=0.0, pause=_Controller(fake_api, "c", FAILED, at=1))

    def bind() -> str:
        raise AssertionError("the pod must not be bound")

    outcome = bind_with_claims(claims_api, POD, [_decided(fake_api, "c")], bind, None, None, wait)
    assert outcome == "binding-failed"
    claim = claim_of(fake_api, "c")
    status = claim.get("status") or {}
    assert not status.get("allocation")
    assert not status.get("devices")  # deallocated as kube-scheduler does: statuses go too
    assert not status.get("reservedFor")
    assert PROTECTION not in (claim["metadata"].get("finalizers") or ())


def test_the_timeout_undoes_the_claim(fake_api, claims_api):
    fake_api.put_object("resourceclaims", gpu_claim("c", 1))
    ticks = iter(range(1000))
    wait = ConditionWait(
        timeout_s=3, poll_s=0.0, pause=_Controller(fake_api, "c", None), clock=lambda: next(ticks)
    )
    outcome = bind_with_claims(
        claims_api, POD, [_decided(fake_api, "c")], lambda: "bound", None, None, wait
    )
    assert outcome == "binding-timeout"
    assert not (claim_of(fake_api, "c").get("status") or {}).get("allocation")


def _fabric_cluster(fake_api: Any) -> None:
    """n1, and one fabric device (gpu-7, of no node) that must be `Attached` before use."""
    gpu_node(fake_api, "n1", gpus=0)
    fake_api.put_object(
        "deviceclasses", class_obj("gpu.gputopo.io", f'device.driver == "{FABRIC}"')
    )
    device = gpu_device(7)
    device.update(bindingConditions=[ATTACHED], bindingFailureConditions=[FAILED])
    fabric = shared_slice_obj("fabric", "fabric", [device], driver=FABRIC)
    api = fake_api.api_client()
    try:
        client.CustomObjectsApi(api).create_cluster_custom_object(
            "resource.k8s.io", "v1", "resourceslices", fabric
        )
    finally:
        api.close()


def test_the_configured_binding_timeout_undoes_the_claim_end_to_end(fake_api, core_v1):
    """`bindingTimeoutSeconds: 1`: the device is never attached; the bind gives up after a
    second, the claim is deallocated, and the pod stays unbound (tried again)."""
    _fabric_cluster(fake_api)
    fake_api.put_object("resourceclaims", gpu_claim("c", 1))
    config = dataclasses.replace(load_config(None), binding_timeout_seconds=1)
    with running(fake_api, config=config) as rt:
        create_pod(core_v1, claim_pod("p1", "c"))
        wait_for(
            lambda: rt.metrics.registry.get_sample_value(
                "gputopo_scheduler_binds_total", {"result": "binding-timeout"}
            ),
            10,
            "a bind that timed out",
        )
    assert node_of(fake_api, "p1") is None
    writes = fake_api.requests_matching("PUT", r"/resourceclaims/c/status$")
    allocated = [bool((w.body.get("status") or {}).get("allocation")) for w in writes]
    assert allocated[:2] == [True, False]  # allocated, then undone at the timeout


def test_the_scheduler_binds_a_pod_once_its_fabric_device_is_attached(fake_api, core_v1):
    """End to end: the only device with room waits for `Attached`; the pod stays unbound while
    the claim is allocated and reserved, and is bound once the condition is True."""
    _fabric_cluster(fake_api)
    fake_api.put_object("resourceclaims", gpu_claim("c", 1))
    with running(fake_api):
        create_pod(core_v1, claim_pod("p1", "c"))
        wait_for(
            lambda: (claim_of(fake_api, "c").get("status") or {}).get("reservedFor"),
            5,
            "the claim allocated and reserved",
        )
        assert node_of(fake_api, "p1") is None  # waiting for the device to be attached
        _report(fake_api, "c", ATTACHED)
        wait_for(lambda: node_of(fake_api, "p1"), 5, "p1 bound once gpu-7 is attached")
    results = claim_of(fake_api, "c")["status"]["allocation"]["devices"]["results"]
    assert [r["device"] for r in results] == ["gpu-7"]
