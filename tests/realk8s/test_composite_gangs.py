"""gputopo-scheduler and kube-scheduler 1.37 each schedule a tree of CompositePodGroups
(`scheduling.k8s.io/v1alpha3`, the CompositePodGroup gate) on a real API server, with the same
outcome.

The node has 6 whole GPUs (the agent fixture). A root of minGroupCount 2 over two PodGroups of
2 x 2 GPUs asks 8: nothing binds, though either PodGroup alone would fit. A `basic` root over the
same two is satisfied by one: the PodGroup created first binds whole, and the other's pods wait
(its minCount is 2, and one pod would fit the 2 GPUs left). A tree of higher priority whose
PodGroups each keep to one rack (their own topology) evicts the low-priority pods in its way, as
many as its groups need, and binds."""

from __future__ import annotations

import io
import json
import logging
import time
from typing import Any

import pytest

from agent.cli import kubectl as kubectl_plugin
from tests.builders.realk8s import (
    COMPOSITES,
    PODGROUPS,
    Cluster,
    busybox_pod,
    child,
    composite,
    group_member,
    wait_until,
)

pytestmark = [pytest.mark.realk8s, pytest.mark.timeout(300)]

SCHEDULER = "gputopo-scheduler"


def bound(cluster: Cluster, names: list[str]) -> set[str]:
    return {n for n in names if cluster.pod(n)["spec"].get("nodeName")}


def _tree(cluster: Cluster, root: str, min_groups: int | None, scheduler: str | None) -> list[str]:
    """Root `root` over PodGroups `<root>-a` then `<root>-b`, each 2 pods x 2 GPUs, minCount 2;
    the pods' names, a's first."""
    cluster.create(composite(root, min_groups))
    pods = []
    for side in "ab":
        group = f"{root}-{side}"
        cluster.create(child(group, root, 2))
        names = [f"{group}-{i}" for i in range(2)]
        cluster.create(*(group_member(n, group, 2, scheduler) for n in names))
        pods += names
        time.sleep(1.1)  # b is created a second after a (creation stamps are in seconds)
    return pods


def _clean(cluster: Cluster, pods: list[str], root: str) -> None:
    cluster.delete_pods(*pods)
    groups = [f"{root}-a", f"{root}-b"]
    cluster.kubectl("delete", PODGROUPS, *groups, "--ignore-not-found", "--wait=false")
    cluster.kubectl("delete", COMPOSITES, root, "--ignore-not-found", "--wait=false")


@pytest.mark.parametrize("scheduler_name", [SCHEDULER, None], ids=["gputopo", "kube-scheduler"])
def test_a_tree_binds_all_or_nothing_and_a_basic_root_starts_with_one_group(
    cluster: Cluster, agent, scheduler, scheduler_name: str | None
) -> None:
    tag = "g" if scheduler_name else "k"
    whole, loose = f"whole-{tag}", f"loose-{tag}"
    pods: list[str] = []
    try:
        pods = _tree(cluster, whole, 2, scheduler_name)
        time.sleep(8)
        assert bound(cluster, pods) == set()  # 8 GPUs asked of 6: nothing binds
        _clean(cluster, pods, whole)
        pods = _tree(cluster, loose, None, scheduler_name)
        first = set(pods[:2])
        wait_until(lambda: bound(cluster, pods) == first, 90, "the first PodGroup to bind")
        time.sleep(5)
        assert bound(cluster, pods) == first  # the second's minCount 2 does not fit 2 GPUs
        rows = _gangs(cluster)  # the plugin lists the tree from the real server
        assert (rows[loose]["pods"], rows[loose]["bound"], rows[loose]["status"]) == (
            4, 2, "Satisfied"
        )  # fmt: skip
        assert rows[f"{loose}-a"]["parent"] == loose
    finally:
        _clean(cluster, pods, whole)
        _clean(cluster, pods, loose)


