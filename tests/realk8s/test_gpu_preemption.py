"""A pod of higher priority evicts for GPUs on the real node, where the agent publishes the NRT
with the running pods' GPUs taken (the NRT trusted): gputopo-scheduler and kube-scheduler 1.37
each evict one 2-GPU pod of priority 0 for a 2-GPU pod of priority 1000 and run it.

The test waits until the NRT shows every whole GPU taken, so the scheduler trusts it. Until
gputopo charged the pods of a trusted NRT's node with the GPUs they hold, its victim search freed
no GPU by taking a pod out, and said "evicting every eligible victim would still not fit the
pod" (`scheduler/runtime/cluster/nodeview.py`); this test then failed for gputopo."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.builders.realk8s import Cluster, busybox_pod, gpu_zones, wait_until

pytestmark = [pytest.mark.realk8s, pytest.mark.timeout(300)]

SCHEDULER = "gputopo-scheduler"


def _alive(cluster: Cluster) -> set[str]:
    listed = json.loads(cluster.kubectl("get", "pods", "-o", "json"))["items"]
    return {p["metadata"]["name"] for p in listed if not p["metadata"].get("deletionTimestamp")}


def _whole_free(cluster: Cluster) -> int | None:
    """The whole GPUs the node's NRT shows available (None: no NRT yet)."""
    zones = gpu_zones(cluster)
    counts = [int(z["nvidia.com/gpu"]) for z in zones.values() if "nvidia.com/gpu" in z]
    return sum(counts) if counts else None


@pytest.mark.parametrize("scheduler_name", [SCHEDULER, None], ids=["gputopo", "kube-scheduler"])
def test_a_high_priority_pod_evicts_one_pod_for_its_gpus(
    cluster: Cluster, agent, scheduler, scheduler_name: str | None
) -> None:
    tag = "g" if scheduler_name else "k"
    urgent, high = f"gpu-urgent-{tag}", f"high-{tag}"
    low = [f"filler-{tag}-{i}" for i in range(3)]
    priority: dict[str, Any] = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass"}
    priority.update({"metadata": {"name": urgent}, "value": 1000})
    gpus = {"nvidia.com/gpu": "2"}
    try:
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(priority))
        cluster.create(*(busybox_pod(n, limits=gpus, scheduler=scheduler_name) for n in low))
        for name in low:
            cluster.wait_running(name)
        wait_until(lambda: _whole_free(cluster) == 0, 60, "the NRT to show every whole GPU taken")
        body = busybox_pod(high, limits=gpus, scheduler=scheduler_name)
        body["spec"]["priorityClassName"] = urgent
        cluster.create(body)
        cluster.wait_running(high, timeout_s=120)
        assert len(_alive(cluster) & set(low)) == 2  # one evicted: gone, or its deletion under way
    finally:
        cluster.delete_pods(*low, high)
        cluster.kubectl("delete", "priorityclass", urgent, "--ignore-not-found")
