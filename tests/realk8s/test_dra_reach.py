"""Where a claim's allocation may be used, on a real 1.37 API server beside the real
kube-scheduler: devices no node owns (an `allNodes` slice's fabric channels, a `nodeSelector`
slice's links), allocated by each scheduler for one pod of its own. gputopo-scheduler writes the
nodeSelector kube-scheduler writes: none for a claim of a channel alone, the link slice's term for
a claim of a channel and a link. A slice with `perDeviceNodeSelection` (port-0 the node's own,
port-1 every node's, port-2 selected by a label, port-3 another node's): each scheduler gives a
claim of three ports the three the node is served, pinned to the node, and neither allocates a
claim of four. No kubelet plugin serves the driver, so the pods bind and stay
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


def _device(name: str, kind: str, **where: Any) -> dict[str, Any]:
    return {"name": name, "attributes": {"kind": {"string": kind}}, **where}


def _claim(name: str, *kinds: str, count: int = 1) -> dict[str, Any]:
    selector = 'device.attributes["fabric.example.com"].kind == "{}"'
    requests = [
        {
            "name": kind,
            "exactly": {
                "deviceClassName": FABRIC,
                "selectors": [{"cel": {"expression": selector.format(kind)}}],
                "count": count,
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


DEVICE_CLASS = {
    "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": FABRIC},
    "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{FABRIC}"'}}]},
}  # fmt: skip


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
    pods = {"theirs": None, "ours": "gputopo-scheduler"}
    claims = [f"{who}-{what}" for who in pods for what in ("channel", "both")]
    try:
        for body in (DEVICE_CLASS, channels, links):
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


def test_a_per_device_node_selection_slice_gives_each_scheduler_the_nodes_ports(
    cluster: Cluster, scheduler
) -> None:
    linux = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": OS_LABEL, "operator": "In", "values": ["linux"]}]}]}  # fmt: skip
    ports = [
        _device("port-0", "port", nodeName=cluster.node),
        _device("port-1", "port", allNodes=True),
        _device("port-2", "port", nodeSelector=linux),
        _device("port-3", "port", nodeName="some-other-node"),
    ]
    body = shared_slice_obj("fabric-ports", "ports", ports, driver=FABRIC)
    del body["spec"]["allNodes"]
    body["spec"]["perDeviceNodeSelection"] = True
    pods = {"theirs": None, "ours": "gputopo-scheduler"}
    found: dict[str, dict[str, Any]] = {}
    try:
        for one in (DEVICE_CLASS, body):
            _apply(cluster, one)
        for who, scheduler_name in pods.items():
            _apply(cluster, _claim(f"{who}-three", "port", count=3))
            _apply(cluster, _pod(who, scheduler_name, [f"{who}-three"]))
            wait_until(lambda who=who: cluster.pod(who)["spec"].get("nodeName"), 90, f"{who} bound")
            found[who] = _allocation(cluster, f"{who}-three")
            cluster.delete_pods(who)
            cluster.kubectl("delete", "resourceclaim", f"{who}-three")
        _apply(cluster, _claim("ours-four", "port", count=4))
        _apply(cluster, _pod("four", "gputopo-scheduler", ["ours-four"]))
        said = wait_until(lambda: cluster.scheduled_message("four"), 90, "four refused")
        print(json.dumps(found, indent=1), said)  # shown with -s
        pinned = {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [cluster.node]}]}]}  # fmt: skip
        for who in pods:
            results = found[who]["devices"]["results"]
            assert sorted(r["device"] for r in results) == ["port-0", "port-1", "port-2"], who
            assert found[who]["nodeSelector"] == pinned, who
        assert cluster.pod("four")["spec"].get("nodeName") is None
        assert "claim default/ours-four request port: 3 of 4 devices" in said
    finally:
        cluster.delete_pods(*pods, "four")
        cluster.kubectl("delete", "resourceclaims", "theirs-three", "ours-three", "ours-four",
                        "--ignore-not-found")  # fmt: skip
        cluster.kubectl("delete", "resourceslices", "fabric-ports", "--ignore-not-found")
        cluster.kubectl("delete", "deviceclass", FABRIC, "--ignore-not-found")
