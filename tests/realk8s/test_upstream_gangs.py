"""gputopo-scheduler places Kubernetes' own gangs (scheduling.k8s.io PodGroups, DESIGN §15) on a
real 1.37 API server, and kube-scheduler binds the same objects.

The node has 6 whole GPUs (the agent fixture). So: a gang of minCount 4 with 3 of its pods
created waits with nothing bound and nothing held (a 6-GPU pod binds meanwhile); the 4th pod
brings the 4 x 1 GPU gang in at once. A gang of 4 x 4 GPUs (minCount 4), of which one pod would
fit, stays all Pending with nothing bound, and says why in its PodGroupInitiallyScheduled
condition. A topology key the node carries (`gputopo.io/rack`) lets a gang bind inside that one
rack, and a `basic` group's pods one by one; a key it lacks keeps the gang waiting. A gang with
more pods than fit starts with its minimum, under gputopo as under kube-scheduler."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.builders.realk8s import Cluster, busybox_pod, group_member, wait_until

pytestmark = [pytest.mark.realk8s, pytest.mark.timeout(300)]

SCHEDULER = "gputopo-scheduler"
PODGROUPS = "podgroups.scheduling.k8s.io"  # plain `podgroups` is this one on 1.37, not ours
CONDITION = "PodGroupInitiallyScheduled"  # kube-scheduler 1.37's name (1.36: PodGroupScheduled)


def podgroup(name: str, min_count: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}, **spec},
    }


def member(name: str, group: str, gpus: int, scheduler: str | None = SCHEDULER) -> dict[str, Any]:
    return group_member(name, group, gpus, scheduler)


def create(cluster: Cluster, *bodies: dict[str, Any]) -> None:
    cluster.create(*bodies)


def nodes_of(cluster: Cluster, names: list[str]) -> list[str | None]:
    return [cluster.pod(name)["spec"].get("nodeName") for name in names]


def condition(cluster: Cluster, group: str) -> dict[str, Any]:
    found = json.loads(cluster.kubectl("get", PODGROUPS, group, "-o", "json"))
    for entry in (found.get("status") or {}).get("conditions") or []:
        if entry.get("type") == CONDITION:
            return dict(entry)
    return {}


def clean(cluster: Cluster, pods: list[str], groups: list[str]) -> None:
    cluster.delete_pods(*pods)
    if groups:  # the podgroup-protection finalizer goes once no pod names the group
        cluster.kubectl("delete", PODGROUPS, *groups, "--ignore-not-found", "--wait=false")


def test_min_count_binds_all_or_nothing_and_holds_nothing_while_it_waits(
    cluster: Cluster, agent, scheduler
) -> None:
    small = [f"small-{i}" for i in range(4)]
    big = [f"big-{i}" for i in range(4)]
    try:
        create(cluster, podgroup("small", 4), *(member(n, "small", 1) for n in small[:3]))
        wait_until(lambda: condition(cluster, "small").get("status") == "False", 60, "waiting")
        create(cluster, busybox_pod("probe", limits={"nvidia.com/gpu": "6"}, scheduler=SCHEDULER))
        wait_until(lambda: cluster.pod("probe")["spec"].get("nodeName"), 60, "the probe bound")
        assert nodes_of(cluster, small[:3]) == [None, None, None]  # waiting, holding no GPU
        cluster.delete_pods("probe")
        create(cluster, member(small[3], "small", 1))
        wait_until(lambda: all(nodes_of(cluster, small)), 60, "the 4 x 1 GPU gang to bind")
        wait_until(lambda: condition(cluster, "small").get("status") == "True", 30, "Scheduled")
        assert condition(cluster, "small")["reason"] == "Scheduled"
        cluster.delete_pods(*small)
        create(cluster, podgroup("big", 4), *(member(n, "big", 4) for n in big))
        found = wait_until(
            lambda: (c := condition(cluster, "big")).get("reason") == "Unschedulable" and c,
            60,
            "the 4 x 4 GPU gang's Unschedulable condition",
        )
        time.sleep(5)
        assert nodes_of(cluster, big) == [None] * 4  # one pod would fit: none may bind
        assert found["status"] == "False"
    finally:
        clean(cluster, ["probe", *small, *big], ["small", "big"])


def test_a_topology_key_keeps_the_gang_in_one_rack(cluster: Cluster, agent, scheduler) -> None:
    rack, zone = [f"rack-{i}" for i in range(2)], [f"zone-{i}" for i in range(2)]
    loose = [f"loose-{i}" for i in range(2)]
    cluster.kubectl("label", "node", cluster.node, "gputopo.io/rack=r1", "--overwrite")
    try:
        in_rack = podgroup(
            "rack", 2, schedulingConstraints={"topology": [{"key": "gputopo.io/rack"}]}
        )
        no_zone = podgroup(
            "zone", 2, schedulingConstraints={"topology": [{"key": "topology.kubernetes.io/zone"}]}
        )
        basic_in_rack = podgroup(
            "loose", 1, schedulingConstraints={"topology": [{"key": "gputopo.io/rack"}]}
        )
        basic_in_rack["spec"]["schedulingPolicy"] = {"basic": {}}  # the server takes it
        create(cluster, in_rack, no_zone, basic_in_rack, *(member(n, "rack", 1) for n in rack))
        create(cluster, *(member(n, "zone", 1) for n in zone))
        wait_until(lambda: all(nodes_of(cluster, rack)), 60, "the rack gang to bind")
        create(cluster, member(loose[0], "loose", 1))
        wait_until(lambda: all(nodes_of(cluster, loose[:1])), 60, "the basic group's first pod")
        create(cluster, member(loose[1], "loose", 1))
        wait_until(lambda: all(nodes_of(cluster, loose)), 60, "its second, in the same rack")
        labels = json.loads(cluster.kubectl("get", "node", cluster.node, "-o", "json"))
        assert labels["metadata"]["labels"]["gputopo.io/rack"] == "r1"
        wait_until(lambda: condition(cluster, "zone").get("status") == "False", 60, "zone waits")
        assert nodes_of(cluster, zone) == [None, None]
        assert (
            "no node has the topology label topology.kubernetes.io/zone"
            in cluster.scheduled_message("zone-0")
        )
    finally:
        clean(cluster, [*rack, *zone, *loose], ["rack", "zone", "loose"])
        cluster.kubectl("label", "node", cluster.node, "gputopo.io/rack-")


def test_kube_scheduler_binds_the_same_objects(cluster: Cluster, agent, scheduler) -> None:
    ours, theirs = ["ours-0", "ours-1"], ["theirs-0", "theirs-1"]
    try:
        create(cluster, podgroup("ours", 2), *(member(n, "ours", 1) for n in ours))
        create(
            cluster,
            podgroup("theirs", 2),
            *(member(n, "theirs", 1, scheduler=None) for n in theirs),
        )
        wait_until(lambda: all(nodes_of(cluster, ours + theirs)), 90, "both gangs to bind")
        wait_until(lambda: condition(cluster, "theirs").get("status") == "True", 60, "theirs")
        wait_until(lambda: condition(cluster, "ours").get("status") == "True", 60, "ours")
        assert condition(cluster, "theirs")["reason"] == condition(cluster, "ours")["reason"]
    finally:
        clean(cluster, ours + theirs, ["ours", "theirs"])


@pytest.mark.parametrize("scheduler_name", [SCHEDULER, None], ids=["gputopo", "kube-scheduler"])
def test_a_gang_with_more_pods_than_fit_starts_with_its_minimum(
    cluster: Cluster, agent, scheduler, scheduler_name: str | None
) -> None:
    """Three pods of 3 GPUs, minCount 2, on the node's 6 GPUs, all pending when the PodGroup
    comes: two bind and the third waits, under gputopo as under kube-scheduler."""
    pods = [f"elastic-{i}" for i in range(3)]
    try:
        create(cluster, *(member(n, "elastic", 3, scheduler=scheduler_name) for n in pods))
        time.sleep(2)  # the pods wait for their PodGroup
        assert nodes_of(cluster, pods) == [None, None, None]
        create(cluster, podgroup("elastic", 2))
        wait_until(lambda: sum(map(bool, nodes_of(cluster, pods))) == 2, 90, "two to bind")
        time.sleep(3)
        assert sum(map(bool, nodes_of(cluster, pods))) == 2  # the third waits for room
    finally:
        clean(cluster, pods, ["elastic"])


def job(name: str, group: str, pods: int) -> dict[str, Any]:
    """The README's example: a Job whose pods name the PodGroup."""
    template = member(f"{name}-pod", group, 1)
    template["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "template": {"metadata": {"labels": {}}, "spec": template["spec"]},
        },
    }


