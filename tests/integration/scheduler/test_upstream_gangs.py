"""Upstream gangs (`scheduling.k8s.io` PodGroups, DESIGN §15) against the fake API server with the
real client: every field the scheduler reads, the discovered version, refusals and a malformed
group."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from tests.builders.queues import create_queue, queue_body
from tests.builders.scheduler import (
    bound_pods,
    create_pod,
    create_podgroup,
    events_for,
    evicted_pods,
    gpu_node,
    pod_body,
    podgroup,
    running,
    scheduled_condition,
    wait_for,
)
from tests.builders.workloads import (
    PODGROUPS,
    create_upstream_podgroup,
    member_pod,
    upstream_condition,
    upstream_podgroup,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def upstream(fake_api):
    fake_api.serve_workload_api(("v1beta1", "v1alpha3"))
    return fake_api


def _members(core, group: str, count: int, gpus: int, **kw) -> set[str]:
    names = {f"{group}-{i}" for i in range(count)}
    for name in sorted(names):
        create_pod(core, member_pod(name, group, gpus=gpus, **kw))
    return names


@pytest.mark.parametrize(
    ("served", "version", "condition"),
    [
        pytest.param(("v1beta1", "v1alpha3"), "v1beta1", "PodGroupInitiallyScheduled", id="1.37"),
        pytest.param(("v1alpha3",), "v1alpha3", "PodGroupInitiallyScheduled", id="alpha only"),
        pytest.param(("v1alpha2",), "v1alpha2", "PodGroupScheduled", id="1.36"),
    ],
)
@pytest.mark.parametrize("listed", [False, True], ids=["made after the start", "listed"])
def test_the_served_version_is_read_and_its_condition_written(
    fake_api, core_v1, custom_objects, served, version, condition, listed
):
    """`listed`: the group and its pods are there before the scheduler starts. A list's items
    carry no apiVersion (the server leaves it out for a built-in kind), yet the status goes to
    the served version and names its condition; on 1.36 the group carries the `disruptionMode`
    string the server defaulted (both found on a real 1.36.3: `scripts/realk8s/check-1.36.sh`)."""
    fake_api.serve_workload_api(served)
    gpu_node(fake_api, "n1", gpus=8)

    def make() -> set[str]:
        create_upstream_podgroup(custom_objects, upstream_podgroup("g", 2, version=version))
        return _members(core_v1, "g", 2, gpus=2)

    names = make() if listed else set()
    with running(fake_api) as runtime:
        assert runtime.upstream is not None
        assert runtime.upstream.version == version
        names = names or make()
        wait_for(lambda: names <= set(bound_pods(fake_api)), 5, "the gang to bind")
        found = wait_for(
            lambda: (
                (upstream_condition(fake_api, "g", condition) or {}).get("status") == "True"
                and upstream_condition(fake_api, "g", condition)
            ),
            5,
            "condition True",
        )
    assert (found["status"], found["reason"]) == ("True", "Scheduled")
    patched = {r.path for r in fake_api.writes() if r.path.endswith("/podgroups/g/status")}
    assert patched == {f"/apis/scheduling.k8s.io/{version}/namespaces/default/podgroups/g/status"}


def test_without_the_workload_api_our_gangs_still_schedule(fake_api, core_v1, custom_objects):
    gpu_node(fake_api, "n1", gpus=8)
    with running(fake_api) as runtime:
        assert runtime.upstream is None
        create_podgroup(custom_objects, podgroup("ours", 2))
        labels = {"scheduling.x-k8s.io/pod-group": "ours"}
        for i in range(2):
            create_pod(core_v1, pod_body(f"ours-{i}", gpus=1, labels=labels))
        wait_for(lambda: {"ours-0", "ours-1"} <= set(bound_pods(fake_api)), 5, "our gang")
    assert not [
        r for r in fake_api.requests if "/apis/scheduling.k8s.io/v1beta1/podgroups" in r.path
    ]


def test_min_count_binds_all_or_nothing(upstream, core_v1, custom_objects):
    gpu_node(upstream, "n1", gpus=6)  # 4 pods x 4 GPUs cannot all fit; one would
    with running(upstream):
        create_upstream_podgroup(custom_objects, upstream_podgroup("big", 4))
        big = _members(core_v1, "big", 4, gpus=4)
        found = wait_for(
            lambda: upstream_condition(upstream, "big"), 5, "the Unschedulable condition"
        )
        assert (found["status"], found["reason"]) == ("False", "Unschedulable")
        time.sleep(0.5)
        assert not big & set(bound_pods(upstream))
        create_upstream_podgroup(custom_objects, upstream_podgroup("fits", 4))
        fits = _members(core_v1, "fits", 4, gpus=1)
        wait_for(lambda: fits <= set(bound_pods(upstream)), 5, "the 4 x 1 GPU gang")
        done = wait_for(
            lambda: (upstream_condition(upstream, "fits") or {}).get("status") == "True",
            5,
            "Scheduled",
        )
    assert done
    assert not big & set(bound_pods(upstream))


def test_fewer_members_than_min_count_wait_naming_the_group(upstream, core_v1, custom_objects):
    gpu_node(upstream, "n1", gpus=8)
    with running(upstream):
        create_upstream_podgroup(custom_objects, upstream_podgroup("g", 3))
        _members(core_v1, "g", 2, gpus=1)
        condition = wait_for(lambda: scheduled_condition(upstream, "g-0"), 5, "PodScheduled")
        assert "PodGroup default/g (scheduling.k8s.io)" in condition["message"]
        assert "minCount (3)" in condition["message"]
        create_pod(core_v1, member_pod("g-2", "g"))
        wait_for(lambda: {"g-0", "g-1", "g-2"} <= set(bound_pods(upstream)), 5, "the gang")


def test_basic_places_members_one_by_one(upstream, core_v1, custom_objects):
    gpu_node(upstream, "n1", gpus=8)
    with running(upstream):
        create_upstream_podgroup(custom_objects, upstream_podgroup("b"))
        _members(core_v1, "b", 3, gpus=4)  # two fit; a gang of three would bind none
        wait_for(lambda: len(set(bound_pods(upstream)) & {"b-0", "b-1", "b-2"}) == 2, 5, "two")
        time.sleep(0.3)
    assert len(set(bound_pods(upstream)) & {"b-0", "b-1", "b-2"}) == 2


def test_a_topology_key_keeps_the_gang_in_one_domain(upstream, core_v1, custom_objects):
    for name, rack in (("a1", "a"), ("a2", "a"), ("b1", "b"), ("b2", "b")):
        gpu_node(upstream, name, gpus=4, labels={"gputopo.io/rack": rack})
    with running(upstream):
        body = upstream_podgroup("t", 4, topology="gputopo.io/rack")
        create_upstream_podgroup(custom_objects, body)
        names = _members(core_v1, "t", 4, gpus=2)
        wait_for(lambda: names <= set(bound_pods(upstream)), 5, "the gang")
    racks = {
        upstream.get_object("nodes", n)["metadata"]["labels"]["gputopo.io/rack"]
        for n in (bound_pods(upstream)[p] for p in names)
    }
    assert len(racks) == 1


def test_a_pod_naming_both_apis_is_refused(upstream, core_v1, custom_objects):
    gpu_node(upstream, "n1", gpus=8)
    with running(upstream):
        create_upstream_podgroup(custom_objects, upstream_podgroup("g", 1))
        create_podgroup(custom_objects, podgroup("ours", 1))
        labels = {"scheduling.x-k8s.io/pod-group": "ours"}
        create_pod(core_v1, member_pod("both", "g", labels=labels))
        condition = wait_for(lambda: scheduled_condition(upstream, "both"), 5, "PodScheduled")
        events = wait_for(lambda: events_for(upstream, "both"), 5, "an Event")
    assert "names two pod groups" in condition["message"]
    assert events[0]["reason"] == "FailedScheduling"
    assert "spec.schedulingGroup" in events[0]["message"]
    assert "both" not in bound_pods(upstream)


def test_a_malformed_group_is_named_and_the_rest_keeps_scheduling(
    upstream, core_v1, custom_objects
):
    gpu_node(upstream, "n1", gpus=8)
    bad = upstream_podgroup("bad", 2)
    bad["spec"]["schedulingPolicy"] = {"elastic": {"minCount": 2}}  # a newer server's policy
    upstream.put_object(PODGROUPS, bad)
    with running(upstream):
        create_pod(core_v1, member_pod("bad-0", "bad"))
        create_upstream_podgroup(custom_objects, upstream_podgroup("good", 2))
        good = _members(core_v1, "good", 2, gpus=1)
        wait_for(lambda: good <= set(bound_pods(upstream)), 5, "the good gang")
        pod = wait_for(lambda: scheduled_condition(upstream, "bad-0"), 5, "PodScheduled")
    message = pod["message"]
    assert "PodGroup default/bad (scheduling.k8s.io)" in message
    assert "spec.schedulingPolicy: must set exactly one of basic, gang (got elastic)" in message


def test_our_group_and_an_upstream_one_of_one_name_are_two_gangs(upstream, core_v1, custom_objects):
    gpu_node(upstream, "n1", gpus=8)
    with running(upstream):
        create_podgroup(custom_objects, podgroup("same", 2))
        create_upstream_podgroup(custom_objects, upstream_podgroup("same", 3))
        labels = {"scheduling.x-k8s.io/pod-group": "same"}
        for i in range(2):
            create_pod(core_v1, pod_body(f"ours-{i}", gpus=1, labels=labels))
        upstream_names = _members(core_v1, "same", 2, gpus=1)  # 2 of minCount 3: waits
        wait_for(lambda: {"ours-0", "ours-1"} <= set(bound_pods(upstream)), 5, "our gang")
        time.sleep(0.3)
    assert not upstream_names & set(bound_pods(upstream))


def _priority_class(core, name: str, value: int) -> None:
    client.SchedulingV1Api(core.api_client).create_priority_class(
        {"metadata": {"name": name}, "value": value}, _preload_content=False
    )


def _beside_low(fake, core, custom, group_class: str | None, pod_class: str | None) -> set[str]:
    """An 8-GPU pod `low` bound, then gang `hi` of 2 x 4 GPUs, the group and its pods naming
    those classes (None: none); the gang's pod names."""
    create_pod(core, pod_body("low", gpus=8, terminationGracePeriodSeconds=0))
    wait_for(lambda: "low" in bound_pods(fake), 5, "low bound")
    extra = {"priorityClassName": group_class} if group_class else {}
    create_upstream_podgroup(custom, upstream_podgroup("hi", 2, **extra))
    own = {"priorityClassName": pod_class} if pod_class else {}
    return _members(core, "hi", 2, gpus=4, terminationGracePeriodSeconds=0, **own)


