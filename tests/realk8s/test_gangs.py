"""gputopo-scheduler against a real API server: a gang of real pods binds all or nothing and runs
on the real kubelet with its GPUs."""

from __future__ import annotations

import json
import time

import pytest

from tests.builders.realk8s import Cluster, busybox_pod, env_of, wait_until

pytestmark = [pytest.mark.realk8s, pytest.mark.timeout(300)]


def podgroup(name: str, min_member: int) -> dict[str, object]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"minMember": min_member},
    }


def node_names(cluster: Cluster, *pods: str) -> list[str | None]:
    return [cluster.pod(name)["spec"].get("nodeName") for name in pods]


def test_a_gang_binds_all_or_nothing(cluster: Cluster, agent, scheduler) -> None:
    members = ("gang-0", "gang-1")
    cluster.kubectl(
        "create",
        "-f",
        "-",
        stdin=json.dumps(busybox_pod("blocker", limits={"nvidia.com/gpu": "2"})),
    )
    try:
        cluster.wait_running("blocker")
        cluster.kubectl("create", "-f", "-", stdin=json.dumps(podgroup("gang", 2)))
        for name in members:
            body = busybox_pod(
                name,
                limits={"nvidia.com/gpu": "3"},
                scheduler="gputopo-scheduler",
                labels={"scheduling.x-k8s.io/pod-group": "gang"},
            )
            cluster.kubectl("create", "-f", "-", stdin=json.dumps(body))
        # 4 whole GPUs are free and the gang needs 6: neither member may bind (one would fit).
        time.sleep(8)
        assert node_names(cluster, *members) == [None, None]
        cluster.delete_pods("blocker")
        wait_until(lambda: all(node_names(cluster, *members)), 60, "the gang to bind")
        for name in members:
            cluster.wait_running(name)
        given = [
            wait_until(
                lambda n=name: env_of(cluster.logs(n)).get("NVIDIA_VISIBLE_DEVICES"),
                30,
                f"{name}'s environment",
            ).split(",")
            for name in members
        ]
        assert [len(ids) for ids in given] == [3, 3]
        assert len(set(given[0]) | set(given[1])) == 6
    finally:
        cluster.delete_pods("blocker", *members)
        cluster.kubectl("delete", "podgroups.scheduling.x-k8s.io", "gang", "--ignore-not-found")
