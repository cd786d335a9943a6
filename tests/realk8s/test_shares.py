"""A GPU share placed by gputopo-scheduler under the share lock on a real API server, admitted by a
real kubelet: the container sees the GPU the scheduler chose, and the lock is released."""

from __future__ import annotations

import json

import pytest

from tests.builders.realk8s import NAMESPACE, Cluster, busybox_pod, env_of, wait_until

pytestmark = [pytest.mark.realk8s, pytest.mark.timeout(300)]
GIB = 1024**3


def share_zones(cluster: Cluster) -> dict[str, int]:
    """Per shared GPU UUID: the gpu-memory bytes its NRT zone has available."""
    nrt = json.loads(cluster.kubectl("get", "noderesourcetopology", cluster.node, "-o", "json"))
    zones = {}
    for zone in nrt["zones"]:
        resources = {r["name"]: r["available"] for r in zone.get("resources", [])}
        if zone["type"] == "GPU" and "gputopo.io/gpu-memory" in resources:
            uuid = next(a["value"] for a in zone["attributes"] if a["name"] == "uuid")
            zones[uuid] = int(resources["gputopo.io/gpu-memory"])
    return zones


def test_a_share_runs_on_the_gpu_the_scheduler_chose(cluster: Cluster, agent, scheduler) -> None:
    before = share_zones(cluster)
    assert len(before) == 2
    body = busybox_pod(
        "share",
        scheduler="gputopo-scheduler",
        limits={"nvidia.com/gpu.shared": "1", "gputopo.io/gpu-memory": "20Gi"},
    )
    cluster.kubectl("create", "-f", "-", stdin=json.dumps(body))
    try:
        cluster.wait_running("share")
        pod = cluster.pod("share")
        chosen = json.loads(pod["metadata"]["annotations"]["gputopo.io/gpus"])["main"]
        assert chosen in before
        seen = wait_until(
            lambda: env_of(cluster.logs("share")).get("NVIDIA_VISIBLE_DEVICES"),
            30,
            "the share's environment",
        )
        assert seen == chosen
        lease = json.loads(
            cluster.kubectl(
                "get", "lease", f"gputopo-share-{cluster.node}", "-n", NAMESPACE, "-o", "json"
            )
        )
        assert not lease["spec"].get("holderIdentity"), lease
        wait_until(
            lambda: share_zones(cluster)[chosen] == before[chosen] - 20 * GIB,
            60,
            "the NRT to count the share's memory",
        )
    finally:
        cluster.delete_pods("share")
