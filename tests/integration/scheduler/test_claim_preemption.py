"""A pod with ResourceClaims preempts (DESIGN §11, §14), against the fake API server: its victims
are lower-priority pods on one node whose claims free the devices its claims need; they get
`DisruptionTarget` and are deleted, it gets `nominatedNodeName`, and once the resourceclaim
controller (played here: the fake runs no controllers) has deallocated the victims' claims it
binds there, nobody evicted twice meanwhile. A gang whose members have claims preempts for all
of them together."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from kubernetes import client

from scheduler.config import load_config
from scheduler.preemption import PreemptionSettings
from tests.builders.claimcluster import (
    NS,
    claim_gang,
    claim_pod,
    deallocate,
    devices_of,
    dra_cluster,
    gpu_claim,
    reserved_for,
)
from tests.builders.queues import QUEUE_LABEL, create_queue, queue_body
from tests.builders.scheduler import (
    bound_pods,
    create_pod,
    node_of,
    running,
    scheduled_condition,
    wait_for,
)


def _priority_class(core: client.CoreV1Api, name: str, value: int) -> None:
    client.SchedulingV1Api(core.api_client).create_priority_class(
        {"metadata": {"name": name}, "value": value}
    )


def _pod(name: str, claim: str, queue: str | None = None, **spec: object) -> dict[str, Any]:
    body = claim_pod(name, claim)
    body["spec"].update(terminationGracePeriodSeconds=30, **spec)
    if queue is not None:
        body["metadata"].setdefault("labels", {})[QUEUE_LABEL] = queue
    return body


def _bound_claim_pods(fake, core: client.CoreV1Api, names: list[str]) -> None:
    """A pod with its own 4-GPU claim for each of `names`, each bound before the next."""
    for name in names:
        fake.put_object("resourceclaims", gpu_claim(name, 4))
        create_pod(core, _pod(name, name))
        wait_for(lambda n=name: node_of(fake, n), 5, f"{name} bound")


def _deleted(fake) -> list[str]:
    return [r.path.rsplit("/", 1)[1] for r in fake.requests_matching("DELETE", r"/pods/[^/]+$")]


def _terminating(fake) -> set[str]:
    pods = fake.list_objects("pods", NS)
    return {p["metadata"]["name"] for p in pods if p["metadata"].get("deletionTimestamp")}


def test_a_claim_pod_evicts_the_lower_claim_pod_whose_gpus_it_needs(fake_api, core_v1):
    dra_cluster(fake_api)
    _priority_class(core_v1, "high", 100)
    for name in ("low-a", "low-b"):
        fake_api.put_object("resourceclaims", gpu_claim(name, 4))
    fake_api.put_object("resourceclaims", gpu_claim("big", 4))
    with running(fake_api):
        for name in ("low-a", "low-b"):
            create_pod(core_v1, _pod(name, name))
            wait_for(lambda n=name: node_of(fake_api, n), 5, f"{name} bound")
        create_pod(core_v1, _pod("big", "big", priorityClassName="high"))
        wait_for(lambda: _terminating(fake_api), 10, "a victim terminating")
        (victim,) = _terminating(fake_api)
        freed = set(devices_of(fake_api, victim))
        wait_for(
            lambda: (fake_api.get_object("pods", "big", NS).get("status") or {}).get(
                "nominatedNodeName"
            ),
            5,
            "big nominated",
        )
        fake_api.complete_pod_deletions()
        time.sleep(1.0)  # big is tried again: the victim's claim is still allocated
        assert node_of(fake_api, "big") is None
        assert _deleted(fake_api) == [victim]
        condition = scheduled_condition(fake_api, "big")
        assert condition is not None
        deallocate(fake_api, victim)
        wait_for(lambda: node_of(fake_api, "big"), 10, "big bound")
    assert node_of(fake_api, "big") == "n1"
    assert set(devices_of(fake_api, "big")) == freed
    assert reserved_for(fake_api, "big") == ["big"]
    survivor = ({"low-a", "low-b"} - {victim}).pop()
    assert node_of(fake_api, survivor) == "n1"
    marks = [
        c
        for r in fake_api.requests_matching("PATCH", rf"/pods/{victim}/status$")
        for c in (r.body or {}).get("status", {}).get("conditions") or ()
    ]
    assert [(c["type"], c["reason"]) for c in marks] == [
        ("DisruptionTarget", "PreemptionByScheduler")
    ]
    nominations = [
        r.body["status"]["nominatedNodeName"]
        for r in fake_api.requests_matching("PATCH", r"/pods/big/status$")
        if "nominatedNodeName" in (r.body or {}).get("status", {})
    ]
    assert nominations[0] == "n1"


def test_a_victim_whose_claim_another_pod_shares_frees_nothing(fake_api, core_v1):
    """The claim stays allocated while a pod that is not a victim uses it: evicting its
    lower-priority user would not free its GPUs, so nobody is evicted."""
    dra_cluster(fake_api)
    _priority_class(core_v1, "high", 100)
    _priority_class(core_v1, "top", 1000)
    fake_api.put_object("resourceclaims", gpu_claim("together", 8))
    fake_api.put_object("resourceclaims", gpu_claim("big", 4))
    with running(fake_api) as rt:
        create_pod(core_v1, _pod("low", "together"))
        create_pod(core_v1, _pod("keeper", "together", priorityClassName="top"))
        wait_for(lambda: node_of(fake_api, "low") and node_of(fake_api, "keeper"), 5, "bound")
        create_pod(core_v1, _pod("big", "big", priorityClassName="high"))
        wait_for(lambda: scheduled_condition(fake_api, "big"), 5, "big waits")
        time.sleep(0.5)
        rt.reporter.flush()
    condition = scheduled_condition(fake_api, "big")
    assert condition is not None
    assert "preemption:" in condition["message"]
    assert _deleted(fake_api) == []
    assert _terminating(fake_api) == set()


def test_a_claim_gang_evicts_the_lower_claim_pods_its_members_gpus_need(
    fake_api, core_v1, custom_objects
):
    """Two nodes full of 4-GPU claim pods; a higher-priority gang of two 4-GPU members evicts
    two of them, nominated where their claims' GPUs come free, and binds there once those are
    deallocated."""
    dra_cluster(fake_api, ("n1", "n2"))
    _priority_class(core_v1, "high", 100)
    low = ["low-a", "low-b", "low-c", "low-d"]
    with running(fake_api):
        _bound_claim_pods(fake_api, core_v1, low)
        spec = {"priorityClassName": "high", "terminationGracePeriodSeconds": 30}
        gang = claim_gang(fake_api, core_v1, custom_objects, "g", 2, 4, spec=spec)
        wait_for(lambda: len(_terminating(fake_api)) == 2, 10, "two victims terminating")
        victims = _terminating(fake_api)
        freed = {(node_of(fake_api, v), d) for v in victims for d in devices_of(fake_api, v)}
        fake_api.complete_pod_deletions()
        time.sleep(1.0)  # the gang is tried again: the victims' claims are still allocated
        assert all(node_of(fake_api, p) is None for p in gang)
        for victim in victims:
            deallocate(fake_api, victim)
        wait_for(lambda: all(node_of(fake_api, p) for p in gang), 10, "the gang bound")
        survivors = set(low) - victims
        assert sorted(_deleted(fake_api)) == sorted(victims)
    taken = {(node_of(fake_api, p), d) for p in gang for d in devices_of(fake_api, f"{p}-gpus")}
    assert taken == freed
    assert all(bound_pods(fake_api).get(s) for s in survivors)
    nominated = [
        r.body["status"]["nominatedNodeName"]
        for r in fake_api.requests_matching("PATCH", r"/pods/g-\d/status$")
        if "nominatedNodeName" in (r.body or {}).get("status", {})
    ]
    assert set(nominated) - {None} == {node for node, _ in freed}  # None: cleared once bound


def test_a_claim_gang_over_its_queues_max_evicts_its_queues_lower_pods(
    fake_api, core_v1, custom_objects
):
    """Room is not what keeps the gang out but its queue's max once its claims' GPUs count: it
    evicts the lower-priority pods of its own queue that bring the queue under its max."""
    dra_cluster(fake_api, ("n1", "n2"))
    _priority_class(core_v1, "high", 100)
    create_queue(custom_objects, queue_body("team", gpu_max=8, namespaces=[NS]))
    low = ["low-a", "low-b"]
    with running(fake_api):
        _bound_claim_pods(fake_api, core_v1, low)
        spec = {"priorityClassName": "high"}
        gang = claim_gang(fake_api, core_v1, custom_objects, "g", 2, 4, spec=spec)
        wait_for(lambda: _terminating(fake_api) == set(low), 10, "both low pods terminating")
        fake_api.complete_pod_deletions()
        for name in low:
            deallocate(fake_api, name)
        wait_for(lambda: all(node_of(fake_api, p) for p in gang), 10, "the gang bound")
    assert sorted(_deleted(fake_api)) == low


def test_a_claim_pod_over_its_queues_max_evicts_a_lower_pod_of_its_queue(
    fake_api, core_v1, custom_objects
):
    """n2 has room, but team's max (4 GPUs, all in use on n1) refuses the claim pod's 4 GPUs:
    it evicts team's lower-priority pod, not `other`'s, and binds where it fits."""
    dra_cluster(fake_api, ("n1", "n2"))
    _priority_class(core_v1, "high", 100)
    create_queue(custom_objects, queue_body("team", gpu_max=4, namespaces=[NS]))
    create_queue(custom_objects, queue_body("other"))  # its pods name it
    for name in ("mine", "theirs", "big"):
        fake_api.put_object("resourceclaims", gpu_claim(name, 4))
    with running(fake_api):
        for name, queue in (("mine", "team"), ("theirs", "other")):
            create_pod(core_v1, _pod(name, name, queue=queue))
            wait_for(lambda n=name: node_of(fake_api, n), 5, f"{name} bound")
        create_pod(core_v1, _pod("big", "big", queue="team", priorityClassName="high"))
        wait_for(lambda: _terminating(fake_api), 10, "a victim terminating")
        assert _terminating(fake_api) == {"mine"}
        fake_api.complete_pod_deletions()
        deallocate(fake_api, "mine")
        wait_for(lambda: node_of(fake_api, "big"), 10, "big bound")
    assert _deleted(fake_api) == ["mine"]
    assert node_of(fake_api, "theirs") is not None
    assert len(devices_of(fake_api, "big")) == 4


def test_a_starving_claim_gang_holds_the_node_its_claims_would_fit(
    fake_api, core_v1, custom_objects, caplog
):
    """Preemption off. n1 runs seven 1-GPU claim pods, n2 eight: a gang of two 2-GPU claim pods
    fits on neither, starves, and holds n1, where its claims' 4 GPUs would fit once our pods
    are gone. A 1-GPU claim pod of the same priority that comes later is kept off n1's last
    free GPU."""
    dra_cluster(fake_api, ("n1", "n2"))
    caplog.set_level("INFO", logger="scheduler.runtime.preempting.nominating")
    off = PreemptionSettings(enabled=False, reclaim=False, starvation_seconds=1.0)
    placed = [("n1", i) for i in range(7)] + [("n2", i) for i in range(8)]
    with running(fake_api, config=dataclasses.replace(load_config(None), preemption=off)):
        for node, i in placed:
            name = f"{node}-{i}"
            fake_api.put_object("resourceclaims", gpu_claim(name, 1))
            body = _pod(name, name)
            body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
            create_pod(core_v1, body)
        wait_for(lambda: len(bound_pods(fake_api)) == len(placed), 10, "the nodes filled")
        claim_gang(fake_api, core_v1, custom_objects, "g", 2, 2)
        wait_for(lambda: "starves: n1 held" in caplog.text, 10, "the gang holds n1")
        fake_api.put_object("resourceclaims", gpu_claim("late", 1))
        create_pod(core_v1, _pod("late", "late"))
        wait_for(lambda: scheduled_condition(fake_api, "late"), 5, "late waits")
        time.sleep(0.5)  # tried again meanwhile: the hold keeps it off n1
        assert node_of(fake_api, "late") is None
    assert _deleted(fake_api) == []
