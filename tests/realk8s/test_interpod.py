"""gputopo-scheduler reads inter-pod anti-affinity as a real 1.37 API server stores it (the API
server merges `matchLabelKeys` into the selector) on the one real node: the second of two
replicas anti-affine by hostname waits with kube-scheduler's message, and binds and runs once the
first is deleted; a high-priority replica anti-affine over the node's zone evicts the
low-priority one in its way and runs; a high-priority gang placed exclusively per zone (JobSet's
form) evicts the other job's two pods in the node's zone, though the node has room beside them,
and both members run."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.builders.interpod import exclusive_affinity
from tests.builders.realk8s import Cluster, busybox_pod, wait_until
from tests.builders.scheduler import podgroup

pytestmark = [pytest.mark.realk8s, pytest.mark.timeout(300)]

SCHEDULER = "gputopo-scheduler"


ZONE = "topology.kubernetes.io/zone"


def replica(name: str, key: str = "kubernetes.io/hostname") -> dict[str, Any]:
    body = busybox_pod(
        name,
        limits={"nvidia.com/gpu": "1"},
        scheduler=SCHEDULER,
        labels={"app": "anti", "rev": "1"},
    )
    term = {
        "labelSelector": {"matchLabels": {"app": "anti"}},
        "matchLabelKeys": ["rev"],
        "topologyKey": key,
    }
    body["spec"]["affinity"] = {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    }
    return body


def test_anti_affine_replicas_wait_for_each_other_on_one_node(
    cluster: Cluster, agent, scheduler
) -> None:
    try:
        cluster.kubectl("create", "-f", "-", stdin=json.dumps(replica("anti-0")))
        cluster.wait_running("anti-0")
        stored = cluster.pod("anti-0")["spec"]["affinity"]["podAntiAffinity"]
        selector = stored["requiredDuringSchedulingIgnoredDuringExecution"][0]["labelSelector"]
        assert {"key": "rev", "operator": "In", "values": ["1"]} in selector.get(
            "matchExpressions", []
        )  # what the API server merged, read once by the scheduler
        cluster.kubectl("create", "-f", "-", stdin=json.dumps(replica("anti-1")))
        said = wait_until(lambda: cluster.scheduled_message("anti-1"), 30, "anti-1 refused")
        assert said.startswith(
            "0/1 nodes are available: 1 node(s) didn't match pod anti-affinity rules."
        )
        assert cluster.pod("anti-1")["spec"].get("nodeName") is None
        cluster.delete_pods("anti-0")
        wait_until(lambda: cluster.pod("anti-1")["spec"].get("nodeName"), 60, "anti-1 bound")
        cluster.wait_running("anti-1")
    finally:
        cluster.delete_pods("anti-0", "anti-1")


def test_a_high_priority_replica_evicts_the_one_in_its_zone(
    cluster: Cluster, agent, scheduler
) -> None:
    """The node is labelled zone z1 and runs a low-priority replica; a high-priority one,
    anti-affine to it over the zone, makes it the victim (its rule reads the zone, not only its
    node) and runs once it is gone."""
    urgent: dict[str, Any] = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass"}
    urgent.update({"metadata": {"name": "anti-urgent"}, "value": 1000})
    try:
        cluster.kubectl("label", "node", cluster.node, f"{ZONE}=z1", "--overwrite")
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(urgent))
        cluster.kubectl("create", "-f", "-", stdin=json.dumps(replica("zoned-0", ZONE)))
        cluster.wait_running("zoned-0")
        high = replica("zoned-1", ZONE)
        high["spec"]["priorityClassName"] = "anti-urgent"
        cluster.kubectl("create", "-f", "-", stdin=json.dumps(high))
        cluster.wait_running("zoned-1", timeout_s=120)
        listed = json.loads(cluster.kubectl("get", "pods", "-o", "json"))["items"]
        alive = {
            p["metadata"]["name"] for p in listed if not p["metadata"].get("deletionTimestamp")
        }
        assert "zoned-0" not in alive  # evicted: gone, or its deletion under way
    finally:
        cluster.delete_pods("zoned-0", "zoned-1")
        cluster.kubectl("delete", "priorityclass", "anti-urgent", "--ignore-not-found")
        cluster.kubectl("label", "node", cluster.node, f"{ZONE}-")


def test_a_namespace_selector_follows_the_namespaces_labels(
    cluster: Cluster, agent, scheduler
) -> None:
    """The scheduler (under the shipped RBAC) watches namespaces: a replica anti-affine to
    `app=db` pods of namespaces labelled `team=data` waits beside one, and runs once the
    namespace loses the label."""
    term = {
        "labelSelector": {"matchLabels": {"app": "db"}},
        "namespaceSelector": {"matchLabels": {"team": "data"}},
        "topologyKey": "kubernetes.io/hostname",
    }
    solo = busybox_pod("solo", limits={"nvidia.com/gpu": "1"}, scheduler=SCHEDULER)
    solo["spec"]["affinity"] = {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    }
    db = busybox_pod(
        "db", limits={"nvidia.com/gpu": "1"}, scheduler=SCHEDULER, labels={"app": "db"}
    )
    db["metadata"]["namespace"] = "team-data"
    try:
        cluster.kubectl("create", "namespace", "team-data")
        cluster.kubectl("label", "namespace", "team-data", "team=data")
        cluster.kubectl("create", "-f", "-", stdin=json.dumps(db))
        cluster.wait_running("db", namespace="team-data")
        cluster.kubectl("create", "-f", "-", stdin=json.dumps(solo))
        said = wait_until(lambda: cluster.scheduled_message("solo"), 30, "solo refused")
        assert said.startswith(
            "0/1 nodes are available: 1 node(s) didn't match pod anti-affinity rules."
        ), said
        cluster.kubectl("label", "namespace", "team-data", "team-")
        cluster.wait_running("solo", timeout_s=60)
    finally:
        cluster.delete_pods("solo")
        cluster.delete_pods("db", namespace="team-data")
        cluster.kubectl("delete", "namespace", "team-data", "--ignore-not-found", "--wait=false")


def exclusive(name: str, job: str, **labels: str) -> dict[str, Any]:
    """A 1-GPU pod of `job`, affine to its job and anti-affine to every other job over the
    zone (what JobSet writes for `alpha.jobset.sigs.k8s.io/exclusive-topology`)."""
    body = busybox_pod(
        name, limits={"nvidia.com/gpu": "1"}, scheduler=SCHEDULER, labels={"job": job, **labels}
    )
    body["spec"]["affinity"] = exclusive_affinity(job, ZONE)
    return body


def test_a_gang_exclusive_per_zone_evicts_the_other_job_in_its_zone(
    cluster: Cluster, agent, scheduler
) -> None:
    urgent: dict[str, Any] = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass"}
    urgent.update({"metadata": {"name": "exclusive-urgent"}, "value": 1000})
    old, new = ["old-0", "old-1"], ["new-0", "new-1"]
    try:
        cluster.kubectl("label", "node", cluster.node, f"{ZONE}=z1", "--overwrite")
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(urgent))
        for name in old:
            cluster.kubectl("create", "-f", "-", stdin=json.dumps(exclusive(name, "old")))
        for name in old:
            cluster.wait_running(name)
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(podgroup("new", 2)))
        for name in new:
            body = exclusive(name, "new", **{"scheduling.x-k8s.io/pod-group": "new"})
            body["spec"]["priorityClassName"] = "exclusive-urgent"
            cluster.kubectl("create", "-f", "-", stdin=json.dumps(body))
        for name in new:
            cluster.wait_running(name, timeout_s=120)
        listed = json.loads(cluster.kubectl("get", "pods", "-o", "json"))["items"]
        alive = {
            p["metadata"]["name"] for p in listed if not p["metadata"].get("deletionTimestamp")
        }
        assert not alive & set(old)  # evicted: gone, or their deletion under way
    finally:
        cluster.delete_pods(*old, *new)
        cluster.kubectl("delete", "priorityclass", "exclusive-urgent", "--ignore-not-found")
        cluster.kubectl("delete", "podgroups.scheduling.x-k8s.io", "new", "--ignore-not-found")
        cluster.kubectl("label", "node", cluster.node, f"{ZONE}-")
