"""Devices with binding conditions (DRADeviceBindingConditions, beta and on since 1.36) on a real
1.37 API server, beside the real kube-scheduler: each scheduler gets a device of its own on the
node that must be `Attached` before a pod using it is bound (a fabric-attached device, as the
driver's controller reports it in the claim's `status.devices`). Each allocates its pod's claim,
writes the conditions, and leaves the pod unbound until the test, playing the controller, reports
the device attached; then both bind. No kubelet plugin serves the driver, so the bound pods stay
ContainerCreating."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.builders.claims import gpu_device, slice_obj
from tests.builders.realk8s import Cluster, busybox_pod, wait_until

pytestmark = [pytest.mark.realk8s, pytest.mark.timeout(300)]

ATTACH = "attach.example.com"
WHO = {"theirs": None, "ours": "gputopo-scheduler"}
ATTACHED, FAILED = "Attached", "AttachFailed"


def _apply(cluster: Cluster, body: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(body))


def _slice(cluster: Cluster, who: str) -> dict[str, Any]:
    device = gpu_device(0, owner=who)
    device.update(bindingConditions=[ATTACHED], bindingFailureConditions=[FAILED])
    body = slice_obj(cluster.node, [device], driver=ATTACH, name=f"{who}-attach")
    body["spec"]["pool"]["name"] = who
    return body


def _claim(who: str) -> dict[str, Any]:
    selector = f'device.attributes["{ATTACH}"].owner == "{who}"'
    exactly = {"deviceClassName": ATTACH, "selectors": [{"cel": {"expression": selector}}]}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": who, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


def _pod(who: str) -> dict[str, Any]:
    body = busybox_pod(who, scheduler=WHO[who])
    body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": who}]
    body["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    return body


def _claim_status(cluster: Cluster, who: str) -> dict[str, Any]:
    found = json.loads(cluster.kubectl("get", "resourceclaim", who, "-o", "json"))
    return dict(found.get("status") or {})


def _report_attached(cluster: Cluster, who: str) -> None:
    """What the driver's controller writes once the device is attached."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    condition = {"type": ATTACHED, "status": "True", "reason": "Attached",
                 "message": "attached by the test", "lastTransitionTime": now}  # fmt: skip
    entry = {"driver": ATTACH, "pool": who, "device": "gpu-0", "conditions": [condition]}
    patch = json.dumps({"status": {"devices": [entry]}})
    cluster.kubectl(
        "patch", "resourceclaim", who, "--subresource=status", "--type=merge", "-p", patch
    )


def test_both_schedulers_bind_only_once_the_device_is_attached(cluster: Cluster, scheduler) -> None:
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": ATTACH},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{ATTACH}"'}}]},
    }
    found: dict[str, Any] = {}
    try:
        _apply(cluster, device_class)
        for who in WHO:
            _apply(cluster, _slice(cluster, who))
            _apply(cluster, _claim(who))
            _apply(cluster, _pod(who))
            wait_until(lambda who=who: _claim_status(cluster, who).get("reservedFor"), 90,
                       f"{who}'s claim allocated and reserved")  # fmt: skip
            time.sleep(6)  # longer than kube-scheduler's 5 s poll: an early bind would show
            allocation = _claim_status(cluster, who)["allocation"]
            found[who] = {
                "bound before": cluster.pod(who)["spec"].get("nodeName"),
                "conditions": allocation["devices"]["results"][0].get("bindingConditions"),
                "timestamp": bool(allocation.get("allocationTimestamp")),
            }
            _report_attached(cluster, who)
            wait_until(lambda who=who: cluster.pod(who)["spec"].get("nodeName"), 90,
                       f"{who} bound once attached")  # fmt: skip
        print(json.dumps(found, indent=1))  # shown with -s
        for who in WHO:
            assert found[who] == {"bound before": None, "conditions": [ATTACHED], "timestamp": True}
    finally:
        cluster.delete_pods(*WHO)
        cluster.kubectl("delete", "resourceclaims", *WHO, "--ignore-not-found")
        slices = [f"{who}-attach" for who in WHO]
        cluster.kubectl("delete", "resourceslices", *slices, "--ignore-not-found")
        cluster.kubectl("delete", "deviceclass", ATTACH, "--ignore-not-found")
