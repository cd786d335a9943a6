"""The agent's device plugin and topology publisher beside a real kubelet 1.37: registration, a
real pod that gets its GPUs (seen in its environment), and the NodeResourceTopology following it."""

from __future__ import annotations

import json

import pytest

from tests.builders.realk8s import Cluster, busybox_pod, env_of, gpu_zones, wait_until

pytestmark = [pytest.mark.realk8s, pytest.mark.timeout(300)]


def test_the_kubelet_advertises_what_the_agent_serves(cluster: Cluster, agent) -> None:
    def labelled() -> dict[str, object]:
        node = json.loads(cluster.kubectl("get", "node", cluster.node, "-o", "json"))
        return node if "nvidia.com/gpu.product" in node["metadata"]["labels"] else {}

    node = wait_until(labelled, 60, "the agent's GPU labels on the node")
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "6"
    assert node["status"]["allocatable"]["nvidia.com/gpu.shared"] == "8"
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    zones = wait_until(lambda: gpu_zones(cluster), 60, "the NRT object")
    assert len(zones) == 8


def test_a_stock_scheduled_pod_runs_with_its_gpus_and_the_nrt_counts_them(
    cluster: Cluster, agent
) -> None:
    def whole_gpus() -> set[str]:
        return {uuid for uuid, res in gpu_zones(cluster).items() if "nvidia.com/gpu" in res}

    whole = wait_until(
        lambda: len(whole_gpus()) == 6 and whole_gpus(), 60, "6 whole GPUs in the NRT"
    )
    cluster.kubectl(
        "create",
        "-f",
        "-",
        stdin=json.dumps(busybox_pod("two-gpus", limits={"nvidia.com/gpu": "2"})),
    )
    try:
        cluster.wait_running("two-gpus")
        seen = wait_until(
            lambda: env_of(cluster.logs("two-gpus")).get("NVIDIA_VISIBLE_DEVICES"),
            30,
            "the pod's environment",
        )
        given = set(seen.split(","))
        assert len(given) == 2, seen
        assert given <= whole, (seen, whole)

        def counted() -> bool:
            zones = gpu_zones(cluster)
            return all(zones[uuid]["nvidia.com/gpu"] == "0" for uuid in given)

        wait_until(counted, 60, "the NRT to count the pod's GPUs as used")
        free = [u for u, res in gpu_zones(cluster).items() if res.get("nvidia.com/gpu") == "1"]
        assert sorted(free) == sorted(whole - given)
    finally:
        cluster.delete_pods("two-gpus")
