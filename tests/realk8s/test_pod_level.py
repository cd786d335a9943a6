"""Pod-level resources (`spec.resources`, beta and on by default since 1.34) on a real 1.37 API
server and kubelet: gputopo-scheduler counts the pod-level cpu request in the place of the
containers', so a pod whose containers ask 10m but whose pod asks 5,000 cores waits as
kube-scheduler would have it wait, and one whose pod asks 50m binds and runs."""

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
