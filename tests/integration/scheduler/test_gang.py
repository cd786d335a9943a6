"""Gang scheduling against the fake API server with the real client (DESIGN §7)."""

from __future__ import annotations

import threading
import time

import pytest

from tests.builders.scheduler import (
    bound_pods,
    create_pod,
    create_podgroup,
    delete_node,
    delete_pod,
    events_for,
    gpu_node,
    group_condition,
    pod_body,
    podgroup,
    podgroup_status,
    running,
    scheduled_condition,
    set_pod_phase,
    wait_for,
)

GANG_LABEL = "scheduling.x-k8s.io/pod-group"


def gang_pod(name: str, group: str, gpus: int = 1, legacy: bool = False):
    label = "pod-group.scheduling.sigs.k8s.io" if legacy else GANG_LABEL
    return pod_body(name, gpus=gpus, labels={label: group})


class BoundWatcher:
    """Samples the fake's pods every few ms and records the largest partial gang ever seen."""

    def __init__(self, fake, members: set[str], min_member: int) -> None:
        self.fake, self.members, self.min_member = fake, members, min_member
        self.partial_samples: list[int] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        streak: list[int] = []
        while not self.stop.is_set():
            count = len(self.members & set(bound_pods(self.fake)))
            streak = [*streak, count] if 0 < count < self.min_member else []
            if len(streak) > 50:  # partial for far longer than a round of parallel binds
                self.partial_samples.append(count)
            time.sleep(0.005)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(2)


def test_deadlock_gang_and_job_never_split_the_gpus(fake_api, core_v1, custom_objects):
    # 10 free GPUs: an 8-GPU node and a 2-GPU node.
    gpu_node(fake_api, "big", gpus=8)
    gpu_node(fake_api, "small", gpus=2)
    members = {f"train-{i}" for i in range(8)}
    with running(fake_api), BoundWatcher(fake_api, members, 8) as watcher:
        create_podgroup(custom_objects, podgroup("train", 8))
        for i in range(5):
            create_pod(core_v1, gang_pod(f"train-{i}", "train"))
        create_pod(core_v1, pod_body("job", gpus=5))
        for i in range(5, 8):
            create_pod(core_v1, gang_pod(f"train-{i}", "train"))

        def winner():
            bound = bound_pods(fake_api)
            if "job" in bound:
                return "job"
            return "gang" if members <= set(bound) else None

        first = wait_for(winner, 5, "the gang or the job to bind")
        if first == "job":
            wait_for(lambda: scheduled_condition(fake_api, "train-0"), 5, "gang condition")
            assert not members & set(bound_pods(fake_api))
            delete_pod(core_v1, "job")
            wait_for(lambda: members <= set(bound_pods(fake_api)), 5, "the gang after the job left")
        else:
            for name in members:
                delete_pod(core_v1, name)
            wait_for(lambda: "job" in bound_pods(fake_api), 5, "the job after the gang left")
    assert watcher.partial_samples == []


def test_gang_waits_for_min_member_and_reports(fake_api, core_v1, custom_objects):
    gpu_node(fake_api, "n1", gpus=8)
    with running(fake_api) as rt:
        create_podgroup(custom_objects, podgroup("g", 3))
        create_pod(core_v1, gang_pod("g-0", "g", legacy=True))
        create_pod(core_v1, gang_pod("g-1", "g"))
        waiting = "waiting for pod group default/g: fewer than minMember (3) pods exist"

        def condition():
            found = scheduled_condition(fake_api, "g-1") or {}
            return found if found.get("message") == waiting else None

        assert wait_for(condition, 5, "waiting condition")["reason"] == "Unschedulable"
        assert bound_pods(fake_api) == {}
        create_pod(core_v1, gang_pod("g-2", "g"))
        wait_for(lambda: len(bound_pods(fake_api)) == 3, 5, "the gang bound")

        def group_status():
            status = (fake_api.get_object("podgroups", "g", "default") or {}).get("status") or {}
            return status if status.get("phase") == "Scheduled" else None

        status = wait_for(group_status, 5, "PodGroup status Scheduled")
        rt.reporter.flush()
    assert status["scheduled"] == 3
    assert status["scheduleStartTime"]
    assert (
        rt.metrics.registry.get_sample_value("gputopo_scheduler_gang_wait_duration_seconds_count")
        == 1
    )


