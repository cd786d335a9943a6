"""CompositePodGroups (`scheduling.k8s.io/v1alpha3`, 1.37 alpha) against the fake API server with
the real client: a tree of PodGroups is one gang, held back until its root would be satisfied by
the pods that exist and bound only when the pods placed satisfy it, as kube-scheduler 1.37.2
schedules it (`scheduler.runtime.cluster.composite`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from tests.builders.claimcluster import (
    claim_pod,
    deallocate,
    devices_of,
    dra_cluster,
    gpu_claim,
)
from tests.builders.scheduler import (
    bound_pods,
    create_pod,
    delete_pod,
    evicted_pods,
    gpu_node,
    node_of,
    pod_body,
    running,
    scheduled_condition,
    wait_for,
)
from tests.builders.workloads import (
    child_podgroup,
    composite_podgroup,
    create_composite,
    create_upstream_podgroup,
    member_pod,
    upstream_condition,
)

pytestmark = pytest.mark.timeout(60)
RACK = "gputopo.io/rack"


@pytest.fixture
def composites(fake_api):
    fake_api.serve_workload_api(("v1beta1", "v1alpha3"), composite_gate=True)
    return fake_api


def _group(
    core, custom, name: str, parent: str, pods: int, gpus: int, min_count: int, **spec
) -> set[str]:
    """PodGroup `name` under `parent` (minCount `min_count`) and its `pods` pods (`spec`: more
    of their spec)."""
    create_upstream_podgroup(custom, child_podgroup(name, min_count, parent))
    names = {f"{name}-{i}" for i in range(pods)}
    for pod in sorted(names):
        create_pod(core, member_pod(pod, name, gpus=gpus, **spec))
    return names


def test_the_tree_binds_all_or_nothing(composites, core_v1, custom_objects):
    """minGroupCount 2 of two PodGroups of 2 x 2 GPUs: 8 GPUs. On 6 either group alone would
    fit (and as gangs of their own each would bind); neither may. A second node brings room for
    both, and all four bind."""
    gpu_node(composites, "n1", gpus=6)
    with running(composites):
        create_composite(custom_objects, composite_podgroup("job", 2))
        pods = _group(core_v1, custom_objects, "a", "job", 2, gpus=2, min_count=2)
        pods |= _group(core_v1, custom_objects, "b", "job", 2, gpus=2, min_count=2)
        found = wait_for(lambda: upstream_condition(composites, "a"), 5, "a's condition")
        assert (found["status"], found["reason"]) == ("False", "Unschedulable")
        assert "CompositePodGroup default/job (scheduling.k8s.io)" in found["message"]
        time.sleep(0.5)
        assert not pods & set(bound_pods(composites))
        gpu_node(composites, "n2", gpus=2)
        wait_for(lambda: pods <= set(bound_pods(composites)), 10, "the whole tree to bind")
        for name in "ab":
            done = wait_for(
                lambda n=name: (
                    (upstream_condition(composites, n) or {}).get("status") == "True"
                    and upstream_condition(composites, n)
                ),
                5,
                f"{name} Scheduled",
            )
            assert done["reason"] == "Scheduled"


def test_the_tree_waits_for_the_pods_its_root_needs(composites, core_v1, custom_objects):
    gpu_node(composites, "n1", gpus=8)
    with running(composites):
        create_composite(custom_objects, composite_podgroup("job", 2))
        first = _group(core_v1, custom_objects, "a", "job", 2, gpus=1, min_count=2)
        create_upstream_podgroup(custom_objects, child_podgroup("b", 2, "job"))
        create_pod(core_v1, member_pod("b-0", "b"))
        condition = wait_for(lambda: scheduled_condition(composites, "a-0"), 5, "PodScheduled")
        assert (
            "waiting for CompositePodGroup default/job (scheduling.k8s.io): fewer than "
            "minGroupCount (2) of its groups have their minimum of pods" in condition["message"]
        )
        assert not first & set(bound_pods(composites))
        create_pod(core_v1, member_pod("b-1", "b"))
        wait_for(lambda: first | {"b-0", "b-1"} <= set(bound_pods(composites)), 5, "the tree")


def test_one_group_of_two_starts_a_basic_composite(composites, core_v1, custom_objects):
    """A `basic` root is satisfied by one child: of two PodGroups of 4 x 1 GPU on 6 GPUs, the
    first created binds whole, and the second waits as a gang of its own (none of its pods
    binds on the 2 GPUs left), then binds once room comes."""
    gpu_node(composites, "n1", gpus=6)
    with running(composites):
        create_composite(custom_objects, composite_podgroup("job"))
        first = _group(core_v1, custom_objects, "a", "job", 4, gpus=1, min_count=4)
        time.sleep(0.05)  # b is created after a: a comes first
        second = _group(core_v1, custom_objects, "b", "job", 4, gpus=1, min_count=4)
        wait_for(lambda: first <= set(bound_pods(composites)), 5, "the first group")
        time.sleep(0.5)
        assert not second & set(bound_pods(composites))
        for pod in sorted(first)[:2]:
            delete_pod(core_v1, pod)
        wait_for(lambda: second <= set(bound_pods(composites)), 10, "the second group")


def test_nested_replicas_start_together(composites, core_v1, custom_objects):
    """A job of two replicas (minGroupCount 2), each a leader and two workers (minGroupCount
    2): eleven pods need 10 GPUs; on 8, nothing binds; on 8 + 4, all of them."""
    gpu_node(composites, "n1", gpus=8)
    with running(composites):
        create_composite(custom_objects, composite_podgroup("job", 2))
        pods: set[str] = set()
        for r in range(2):
            create_composite(custom_objects, composite_podgroup(f"replica-{r}", 2, parent="job"))
            pods |= _group(core_v1, custom_objects, f"r{r}-lead", f"replica-{r}", 1, 2, 1)
            pods |= _group(core_v1, custom_objects, f"r{r}-work", f"replica-{r}", 2, 2, 2)
        wait_for(lambda: scheduled_condition(composites, "r1-work-1"), 5, "PodScheduled")
        time.sleep(0.5)
        assert not pods & set(bound_pods(composites))
        gpu_node(composites, "n2", gpus=4)
        wait_for(lambda: pods <= set(bound_pods(composites)), 10, "both replicas")


def test_the_roots_topology_keeps_the_tree_in_one_rack(composites, core_v1, custom_objects):
    for node, rack in (("n1", "r1"), ("n2", "r2"), ("n3", "r2")):
        gpu_node(composites, node, gpus=4, labels={RACK: rack})
    with running(composites):
        create_composite(custom_objects, composite_podgroup("job", 2, topology=RACK))
        pods = _group(core_v1, custom_objects, "a", "job", 2, gpus=2, min_count=2)
        pods |= _group(core_v1, custom_objects, "b", "job", 2, gpus=2, min_count=2)
        wait_for(lambda: pods <= set(bound_pods(composites)), 10, "the tree to bind")
        nodes = set(bound_pods(composites).values())
        assert nodes == {"n2", "n3"}  # 8 GPUs in one rack: r2's two nodes, never r1's


def test_a_deleted_root_leaves_its_groups_waiting_for_it(composites, core_v1, custom_objects):
    gpu_node(composites, "n1", gpus=1)
    with running(composites):
        create_composite(custom_objects, composite_podgroup("job", 1))
        pods = _group(core_v1, custom_objects, "a", "job", 2, gpus=1, min_count=2)
        wait_for(lambda: scheduled_condition(composites, "a-0"), 5, "PodScheduled")
        custom_objects.delete_namespaced_custom_object(
            "scheduling.k8s.io", "v1alpha3", "default", "compositepodgroups", "job"
        )
        wait_for(
            lambda: (
                'CompositePodGroup "default/job" not found'
                in (scheduled_condition(composites, "a-0") or {}).get("message", "")
            ),
            5,
            "the pods to wait for their root",
        )
        assert not pods & set(bound_pods(composites))


@pytest.mark.parametrize(
    ("min_groups", "victims"),
    [
        pytest.param(1, 1, id="one group of two"),
        pytest.param(2, 2, id="both groups"),
    ],
)
def test_a_tree_evicts_for_the_fewest_pods_that_satisfy_its_root(
    composites, core_v1, custom_objects, min_groups, victims
):
    """Two 4-GPU pods of priority 0 fill an 8-GPU node. A tree of priority 1000 (its root's
    class, made last: all four pods are pending when it is first tried) over two PodGroups of
    2 x 2 GPUs evicts one pod when one group satisfies its root, both when it needs both, and
    binds what it evicted for."""
    gpu_node(composites, "n1", gpus=8)
    client.SchedulingV1Api(core_v1.api_client).create_priority_class(
        {"metadata": {"name": "high"}, "value": 1000}, _preload_content=False
    )
    with running(composites):
        for i in range(2):
            create_pod(core_v1, pod_body(f"low-{i}", gpus=4, terminationGracePeriodSeconds=0))
        wait_for(lambda: {"low-0", "low-1"} <= set(bound_pods(composites)), 5, "low bound")
        high = {"priorityClassName": "high"}  # kube: every pod has the root's priority
        first = _group(core_v1, custom_objects, "a", "job", 2, gpus=2, min_count=2, **high)
        time.sleep(0.05)
        second = _group(core_v1, custom_objects, "b", "job", 2, gpus=2, min_count=2, **high)
        time.sleep(0.3)  # every pod waits for the root; then the tree is tried once, whole
        root = composite_podgroup("job", min_groups, priorityClassName="high")
        create_composite(custom_objects, root)
        wanted = first if min_groups == 1 else first | second
        wait_for(lambda: wanted <= set(bound_pods(composites)), 10, "the tree after preempting")
        time.sleep(0.5)
    evicted = evicted_pods(composites)
    assert evicted <= {"low-0", "low-1"}
    assert len(evicted) == victims


def _racks_of(fake, pods: set[str]) -> set[str]:
    nodes = {name: node for name, node in bound_pods(fake).items() if name in pods}
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in fake.list_objects("nodes")}
    return {labels[node][RACK] for node in nodes.values()}


def _racked_groups(
    core, custom, make: Callable[[str, str], dict[str, Any]] | None = None, **spec
) -> dict[str, set[str]]:
    """PodGroups a and b under root `job`, each 2 x 4 GPUs (minCount 2) in one rack of its own
    (its topology); their pods' names, by group (`spec`: more of the pods' spec; `make`: each
    pod's body from its name and group, instead)."""
    groups = {}
    for side in "ab":
        constraints = {"topology": [{"key": RACK}]}
        create_upstream_podgroup(
            custom, child_podgroup(side, 2, "job", schedulingConstraints=constraints)
        )
        groups[side] = {f"{side}-{i}" for i in range(2)}
        for pod in sorted(groups[side]):
            body = member_pod(pod, side, gpus=4, **spec) if make is None else make(pod, side)
            create_pod(core, body)
    return groups


