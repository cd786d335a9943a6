"""`scheduler/runtime/gangs/gangstatus.py`: members lost after binding; the PodGroup status."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.runtime.cluster.cache import parse_group
from scheduler.runtime.cluster.podinfo import PodInfo, read_pod
from scheduler.runtime.gangs.gangstatus import (
    GangProgress,
    LostMembers,
    bound_count,
    group_status,
    loss_cause,
)
from tests.builders.pods import container, pod

SCHEDULER = "gputopo-scheduler"
T0, T1, T2 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z", "2026-01-01T00:02:00Z"
PODGC = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "DeletionByPodGC",
    "message": "PodGC: node no longer exists",
}


def member(name: str, node: str | None = None, phase: str = "Running", **status: Any) -> PodInfo:
    body = pod(
        name,
        containers=[container(limits={"nvidia.com/gpu": 1})],
        labels={"scheduling.x-k8s.io/pod-group": "g"},
        schedulerName=SCHEDULER,
        **({"nodeName": node} if node else {}),
    )
    body["metadata"]["uid"] = f"uid-{name}"
    body["status"] = {"phase": phase if node else "Pending", **status}
    return read_pod(body, SCHEDULER)


def group(min_member: int = 4, status: dict[str, Any] | None = None):
    obj = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "default", "uid": "g-uid"},
        "spec": {"minMember": min_member},
        "status": status or {},
    }
    return parse_group(obj)


def test_a_gang_losing_members_with_a_node_then_replaced_together():
    g = group()
    losses = LostMembers()
    members = [member(f"g-{i}", "n1" if i < 2 else "n2") for i in range(4)]
    for m in members:
        assert losses.observe(m, deleted=False) is None
    running = group_status(g, members, GangProgress(losses=losses))
    assert (running["phase"], running["scheduled"], "conditions" in running) == (
        "Running",
        4,
        False,
    )

    # PodGC: the pods on n2 turn Failed (lost), then are deleted (not lost twice).
    failed = [member(f"g-{i}", "n2", "Failed", conditions=[PODGC]) for i in (2, 3)]
    found = [losses.observe(m, deleted=False) for m in failed]
    assert [loss.cause if loss else None for loss in found] == ["DeletionByPodGC"] * 2
    for loss in found:
        assert loss is not None
        losses.record(loss, T0)
    assert [losses.observe(m, deleted=True) for m in failed] == [None, None]
    left = members[:2]
    lost = group_status(g, left, GangProgress(losses=losses))
    condition = lost["conditions"][0]
    assert (lost["phase"], lost["scheduled"], lost["running"]) == ("Unknown", 2, 2)
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "MembersLost",
        "True",
        "DeletionByPodGC",
    )
    assert condition["message"].startswith(
        "2 of 4 bound members lost: default/g-2 on node n2 (DeletionByPodGC: PodGC: node no "
        "longer exists); default/g-3 on node n2"
    )
    assert condition["message"].endswith("once 2 replacement pods exist")
    assert condition["lastTransitionTime"] == T0

    # One replacement is not enough: still short, nothing settles.
    with_one = [*left, member("r-0")]
    assert losses.settle(bound_count(with_one), g.min_member, T1) == ()
    binding = group_status(g, with_one, GangProgress(binding=True, losses=losses))
    assert binding["phase"] == "Scheduling"

    # Both replacements bound (and running): the condition turns False, the phase Running.
    back = [*left, member("r-0", "n3"), member("r-1", "n3")]
    assert losses.settle(bound_count(back), g.min_member, T2) == ("default/g-2", "default/g-3")
    done = group_status(g, back, GangProgress(losses=losses))
    assert done["phase"] == "Running"
    assert done["conditions"] == [
        {
            "type": "MembersLost",
            "status": "False",
            "reason": "MembersReplaced",
            "message": "lost members replaced: default/g-2, default/g-3; minMember (4) bound again",
            "lastTransitionTime": T2,
        }
    ]


@pytest.mark.parametrize(
    ("seen_bound", "after", "deleted", "lost"),
    [
        pytest.param(True, ("n1", "Running"), True, "PodDeleted", id="bound, then deleted"),
        pytest.param(True, ("n1", "Failed"), False, "PodFailed", id="bound, then Failed"),
        pytest.param(True, ("n1", "Succeeded"), False, None, id="bound, then Succeeded"),
        pytest.param(True, ("n1", "Succeeded"), True, None, id="Succeeded, then deleted"),
        pytest.param(False, ("n1", "Failed"), False, None, id="first seen Failed (a restart)"),
        pytest.param(False, (None, "Pending"), True, None, id="pending, then deleted"),
    ],
)
def test_only_a_member_seen_bound_and_then_gone_or_failed_is_lost(
    seen_bound: bool, after: tuple[str | None, str], deleted: bool, lost: str | None
):
    losses = LostMembers()
    if seen_bound:
        assert losses.observe(member("m", "n1"), deleted=False) is None
    node, phase = after
    loss = losses.observe(member("m", node, phase), deleted=deleted)
    assert (loss.cause if loss else None) == lost


def test_an_assumed_member_holds_a_place_but_is_not_bound_yet():
    assumed = member("m")
    assumed.node, assumed.assumed = "n1", True
    assert bound_count([assumed, member("b", "n1"), member("f", "n1", "Failed")]) == 1
    assert LostMembers().observe(assumed, deleted=False) is None


def test_the_cause_comes_from_the_pod():
    evicted = {"status": {"phase": "Failed", "reason": "Evicted", "message": "low on memory"}}
    odd = {"status": {"phase": "Failed", "reason": "not an identifier!"}}
    assert loss_cause(evicted, deleted=False) == ("Evicted", "low on memory")
    assert loss_cause(odd, deleted=True) == ("PodFailed", "the pod failed")
    assert loss_cause({"status": {"conditions": [PODGC]}}, deleted=True) == (
        "DeletionByPodGC",
        "PodGC: node no longer exists",
    )


def test_causes_that_differ_give_one_reason_for_the_condition():
    losses = LostMembers()
    for name, conditions in (("a", [PODGC]), ("b", [])):
        losses.observe(member(name, "n1"), deleted=False)
        loss = losses.observe(member(name, "n1", "Failed", conditions=conditions), deleted=False)
        assert loss is not None
        losses.record(loss, T0)
    condition = losses.condition(bound=1, min_member=3)
    assert condition is not None
    assert condition["reason"] == "MultipleCauses"


def test_a_condition_written_before_a_restart_is_kept_then_turned_false():
    written = {
        "type": "MembersLost",
        "status": "True",
        "reason": "DeletionByPodGC",
        "message": "2 of 4 bound members lost: ...",
        "lastTransitionTime": T0,
    }
    g = group(status={"phase": "Unknown", "conditions": [written]})
    short = [member(f"g-{i}", "n1") for i in range(2)]
    kept = group_status(g, short, GangProgress(losses=LostMembers(), now=T1))
    assert (kept["phase"], kept["conditions"]) == ("Unknown", [written])
    full = [*short, member("r-0", "n3"), member("r-1", "n3")]
    turned = group_status(g, full, GangProgress(losses=LostMembers(), now=T1))["conditions"][0]
    assert (turned["status"], turned["reason"], turned["lastTransitionTime"]) == (
        "False",
        "MembersReplaced",
        T1,
    )


def test_a_gang_that_never_lost_a_member_has_no_condition_and_waits_pending():
    g = group(min_member=3)
    status = group_status(g, [member("a"), member("b")], GangProgress())
    assert status == {"phase": "Pending", "scheduled": 0, "running": 0, "succeeded": 0, "failed": 0}