def test_gang_stays_inside_one_rack(fake_api, core_v1, custom_objects):
    rack = "gputopo.io/rack"
    gpu_node(fake_api, "a1", gpus=8, labels={rack: "r1"})
    gpu_node(fake_api, "a2", gpus=8, labels={rack: "r1"})
    gpu_node(fake_api, "b1", gpus=8, labels={rack: "r2"})
    gpu_node(fake_api, "b2", gpus=8, labels={rack: "r2"})
    # r1 has only 12 free GPUs left, r2 has 16: a 2 x 8-GPU gang fits only in r2.
    create_pod(core_v1, pod_body("foreign", gpus=4, scheduler="default-scheduler", node="a2"))
    with running(fake_api):
        create_podgroup(
            custom_objects, podgroup("pair", 2, annotations={"gputopo.io/topology-required": rack})
        )
        create_pod(core_v1, gang_pod("pair-0", "pair", gpus=8))
        create_pod(core_v1, gang_pod("pair-1", "pair", gpus=8))
        wait_for(lambda: {"pair-0", "pair-1"} <= set(bound_pods(fake_api)), 5, "the pair bound")
    bound = bound_pods(fake_api)
    assert {bound["pair-0"], bound["pair-1"]} == {"b1", "b2"}


def test_failed_member_bind_is_retried_then_replaced(fake_api, core_v1, custom_objects):
    gpu_node(fake_api, "n1", gpus=8)
    # The first two binds of g-1 fail (500): the same-node retry fails too, then it is re-placed.
    fake_api.fail_next(2, 500, path_regex=r"/pods/g-1/binding$")
    with running(fake_api):
        create_podgroup(custom_objects, podgroup("g", 2))
        create_pod(core_v1, gang_pod("g-0", "g"))
        create_pod(core_v1, gang_pod("g-1", "g"))
        wait_for(lambda: len(bound_pods(fake_api)) == 2, 5, "both members bound")
    assert len(fake_api.requests_matching("POST", r"/pods/g-1/binding$")) == 3


def test_partially_bound_gang_fails_after_its_timeout(fake_api, core_v1, custom_objects):
    gpu_node(fake_api, "n1", gpus=8)
    fake_api.fail_next(1000, 500, path_regex=r"/pods/g-1/binding$")
    with running(fake_api):
        create_podgroup(custom_objects, podgroup("g", 2, scheduleTimeoutSeconds=1))
        create_pod(core_v1, gang_pod("g-0", "g"))
        create_pod(core_v1, gang_pod("g-1", "g"))

        def failed():
            status = (fake_api.get_object("podgroups", "g", "default") or {}).get("status") or {}
            return status.get("phase") == "Failed"

        wait_for(failed, 5, "PodGroup phase Failed")
        events = wait_for(
            lambda: [e for e in events_for(fake_api, "g") if e["reason"] == "GangPartiallyBound"],
            5,
            "GangPartiallyBound event",
        )
    assert events[0]["type"] == "Warning"
    assert "1 of minMember 2 pods bound" in events[0]["message"]
    assert set(bound_pods(fake_api)) == {"g-0"}


def test_members_beyond_min_member_are_placed_after_the_gang(fake_api, core_v1, custom_objects):
    gpu_node(fake_api, "n1", gpus=8)
    with running(fake_api):
        create_podgroup(custom_objects, podgroup("g", 2))
        for i in range(2):
            create_pod(core_v1, gang_pod(f"g-{i}", "g", gpus=2))
        wait_for(lambda: len(bound_pods(fake_api)) == 2, 5, "the gang bound")
        for i in range(2, 5):  # two more fit (8 GPUs), the fifth does not
            create_pod(core_v1, gang_pod(f"g-{i}", "g", gpus=2))
        wait_for(lambda: len(bound_pods(fake_api)) == 4, 5, "two extra members bound")
        message = wait_for(
            lambda: (scheduled_condition(fake_api, "g-4") or {}).get("message"), 5, "g-4 reason"
        )
    assert "g-4" not in bound_pods(fake_api)
    assert message == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."