def test_each_podgroup_in_a_rack_of_its_own_or_none(composites, core_v1, custom_objects):
    """Two PodGroups, each of 2 x 4 GPUs in one rack (its own topology), under a root of
    minGroupCount 2. Racks r1 and r2 hold 8 GPUs each, r3 4: while r2 is full, a would fit r1
    and b nowhere, so neither binds; once r2 empties, each binds whole in a rack of its own."""
    for node, rack in (("n1", "r1"), ("n2", "r1"), ("n3", "r2"), ("n4", "r2"), ("n5", "r3")):
        gpu_node(composites, node, gpus=4, labels={RACK: rack})
    with running(composites):
        for node in ("n3", "n4"):
            create_pod(core_v1, pod_body(f"filler-{node}", gpus=4, nodeName=node))
        create_composite(custom_objects, composite_podgroup("job", 2))
        groups = _racked_groups(core_v1, custom_objects)
        both = groups["a"] | groups["b"]
        wait_for(lambda: scheduled_condition(composites, "b-1"), 5, "PodScheduled")
        time.sleep(0.5)
        assert not both & set(bound_pods(composites))
        for node in ("n3", "n4"):
            delete_pod(core_v1, f"filler-{node}")
        wait_for(lambda: both <= set(bound_pods(composites)), 10, "the tree to bind")
    racks = [_racks_of(composites, groups[side]) for side in "ab"]
    assert all(len(r) == 1 for r in racks)  # each PodGroup inside one rack
    assert racks[0] != racks[1]  # 8 GPUs each: a rack of its own
    assert racks[0] | racks[1] == {"r1", "r2"}