@pytest.mark.parametrize(
    ("group_class", "pod_class", "evicts"),
    [
        pytest.param("high", "high", True, id="the group's class, its pods' too, preempts"),
        pytest.param(None, None, False, id="no class: priority 0 does not"),
    ],
)
def test_the_group_priority_class_feeds_preemption(
    upstream, core_v1, custom_objects, group_class, pod_class, evicts
):
    gpu_node(upstream, "n1", gpus=8)
    _priority_class(core_v1, "high", 1000)
    with running(upstream):
        names = _beside_low(upstream, core_v1, custom_objects, group_class, pod_class)
        if evicts:
            wait_for(lambda: names <= set(bound_pods(upstream)), 10, "the gang after preempting")
        else:
            wait_for(lambda: scheduled_condition(upstream, "hi-0"), 5, "the gang waiting")
            time.sleep(0.5)
    assert (evicted_pods(upstream) == {"low"}) is evicts


@pytest.mark.parametrize(
    ("group_class", "pod_class", "refusal"),
    [
        pytest.param(
            "high",
            None,
            "same priority as the pod group's priority, got 0 and 1000",
            id="the group's class, not its pods'",
        ),
        pytest.param(
            None,
            "high",
            "same priority as the pod group's priority, got 1000 and 0",
            id="its pods' class, not the group's",
        ),
    ],
)
def test_a_gang_whose_pods_priority_is_not_the_groups_is_refused_as_kube_does(
    upstream, core_v1, custom_objects, group_class, pod_class, refusal
):
    """kube-scheduler 1.37 tries a gang only when every pod has its group's priority (0 for a
    group without a class); else each pod and the group say why (`SchedulerError`), and nothing
    is evicted for it."""
    gpu_node(upstream, "n1", gpus=8)
    _priority_class(core_v1, "high", 1000)
    with running(upstream):
        _beside_low(upstream, core_v1, custom_objects, group_class, pod_class)

        def tried() -> dict | None:  # past "waiting for ... pods exist"
            found = upstream_condition(upstream, "hi")
            return found if found and "pods exist" not in found["message"] else None

        condition = wait_for(tried, 5, "the condition once both pods exist")
        time.sleep(0.3)
        pod = scheduled_condition(upstream, "hi-0")
    expected = f"all pods in a single pod group should have the {refusal}"
    assert (condition["reason"], condition["message"]) == ("SchedulerError", expected)
    assert pod is not None
    assert expected in pod["message"]
    assert evicted_pods(upstream) == set()