def test_a_gang_with_more_pods_than_fit_starts_with_its_minimum(fake_api, core_v1, custom_objects):
    gpu_node(fake_api, "n1", gpus=8)
    with running(fake_api):
        for i in range(5):  # all five pending when the group comes: 10 GPUs, 8 on the node
            create_pod(core_v1, gang_pod(f"g-{i}", "g", gpus=2))
        wait_for(lambda: scheduled_condition(fake_api, "g-4"), 5, "the pods wait for the group")
        create_podgroup(custom_objects, podgroup("g", 2))
        wait_for(lambda: len(bound_pods(fake_api)) == 4, 5, "the minimum and two more bound")

        def reason() -> str:
            return str((scheduled_condition(fake_api, "g-4") or {}).get("message", ""))

        message = wait_for(lambda: reason().startswith("0/1") and reason(), 5, "g-4's reason")
    assert set(bound_pods(fake_api)) == {"g-0", "g-1", "g-2", "g-3"}  # the oldest first
    assert message == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."


def test_a_gang_whose_minimum_does_not_fit_places_none(fake_api, core_v1, custom_objects):
    gpu_node(fake_api, "n1", gpus=8)
    with running(fake_api) as rt:
        for i in range(3):  # the minimum, two of them, takes 10 GPUs
            create_pod(core_v1, gang_pod(f"g-{i}", "g", gpus=5))
        create_podgroup(custom_objects, podgroup("g", 2))
        wait_for(lambda: scheduled_condition(fake_api, "g-2"), 5, "the gang waits")
        time.sleep(0.5)  # tried again meanwhile: still nothing
        rt.reporter.flush()
    assert bound_pods(fake_api) == {}


class BindLog:
    """Samples the fake's request log every few ms: when each pod's first binding POST appeared."""

    def __init__(self, fake, names: set[str]) -> None:
        self.fake, self.names = fake, names
        self.first: dict[str, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        pattern = r"/pods/(" + "|".join(sorted(self.names)) + r")/binding$"
        while not self.stop.is_set():
            for request in self.fake.requests_matching("POST", pattern):
                name = request.path.rsplit("/", 2)[-2]
                self.first.setdefault(name, time.monotonic())
            time.sleep(0.005)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(2)


def lose_by_podgc(fake, core_v1, node: str) -> str:
    """The node is deleted; PodGC marks its pods Failed, then deletes them."""
    delete_node(core_v1, node)
    assert len(fake.collect_orphaned_pods()) == 2
    return "DeletionByPodGC"


def lose_by_node_shutdown(fake, core_v1, node: str) -> str:
    """The kubelet's graceful node shutdown: its pods turn Failed and stay (a Job keeps them);
    the node goes NotReady and the node lifecycle controller taints it."""
    taint = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
    core_v1.patch_node(node, {"spec": {"taints": [taint]}}, _preload_content=False)
    condition = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "TerminationByKubelet",
        "message": "Pod was terminated in response to imminent node shutdown.",
    }
    for name, where in bound_pods(fake).items():
        if where == node:
            set_pod_phase(core_v1, name, "Failed", conditions=[condition], reason="Terminated")
    return "TerminationByKubelet"


LOSSES = pytest.mark.parametrize(
    "lose",
    [
        pytest.param(lose_by_podgc, id="node deleted, PodGC deletes its pods"),
        pytest.param(lose_by_node_shutdown, id="node shut down, its pods stay Failed"),
    ],
)


def running_gang_across_two_nodes(fake, core_v1, custom_objects) -> None:
    """A 4-member gang (minMember 4) bound 2 + 2 on n1 and n2, every member Running."""
    gpu_node(fake, "n1", gpus=2)
    gpu_node(fake, "n2", gpus=2)
    members = [f"g-{i}" for i in range(4)]
    create_podgroup(custom_objects, podgroup("g", 4))
    for name in members:
        create_pod(core_v1, gang_pod(name, "g"))
    wait_for(lambda: set(members) <= set(bound_pods(fake)), 5, "the gang bound")
    assert set(bound_pods(fake).values()) == {"n1", "n2"}
    for name in members:
        set_pod_phase(core_v1, name, "Running")
    wait_for(lambda: podgroup_status(fake, "g").get("phase") == "Running", 5, "Running")