def test_a_tree_evicts_for_a_rack_per_podgroup(composites, core_v1, custom_objects):
    """Racks r1, r2, r3 of two 4-GPU nodes each. Priority-0 pods hold 2 GPUs on each node of
    r2 (made first, the oldest) and 4 on one node of r1; r3 is empty. A tree of priority 1000
    over two PodGroups of 2 x 4 GPUs, each in one rack (its own topology), evicts: the search
    places it group by group as the tracker does, so it takes r1's one pod (r3 and r1 then hold
    a PodGroup each) and gives back the older pods of r2, and each group binds in a rack of its
    own."""
    racks = {"n1": "r1", "n2": "r1", "n3": "r2", "n4": "r2", "n5": "r3", "n6": "r3"}
    for node, rack in racks.items():
        gpu_node(composites, node, gpus=4, labels={RACK: rack})
    client.SchedulingV1Api(core_v1.api_client).create_priority_class(
        {"metadata": {"name": "high"}, "value": 1000}, _preload_content=False
    )
    low = {"low-n3": 2, "low-n4": 2, "low-n1": 4}
    with running(composites):
        for name, gpus in low.items():
            if name == "low-n1":
                time.sleep(1.1)  # a second after r2's pods: start stamps are in seconds
            body = pod_body(name, gpus=gpus, nodeName=name[4:], terminationGracePeriodSeconds=0)
            create_pod(core_v1, body)
        wait_for(lambda: set(low) <= set(bound_pods(composites)), 5, "the low pods bound")
        groups = _racked_groups(core_v1, custom_objects, priorityClassName="high")
        time.sleep(0.3)  # every pod waits for the root; then the tree is tried once, whole
        create_composite(custom_objects, composite_podgroup("job", 2, priorityClassName="high"))
        both = groups["a"] | groups["b"]
        wait_for(lambda: both <= set(bound_pods(composites)), 10, "the tree after preempting")
    assert evicted_pods(composites) == {"low-n1"}
    placed = [_racks_of(composites, groups[side]) for side in "ab"]
    assert all(len(r) == 1 for r in placed)  # each PodGroup inside one rack
    assert placed[0] | placed[1] == {"r1", "r3"}


