"""Pod fields gputopo-scheduler once refused as unsupported, on a real 1.37 API server and
kubelet:

- pod-level resources (`spec.resources`, beta and on by default since 1.34): the pod-level cpu
  request counts in the place of the containers', so a pod whose containers ask 10m but whose
  pod asks 5,000 cores waits as kube-scheduler would have it wait, and one whose pod asks 50m
  binds and runs;
- host ports: a `hostNetwork` pod's container port is a host port (the API server defaults
  `hostPort`), so a second pod on the same port waits with kube-scheduler's `NodePorts`
  message, and runs once the first is deleted;
- required node affinity's `matchFields`: a DaemonSet given `schedulerName: gputopo-scheduler`
  gets a pod the DaemonSet controller pins to the node by `metadata.name`, and it runs there."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.builders.realk8s import Cluster, busybox_pod, wait_until

pytestmark = [pytest.mark.realk8s, pytest.mark.timeout(300)]


def pod_level(name: str, cpu: str) -> dict[str, Any]:
    body = busybox_pod(name, limits={"nvidia.com/gpu": "1"}, scheduler="gputopo-scheduler")
    body["spec"]["resources"] = {"requests": {"cpu": cpu, "memory": "64Mi"}}
    return body


def test_the_pod_level_cpu_request_is_what_the_node_must_hold(
    cluster: Cluster, agent, scheduler
) -> None:
    try:
        cluster.kubectl("create", "-f", "-", stdin=json.dumps(pod_level("wide", "5000")))
        stored = cluster.pod("wide")["spec"].get("resources") or {}
        assert stored.get("requests", {}).get("cpu") == "5k"  # the server kept it (gate on)
        said = wait_until(lambda: cluster.scheduled_message("wide"), 30, "wide refused")
        assert said.startswith("0/1 nodes are available: 1 Insufficient cpu."), said
        cluster.kubectl("create", "-f", "-", stdin=json.dumps(pod_level("narrow", "50m")))
        cluster.wait_running("narrow")
        assert cluster.pod("wide")["spec"].get("nodeName") is None
    finally:
        cluster.delete_pods("wide", "narrow")


def on_port(name: str, port: int) -> dict[str, Any]:
    body = busybox_pod(name, limits={"nvidia.com/gpu": "1"}, scheduler="gputopo-scheduler")
    body["spec"]["containers"][0]["ports"] = [{"containerPort": port}]  # hostNetwork: true
    return body


def test_a_host_network_port_is_taken_until_its_pod_is_gone(
    cluster: Cluster, agent, scheduler
) -> None:
    try:
        cluster.kubectl("create", "-f", "-", stdin=json.dumps(on_port("port-0", 18099)))
        cluster.wait_running("port-0")
        ports = cluster.pod("port-0")["spec"]["containers"][0]["ports"]
        assert ports[0].get("hostPort") == 18099  # the API server's defaulting
        cluster.kubectl("create", "-f", "-", stdin=json.dumps(on_port("port-1", 18099)))
        said = wait_until(lambda: cluster.scheduled_message("port-1"), 30, "port-1 refused")
        assert said.startswith(
            "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports."
        ), said
        cluster.delete_pods("port-0")
        cluster.wait_running("port-1", timeout_s=120)
    finally:
        cluster.delete_pods("port-0", "port-1")


def test_a_daemonsets_pod_pinned_by_match_fields_runs_on_its_node(
    cluster: Cluster, agent, scheduler
) -> None:
    template = busybox_pod("unused", limits={"nvidia.com/gpu": "1"}, scheduler="gputopo-scheduler")
    labels = {"app": "per-node-gpu"}
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "per-node-gpu", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": template["spec"]},
        },
    }
    try:
        cluster.kubectl("create", "-f", "-", stdin=json.dumps(daemonset))
        name = wait_until(lambda: _pod_of(cluster, labels), 60, "the DaemonSet's pod")
        cluster.wait_running(name, timeout_s=120)
        pod = cluster.pod(name)
        required = pod["spec"]["affinity"]["nodeAffinity"]
        terms = required["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        fields = [f for term in terms for f in term.get("matchFields") or ()]
        assert fields == [{"key": "metadata.name", "operator": "In", "values": [cluster.node]}]
        assert pod["spec"]["nodeName"] == cluster.node
        assert pod["spec"]["schedulerName"] == "gputopo-scheduler"
    finally:
        cluster.kubectl("delete", "daemonset", "per-node-gpu", "--ignore-not-found", "--wait")
        wait_until(lambda: not _pod_of(cluster, labels), 60, "the DaemonSet's pod gone")


def _pod_of(cluster: Cluster, labels: dict[str, str]) -> str | None:
    selector = ",".join(f"{k}={v}" for k, v in labels.items())
    listed = json.loads(cluster.kubectl("get", "pods", "-l", selector, "-o", "json"))["items"]
    return str(listed[0]["metadata"]["name"]) if listed else None