def members_lost_condition(fake, status: str, prefix: str = "") -> dict | None:
    found = group_condition(fake, "g", "MembersLost") or {}
    if found.get("status") == status and found.get("message", "").startswith(prefix):
        return found
    return None


@LOSSES
def test_lost_members_are_reported(fake_api, core_v1, custom_objects, lose):
    with running(fake_api):
        running_gang_across_two_nodes(fake_api, core_v1, custom_objects)
        reason = lose(fake_api, core_v1, "n2")
        two = "2 of 4 bound members lost"

        def lost_event():
            found = [e for e in events_for(fake_api, "g") if e["reason"] == "MembersLost"]
            return [e for e in found if e["message"].startswith(two)]

        lost = wait_for(lambda: members_lost_condition(fake_api, "True", two), 5, "MembersLost")
        status = podgroup_status(fake_api, "g")
        event = wait_for(lost_event, 5, "MembersLost event")[0]
    assert lost["reason"] == reason
    assert "default/g-2 on node n2" in lost["message"]
    assert "placed together once 2 replacement pods exist" in lost["message"]
    assert (status["phase"], status["scheduled"], status["running"]) == ("Unknown", 2, 2)
    assert event["type"] == "Warning"


@LOSSES
def test_lost_members_are_replaced_as_one_unit(fake_api, core_v1, custom_objects, lose):
    with running(fake_api) as rt:
        running_gang_across_two_nodes(fake_api, core_v1, custom_objects)
        lose(fake_api, core_v1, "n2")
        wait_for(lambda: bound_count_of(fake_api, "g") == 2, 5, "2 members left bound")
        # A new node, and the Job controller's replacements one second apart: r-0 alone would fit.
        gpu_node(fake_api, "n3", gpus=2)
        with BindLog(fake_api, {"r-0", "r-1"}) as binds:
            create_pod(core_v1, gang_pod("r-0", "g"))
            wait_for(
                lambda: "r-0" in binds.first or scheduled_condition(fake_api, "r-0"),
                5,
                "r-0 tried",
            )
            waiting = (scheduled_condition(fake_api, "r-0") or {}).get("message") or ""
            time.sleep(1.0)
            alone = "r-0" in binds.first
            create_pod(core_v1, gang_pod("r-1", "g"))
            wait_for(lambda: len(binds.first) == 2, 5, "both replacements bound")
        assert not alone, "a replacement was bound alone"
        assert "fewer than minMember (4) pods exist" in waiting
        assert abs(binds.first["r-0"] - binds.first["r-1"]) < 0.5
        assert {bound_pods(fake_api)[n] for n in ("r-0", "r-1")} == {"n3"}
        for name in ("r-0", "r-1"):
            set_pod_phase(core_v1, name, "Running")
        back = wait_for(lambda: members_lost_condition(fake_api, "False"), 5, "MembersReplaced")
        wait_for(lambda: podgroup_status(fake_api, "g").get("phase") == "Running", 5, "Running")
        replaced = wait_for(
            lambda: [e for e in events_for(fake_api, "g") if e["reason"] == "MembersReplaced"],
            5,
            "MembersReplaced event",
        )
        rt.reporter.flush()
    assert back["reason"] == "MembersReplaced"
    assert podgroup_status(fake_api, "g")["running"] == 4
    assert replaced[0]["type"] == "Normal"


def bound_count_of(fake, group: str) -> int:
    """Members of `group` bound and not Failed, as the API server has them."""
    return sum(
        1
        for p in fake.list_objects("pods", "default")
        if (p["metadata"].get("labels") or {}).get(GANG_LABEL) == group
        and (p.get("spec") or {}).get("nodeName")
        and (p.get("status") or {}).get("phase") != "Failed"
    )