@pytest.mark.parametrize(
    ("mode", "victims"),
    [
        pytest.param("single", 1, id="single: a member above minCount alone"),
        pytest.param("all", 4, id="all: the whole group"),
    ],
)
def test_disruption_mode_all_evicts_the_group_whole(
    upstream, core_v1, custom_objects, mode, victims
):
    gpu_node(upstream, "n1", gpus=8)
    _priority_class(core_v1, "high", 1000)
    with running(upstream):
        body = upstream_podgroup("v", 2, disruptionMode={mode: {}})
        create_upstream_podgroup(custom_objects, body)
        names = _members(core_v1, "v", 4, gpus=2, terminationGracePeriodSeconds=0)
        wait_for(lambda: names <= set(bound_pods(upstream)), 5, "the victim gang")
        create_pod(core_v1, pod_body("urgent", gpus=2, priorityClassName="high"))
        wait_for(lambda: "urgent" in bound_pods(upstream), 10, "the preemptor bound")
    assert len(evicted_pods(upstream) & names) == victims


def test_the_queue_label_on_the_group_puts_the_gang_in_that_queue(
    upstream, core_v1, custom_objects
):
    gpu_node(upstream, "n1", gpus=8)
    create_queue(custom_objects, queue_body("team", gpu_max=2))
    with running(upstream):
        body = upstream_podgroup("q", 2)
        body["metadata"]["labels"] = {"gputopo.io/queue": "team"}
        create_upstream_podgroup(custom_objects, body)
        _members(core_v1, "q", 2, gpus=2)
        found = wait_for(
            lambda: (
                "queue team" in (upstream_condition(upstream, "q") or {}).get("message", "")
                and upstream_condition(upstream, "q")
            ),
            5,
            "the queue's reason on the condition",
        )
    assert "max 2" in found["message"]
    assert not {"q-0", "q-1"} & set(bound_pods(upstream))


def test_an_rbac_without_upstream_podgroups_holds_up_nothing(upstream, core_v1, custom_objects):
    """An upgrade that kept the old ClusterRole: listing scheduling.k8s.io PodGroups is 403. The
    scheduler still syncs and places everything else."""
    upstream.fail_next(
        10_000, status=403, path_regex=r"^/apis/scheduling\.k8s\.io/v1beta1/podgroups"
    )
    gpu_node(upstream, "n1", gpus=8)
    with running(upstream) as runtime:
        assert runtime.ready()
        create_pod(core_v1, pod_body("plain", gpus=1))
        wait_for(lambda: "plain" in bound_pods(upstream), 5, "a plain pod")
        create_pod(core_v1, member_pod("m-0", "m"))
        message = wait_for(lambda: scheduled_condition(upstream, "m-0"), 5, "PodScheduled")
    assert 'PodGroup "default/m" (scheduling.k8s.io) not found' in message["message"]
