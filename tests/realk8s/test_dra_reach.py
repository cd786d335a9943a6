"""Where a claim's allocation may be used, on a real 1.37 API server beside the real
kube-scheduler: devices no node owns (an `allNodes` slice's fabric channels, a `nodeSelector`
slice's links), allocated by each scheduler for one pod of its own. gputopo-scheduler writes the
nodeSelector kube-scheduler writes: none for a claim of a channel alone, the link slice's term for
a claim of a channel and a link. No kubelet plugin serves the driver, so the pods bind and stay
ContainerCreating: the allocations are what is compared."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.builders.claims import shared_slice_obj
from tests.builders.realk8s import Cluster, busybox_pod, wait_until

pytestmark = [pytest.mark.realk8s, pytest.mark.timeout(300)]

FABRIC = "fabric.example.com"
OS_LABEL = "kubernetes.io/os"


def _apply(cluster: Cluster, body: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(body))


def _device(name: str, kind: str) -> dict[str, Any]:
    return {"name": name, "attributes": {"kind": {"string": kind}}}


def _claim(name: str, *kinds: str) -> dict[str, Any]:
    selector = 'device.attributes["fabric.example.com"].kind == "{}"'
    requests = [
        {
            "name": kind,
            "exactly": {
                "deviceClassName": FABRIC,
                "selectors": [{"cel": {"expression": selector.format(kind)}}],
            },
        }
        for kind in kinds
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": requests}},
    }


def _pod(name: str, scheduler: str | None, claims: list[str]) -> dict[str, Any]:
    body = busybox_pod(name, scheduler=scheduler)
    body["spec"]["resourceClaims"] = [{"name": c, "resourceClaimName": c} for c in claims]
    body["spec"]["containers"][0]["resources"]["claims"] = [{"name": c} for c in claims]
    return body


def _allocation(cluster: Cluster, claim: str) -> dict[str, Any]:
    found = json.loads(cluster.kubectl("get", "resourceclaim", claim, "-o", "json"))
    return dict((found.get("status") or {}).get("allocation") or {})


def test_claims_of_devices_no_node_owns_get_the_node_selector_kube_scheduler_writes(
    cluster: Cluster, scheduler
) -> None:
    devices = [_device(f"channel-{i}", "channel") for i in range(4)]
    channels = shared_slice_obj("fabric-channels", "channels", devices, driver=FABRIC)
    links = shared_slice_obj(
        "fabric-links", "links", [_device(f"link-{i}", "link") for i in range(2)],
        label=(OS_LABEL, "linux"), driver=FABRIC,
    )  # fmt: skip
    selector = {"cel": {"expression": f'device.driver == "{FABRIC}"'}}
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": FABRIC},
        "spec": {"selectors": [selector]},
    }
    pods = {"theirs": None, "ours": "gputopo-scheduler"}
    claims = [f"{who}-{what}" for who in pods for what in ("channel", "both")]
    try:
        for body in (device_class, channels, links):
            _apply(cluster, body)
        for who, scheduler_name in pods.items():
            _apply(cluster, _claim(f"{who}-channel", "channel"))
            _apply(cluster, _claim(f"{who}-both", "channel", "link"))
            _apply(cluster, _pod(who, scheduler_name, [f"{who}-channel", f"{who}-both"]))
            wait_until(lambda who=who: cluster.pod(who)["spec"].get("nodeName"), 90, f"{who} bound")
        found = {c: _allocation(cluster, c) for c in claims}
        print(json.dumps(found, indent=1))  # shown with -s
        for claim in claims:
            assert found[claim], f"{claim} was not allocated"
        term = {"matchExpressions": [{"key": OS_LABEL, "operator": "In", "values": ["linux"]}]}
        assert "nodeSelector" not in found["theirs-channel"]  # what kube-scheduler writes
        assert found["theirs-both"]["nodeSelector"] == {"nodeSelectorTerms": [term]}
        for what in ("channel", "both"):
            assert found[f"ours-{what}"].get("nodeSelector") == found[f"theirs-{what}"].get(
                "nodeSelector"
            )
    finally:
        cluster.delete_pods(*pods)
        cluster.kubectl("delete", "resourceclaims", *claims, "--ignore-not-found")
        cluster.kubectl(
            "delete", "resourceslices", "fabric-channels", "fabric-links", "--ignore-not-found"
        )
        cluster.kubectl("delete", "deviceclass", FABRIC, "--ignore-not-found")