def _gangs(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """`kubectl gputopo gangs -o json` against the cluster: each row by name (the root logger,
    which the command configures, put back)."""
    out, err = io.StringIO(), io.StringIO()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        argv = ["--kubeconfig", str(cluster.kubeconfig), "gangs", "-o", "json"]
        code = kubectl_plugin.main(argv, out=out, err=err)
    finally:
        root.handlers[:], root.level = handlers, level
    assert (code, err.getvalue()) == (0, "")
    return {row["name"]: row for row in json.loads(out.getvalue())["gangs"]}


@pytest.mark.parametrize("scheduler_name", [SCHEDULER, None], ids=["gputopo", "kube-scheduler"])
def test_a_podgroups_own_topology_holds_inside_the_tree(
    cluster: Cluster, agent, scheduler, scheduler_name: str | None
) -> None:
    """Two PodGroups of 1 x 1 GPU under a root of both: each with the topology key the node
    carries (`gputopo.io/rack`) binds; with one it lacks (`topology.kubernetes.io/zone`) on
    the second, nothing binds, as the second's pods can go nowhere."""
    tag = "g" if scheduler_name else "k"
    cluster.kubectl("label", "node", cluster.node, "gputopo.io/rack=r1", "--overwrite")
    trees = {f"racked-{tag}": "gputopo.io/rack", f"zoned-{tag}": "topology.kubernetes.io/zone"}
    pods: dict[str, list[str]] = {}
    try:
        for root, key in trees.items():
            cluster.create(composite(root, 2))
            pods[root] = []
            for side, group_key in (("a", "gputopo.io/rack"), ("b", key)):
                body = child(f"{root}-{side}", root, 1)
                body["spec"]["schedulingConstraints"] = {"topology": [{"key": group_key}]}
                cluster.create(body)
                name = f"{root}-{side}-0"
                cluster.create(group_member(name, f"{root}-{side}", 1, scheduler_name))
                pods[root].append(name)
        racked, zoned = (pods[root] for root in trees)
        wait_until(lambda: bound(cluster, racked) == set(racked), 90, "the racked tree")
        time.sleep(5)
        assert bound(cluster, zoned) == set()
    finally:
        for root, names in pods.items():
            _clean(cluster, names, root)
        cluster.kubectl("label", "node", cluster.node, "gputopo.io/rack-")


@pytest.mark.parametrize("scheduler_name", [SCHEDULER, None], ids=["gputopo", "kube-scheduler"])
def test_a_tree_with_a_rack_per_podgroup_evicts_lower_priority_pods(
    cluster: Cluster, agent, scheduler, scheduler_name: str | None
) -> None:
    """The node (rack r1) runs three 2-GPU pods of priority 0, filling its 6 GPUs. A root of
    priority 1000 over two PodGroups of 1 x 2 GPUs, each with the rack as its topology, needs 4
    of them: two low pods are evicted, one keeps running, and both groups bind. (The tree's
    pods have the root's priority: kube-scheduler tries a tree only then.)"""
    tag = "g" if scheduler_name else "k"
    root, urgent = f"racked-high-{tag}", f"tree-urgent-{tag}"
    low = [f"low-{tag}-{i}" for i in range(3)]
    members = [f"{root}-{side}-0" for side in "ab"]
    priority = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass"}
    try:
        cluster.kubectl("label", "node", cluster.node, "gputopo.io/rack=r1", "--overwrite")
        body = {**priority, "metadata": {"name": urgent}, "value": 1000}
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(body))
        cluster.create(*(_gpus(name, 2, scheduler_name) for name in low))
        wait_until(lambda: bound(cluster, low) == set(low), 90, "the low pods")
        tree = composite(root, 2)
        tree["spec"]["priorityClassName"] = urgent
        cluster.create(tree)
        for side, name in zip("ab", members, strict=True):
            group = child(f"{root}-{side}", root, 1)
            group["spec"]["schedulingConstraints"] = {"topology": [{"key": "gputopo.io/rack"}]}
            cluster.create(group)
            member = group_member(name, f"{root}-{side}", 2, scheduler_name)
            member["spec"]["priorityClassName"] = urgent  # kube: the root's priority, every pod
            cluster.create(member)
        wait_until(lambda: bound(cluster, members) == set(members), 120, "the tree")
        listed = json.loads(cluster.kubectl("get", "pods", "-o", "json"))["items"]
        alive = {
            p["metadata"]["name"] for p in listed if not p["metadata"].get("deletionTimestamp")
        }
        assert len(alive & set(low)) == 1  # two evicted: gone, or their deletion under way
    finally:
        cluster.delete_pods(*low, *members)
        groups = [f"{root}-a", f"{root}-b"]
        cluster.kubectl("delete", PODGROUPS, *groups, "--ignore-not-found", "--wait=false")
        cluster.kubectl("delete", COMPOSITES, root, "--ignore-not-found", "--wait=false")
        cluster.kubectl("delete", "priorityclass", urgent, "--ignore-not-found")
        cluster.kubectl("label", "node", cluster.node, "gputopo.io/rack-")


def _gpus(name: str, gpus: int, scheduler: str | None) -> dict[str, Any]:
    return busybox_pod(name, limits={"nvidia.com/gpu": str(gpus)}, scheduler=scheduler)