def test_each_replica_in_one_rack(composites, core_v1, custom_objects):
    """Replicas (CompositePodGroups with a rack topology), each a leader and a worker group of
    2 GPUs, under a root of both replicas; 2 GPUs a node, racks r1 and r2 of two nodes, r3 of
    one. While a pod fills one of r1's nodes, 8 GPUs are free but only r2 holds a replica:
    nothing binds. Once it goes, each replica binds inside a rack of its own."""
    for i, rack in enumerate(("r1", "r1", "r2", "r2", "r3")):
        gpu_node(composites, f"n{i}", gpus=2, labels={RACK: rack})
    with running(composites):
        create_pod(core_v1, pod_body("filler", gpus=2, nodeName="n1"))
        create_composite(custom_objects, composite_podgroup("job", 2))
        replicas: dict[int, set[str]] = {}
        for r in range(2):
            create_composite(
                custom_objects, composite_podgroup(f"replica-{r}", 2, parent="job", topology=RACK)
            )
            replicas[r] = _group(core_v1, custom_objects, f"r{r}-lead", f"replica-{r}", 1, 2, 1)
            replicas[r] |= _group(core_v1, custom_objects, f"r{r}-work", f"replica-{r}", 1, 2, 1)
        every = replicas[0] | replicas[1]
        wait_for(lambda: scheduled_condition(composites, "r1-work-0"), 5, "PodScheduled")
        time.sleep(0.5)
        assert not every & set(bound_pods(composites))
        delete_pod(core_v1, "filler")
        wait_for(lambda: every <= set(bound_pods(composites)), 10, "both replicas")
    racks = [_racks_of(composites, replicas[r]) for r in range(2)]
    assert all(len(r) == 1 for r in racks)
    assert racks[0] | racks[1] == {"r1", "r2"}