def test_a_job_naming_a_podgroup_binds_as_one_gang(cluster: Cluster, agent, scheduler) -> None:
    try:
        create(cluster, podgroup("job-gang", 2), job("train", "job-gang", 2))

        def bound() -> list[str]:
            found = json.loads(cluster.kubectl("get", "pods", "-l", "job-name=train", "-o", "json"))
            groups = {str(p["spec"].get("schedulingGroup")) for p in found["items"]}
            assert groups <= {str({"podGroupName": "job-gang"})}, groups
            return [p["spec"].get("nodeName") for p in found["items"]]

        wait_until(lambda: len(bound()) == 2 and all(bound()), 90, "the Job's 2 pods to bind")
        wait_until(lambda: condition(cluster, "job-gang").get("status") == "True", 60, "Scheduled")
    finally:
        cluster.kubectl("delete", "job", "train", "--ignore-not-found", "--cascade=foreground")
        clean(cluster, [], ["job-gang"])


def test_what_gputopo_cannot_honour_is_refused_with_the_reason(
    cluster: Cluster, agent, scheduler
) -> None:
    both = "both-0"
    try:
        create(cluster, podgroup("both", 1))
        named_twice = member(both, "both", 1)
        named_twice["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "both"}
        create(cluster, named_twice)
        wait_until(
            lambda: "names two pod groups" in cluster.scheduled_message(both), 60, "both refused"
        )
        assert nodes_of(cluster, [both]) == [None]
    finally:
        clean(cluster, [both], ["both"])


def test_a_gang_whose_pods_lack_its_priority_is_refused_alike(
    cluster: Cluster, agent, scheduler
) -> None:
    """A PodGroup naming a PriorityClass of 1000 whose pods name none (priority 0): kube-scheduler
    does not try it and says why in a SchedulerError condition; gputopo-scheduler the same, in
    the same words, and neither binds a pod."""
    ours, theirs = ["prio-ours-0"], ["prio-theirs-0"]
    urgent: dict[str, Any] = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass"}
    urgent.update({"metadata": {"name": "gang-urgent"}, "value": 1000})
    try:
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(urgent))
        for group, names, name in (("prio-ours", ours, SCHEDULER), ("prio-theirs", theirs, None)):
            create(cluster, podgroup(group, 1, priorityClassName="gang-urgent"))
            create(cluster, *(member(n, group, 1, scheduler=name) for n in names))
        for group in ("prio-ours", "prio-theirs"):
            wait_until(lambda g=group: condition(cluster, g), 60, f"{group}'s condition")
        found = [condition(cluster, g) for g in ("prio-ours", "prio-theirs")]
        assert [(c["status"], c["reason"]) for c in found] == [("False", "SchedulerError")] * 2
        assert found[0]["message"] == found[1]["message"]
        assert "got 0 and 1000" in found[0]["message"]
        assert nodes_of(cluster, ours + theirs) == [None, None]
    finally:
        clean(cluster, ours + theirs, ["prio-ours", "prio-theirs"])
        cluster.kubectl("delete", "priorityclass", "gang-urgent", "--ignore-not-found")
