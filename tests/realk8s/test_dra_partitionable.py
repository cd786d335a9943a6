"""Partitionable devices (DRAPartitionableDevices, on by default since 1.36) on a real 1.37 API
server, beside the real kube-scheduler: each scheduler gets a pool of its own on the node, a
GPU published whole and as two halves, with the GPU's shared counters (8 memory slices) in a
second slice, as a partitionable driver publishes them since 1.35. Each is given the same
three pods in turn: a half, the whole GPU, the other half. Both bind the halves, on different
devices, and leave the whole GPU's pod pending: its counters are taken. No kubelet plugin serves
the driver, so the bound pods stay ContainerCreating; the allocations are what is compared."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.builders.claims import counter_slice_obj, partition, slice_obj
from tests.builders.realk8s import Cluster, busybox_pod, wait_until

pytestmark = [pytest.mark.realk8s, pytest.mark.timeout(300)]

PARTS = "parts.example.com"
WHO = {"theirs": None, "ours": "gputopo-scheduler"}
SIZES = {"half-a": 4, "whole": 8, "half-b": 4}


def _apply(cluster: Cluster, body: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(body))


def _pool(cluster: Cluster, who: str) -> list[dict[str, Any]]:
    """`who`'s pool on the node: the devices' slice and the counters' slice."""
    devices = [partition(0, 8, 0), partition(0, 4, 0), partition(0, 4, 1)]
    for device in devices:
        device["attributes"]["owner"] = {"string": who}
    sets = {"gpu-0": {"slices": "8", "memory": "80Gi"}}
    bodies = [
        slice_obj(cluster.node, devices, count=2, driver=PARTS),
        counter_slice_obj(cluster.node, sets, driver=PARTS),
    ]
    for body, part in zip(bodies, ("parts", "counters"), strict=True):
        body["metadata"]["name"] = f"{who}-{part}"
        body["spec"]["pool"]["name"] = who
    return bodies


def _claim(who: str, name: str, size: int) -> dict[str, Any]:
    selector = (
        f'device.attributes["{PARTS}"].owner == "{who}" && '
        f'device.attributes["{PARTS}"].size == {size}'
    )
    exactly = {"deviceClassName": PARTS, "selectors": [{"cel": {"expression": selector}}]}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"{who}-{name}", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "part", "exactly": exactly}]}},
    }


def _pod(who: str, name: str) -> dict[str, Any]:
    body = busybox_pod(f"{who}-{name}", scheduler=WHO[who])
    claim = f"{who}-{name}"
    body["spec"]["resourceClaims"] = [{"name": "part", "resourceClaimName": claim}]
    body["spec"]["containers"][0]["resources"]["claims"] = [{"name": "part"}]
    return body


def _devices(cluster: Cluster, claim: str) -> list[str]:
    found = json.loads(cluster.kubectl("get", "resourceclaim", claim, "-o", "json"))
    allocation = (found.get("status") or {}).get("allocation") or {}
    return [r["device"] for r in (allocation.get("devices") or {}).get("results") or []]


def _unschedulable(cluster: Cluster, pod: str) -> str | None:
    """The pod's PodScheduled=False message, once a scheduler has written one."""
    for cond in (cluster.pod(pod).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return str(cond.get("message") or "")
    return None


def _wait_bound(cluster: Cluster, pod: str) -> None:
    wait_until(lambda: cluster.pod(pod)["spec"].get("nodeName"), 90, f"{pod} bound")


def _wait_refused(cluster: Cluster, pod: str) -> None:
    wait_until(lambda: _unschedulable(cluster, pod) is not None, 90, f"{pod} refused")


def test_both_schedulers_bind_the_halves_and_leave_the_whole_gpu_pending(
    cluster: Cluster, scheduler: object
) -> None:
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": PARTS},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{PARTS}"'}}]},
    }
    pods = [f"{who}-{name}" for who in WHO for name in SIZES]
    try:
        _apply(cluster, device_class)
        found: dict[str, Any] = {}
        for who in WHO:
            for body in _pool(cluster, who):
                _apply(cluster, body)
            for name, size in SIZES.items():
                _apply(cluster, _claim(who, name, size))
            for name in SIZES:
                _apply(cluster, _pod(who, name))
                if name == "half-a":
                    _wait_bound(cluster, f"{who}-half-a")
            _wait_bound(cluster, f"{who}-half-b")
            _wait_refused(cluster, f"{who}-whole")
            found[who] = {
                "halves": sorted(
                    _devices(cluster, f"{who}-half-a") + _devices(cluster, f"{who}-half-b")
                ),
                "whole": _devices(cluster, f"{who}-whole"),
                "whole bound": cluster.pod(f"{who}-whole")["spec"].get("nodeName"),
                "message": _unschedulable(cluster, f"{who}-whole"),
            }
        print(json.dumps(found, indent=1))  # shown with -s
        for who in WHO:
            assert found[who]["halves"] == ["gpu-0-4g-0", "gpu-0-4g-1"], who
            assert found[who]["whole"] == [], who
            assert found[who]["whole bound"] is None, who
        assert "within their pools' shared counters" in found["ours"]["message"]
    finally:
        cluster.delete_pods(*pods)
        claims = [f"{who}-{name}" for who in WHO for name in SIZES]
        cluster.kubectl("delete", "resourceclaims", *claims, "--ignore-not-found")
        slices = [f"{who}-{part}" for who in WHO for part in ("parts", "counters")]
        cluster.kubectl("delete", "resourceslices", *slices, "--ignore-not-found")
        cluster.kubectl("delete", "deviceclass", PARTS, "--ignore-not-found")