@pytest.mark.parametrize(
    ("mode", "victims"),
    [
        pytest.param("single", 2, id="single: one PodGroup, whole"),
        pytest.param("all", 4, id="all: the whole tree"),
    ],
)
def test_disruption_mode_all_evicts_the_whole_tree(
    composites, core_v1, custom_objects, mode, victims
):
    """A running tree of two PodGroups of 2 x 2 GPUs (minCount 2) fills an 8-GPU node. A pod
    of priority 1000 asking 2 GPUs evicts one PodGroup (both its pods: minCount 2) under a
    root of `single`, every pod of the tree under `all`."""
    gpu_node(composites, "n1", gpus=8)
    client.SchedulingV1Api(core_v1.api_client).create_priority_class(
        {"metadata": {"name": "high"}, "value": 1000}, _preload_content=False
    )
    with running(composites):
        create_composite(custom_objects, composite_podgroup("job", 2, disruptionMode={mode: {}}))
        pods: set[str] = set()
        for side in "ab":
            create_upstream_podgroup(custom_objects, child_podgroup(side, 2, "job"))
            for i in range(2):
                name = f"{side}-{i}"
                body = member_pod(name, side, gpus=2, terminationGracePeriodSeconds=0)
                create_pod(core_v1, body)
                pods.add(name)
        wait_for(lambda: pods <= set(bound_pods(composites)), 5, "the tree bound")
        create_pod(core_v1, pod_body("urgent", gpus=2, priorityClassName="high"))
        wait_for(lambda: "urgent" in bound_pods(composites), 10, "the preemptor bound")
    evicted = evicted_pods(composites)
    assert evicted <= pods
    assert len(evicted) == victims


def test_a_tree_whose_pods_have_claims_evicts_for_a_rack_per_podgroup(
    composites, core_v1, custom_objects
):
    """Racks r1 (n1, n2) and r2 (n3, n4) of 8-GPU nodes published as ResourceSlices, each node
    held whole by a priority-0 pod's 8-GPU claim. A tree of priority 1000 over PodGroups a and
    b, each of 2 pods with a 4-GPU claim apiece and each in one rack (its own topology): the
    search places the groups' claims with the walk, so it evicts two pods, not four, and once
    their claims are deallocated each group binds inside one rack on devices the victims
    freed (before, such a tree never preempted)."""
    dra_cluster(composites, ("n1", "n2", "n3", "n4"), racks=("r1", "r1", "r2", "r2"))
    client.SchedulingV1Api(core_v1.api_client).create_priority_class(
        {"metadata": {"name": "high"}, "value": 1000}, _preload_content=False
    )
    low = ["low-1", "low-2", "low-3", "low-4"]
    with running(composites):
        _held_whole_by_claims(composites, core_v1, low)

        def claiming(pod: str, side: str) -> dict[str, Any]:
            composites.put_object("resourceclaims", gpu_claim(f"{pod}-gpus", 4))
            body = member_pod(pod, side, gpus=0, priorityClassName="high")
            body["spec"]["resourceClaims"] = [{"name": "g", "resourceClaimName": f"{pod}-gpus"}]
            return body

        groups = _racked_groups(core_v1, custom_objects, make=claiming)
        time.sleep(0.3)  # every pod waits for the root; then the tree is tried once, whole
        create_composite(custom_objects, composite_podgroup("job", 2, priorityClassName="high"))
        wait_for(lambda: len(_terminating(composites)) == 2, 10, "two victims terminating")
        victims = _terminating(composites)
        freed = {(node_of(composites, v), d) for v in victims for d in devices_of(composites, v)}
        composites.complete_pod_deletions()
        for victim in victims:
            deallocate(composites, victim)
        both = groups["a"] | groups["b"]
        wait_for(lambda: both <= set(bound_pods(composites)), 10, "the tree after preempting")
    assert evicted_pods(composites) == victims
    placed = [_racks_of(composites, groups[side]) for side in "ab"]
    assert all(len(r) == 1 for r in placed)  # each PodGroup inside one rack
    taken = {(node_of(composites, p), d) for p in both for d in devices_of(composites, f"{p}-gpus")}
    assert len(taken) == 16
    assert taken == freed


def test_a_claim_two_podgroups_of_a_tree_share_is_counted_once_when_it_evicts(
    composites, core_v1, custom_objects
):
    """Rack r1 of two 8-GPU nodes, each held whole by a priority-0 pod's 8-GPU claim. A tree
    of priority 1000 over PodGroups a and b of one pod each, both pods using one 6-GPU claim,
    each group in one rack: the claim is allocated once, on one node, so one eviction makes
    room (counted once per group, the search would ask 12 GPUs and evict both)."""
    dra_cluster(composites, ("n1", "n2"), racks=("r1", "r1"))
    client.SchedulingV1Api(core_v1.api_client).create_priority_class(
        {"metadata": {"name": "high"}, "value": 1000}, _preload_content=False
    )
    low = ["low-1", "low-2"]
    with running(composites):
        _held_whole_by_claims(composites, core_v1, low)
        composites.put_object("resourceclaims", gpu_claim("shared", 6))
        members = ["a-0", "b-0"]
        for side, pod in zip("ab", members, strict=True):
            constraints = {"topology": [{"key": RACK}]}
            create_upstream_podgroup(
                custom_objects, child_podgroup(side, 1, "job", schedulingConstraints=constraints)
            )
            body = member_pod(pod, side, gpus=0, priorityClassName="high")
            body["spec"]["resourceClaims"] = [{"name": "g", "resourceClaimName": "shared"}]
            create_pod(core_v1, body)
        time.sleep(0.3)
        create_composite(custom_objects, composite_podgroup("job", 2, priorityClassName="high"))
        wait_for(lambda: _terminating(composites), 10, "a victim terminating")
        time.sleep(1.0)  # the tree is tried again meanwhile: no second victim
        victims = _terminating(composites)
        freed = {node_of(composites, v) for v in victims}
        composites.complete_pod_deletions()
        for victim in victims:
            deallocate(composites, victim)
        wait_for(lambda: set(members) <= set(bound_pods(composites)), 10, "the tree")
    assert len(victims) == 1
    assert evicted_pods(composites) == victims
    assert {node_of(composites, p) for p in members} == freed
    assert len(devices_of(composites, "shared")) == 6


def _held_whole_by_claims(fake, core, names: list[str]) -> None:
    """A pod of priority 0 with its own 8-GPU claim for each of `names`, each bound before the
    next (every node of the DRA cluster has 8 GPUs: each holds one whole)."""
    for name in names:
        fake.put_object("resourceclaims", gpu_claim(name, 8))
        body = claim_pod(name, name)
        body["spec"]["terminationGracePeriodSeconds"] = 30
        create_pod(core, body)
        wait_for(lambda n=name: node_of(fake, n), 5, f"{name} bound")


def _terminating(fake) -> set[str]:
    return {
        p["metadata"]["name"]
        for p in fake.list_objects("pods", "default")
        if p["metadata"].get("deletionTimestamp")
    }
