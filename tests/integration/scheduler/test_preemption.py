"""Preemption and reclaim end to end (DESIGN §11): the real scheduler against the fake API server,
driven through the real client. 16 GPUs (two 8-GPU nodes, `gpu-a` and `gpu-b`).

The fake API server's clock steps 10 s per pod this test creates, so pods have distinct creation
times (the API server stamps whole seconds) and "youngest" means something."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from scheduler.config import load_config
from scheduler.preemption import PreemptionSettings
from scheduler.runtime.preempting.evicting import disruption_message
from tests.builders.fakeapi import make_pdb
from tests.builders.interpod import exclusive_affinity
from tests.builders.queues import create_namespace, create_queue, patch_queue, queue_body
from tests.builders.scheduler import (
    bound_pods,
    create_podgroup,
    events_for,
    gpu_node,
    pod_body,
    podgroup,
    running,
    scheduled_condition,
    wait_for,
)
from tests.fakeapi import FakeApiServer

GANG_LABEL = "scheduling.x-k8s.io/pod-group"
TEAMS = ("team-a", "team-b")
ZONE_KEY = "topology.kubernetes.io/zone"


class SteppingClock:
    """Wall time plus an offset the test moves forward (creation stamps are whole seconds)."""

    def __init__(self) -> None:
        self.offset = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return time.time() + self.offset

    def step(self, seconds: float = 10.0) -> None:
        with self._lock:
            self.offset += seconds


@dataclasses.dataclass
class Cluster:
    fake: FakeApiServer
    core: client.CoreV1Api
    custom: client.CustomObjectsApi
    clock: SteppingClock

    def pod(self, name: str, ns: str = "team-a", **kw: Any) -> None:
        """Create a pod (grace 0 unless `terminationGracePeriodSeconds` is given)."""
        kw.setdefault("terminationGracePeriodSeconds", 0)
        self.clock.step()
        body = pod_body(name, namespace=ns, **kw)
        self.core.create_namespaced_pod(ns, body, _preload_content=False)

    def fill(
        self, count: int, ns: str = "team-a", prefix: str = "low", gpus: int = 1, **kw: Any
    ) -> list[str]:
        """`count` pods of `gpus` GPUs each, bound (by the scheduler, or at creation with
        `node=`) before this returns."""
        names = [f"{prefix}{i}" for i in range(count)]
        for name in names:
            self.pod(name, ns, gpus=gpus, **kw)
        wait_for(lambda: set(names) <= set(bound_pods(self.fake, ns)), 20, f"{prefix}* bound")
        return names

    def deleted(self) -> list[str]:
        """`ns/name` of every pod the scheduler deleted (DELETE with a uid precondition)."""
        out = []
        for request in self.fake.requests_matching("DELETE", r"/pods/[^/]+$"):
            if "preconditions" in (request.body or {}):
                parts = request.path.split("/")
                out.append(f"{parts[parts.index('namespaces') + 1]}/{parts[-1]}")
        return out

    def reason(self, name: str, ns: str = "team-a") -> str:
        return str((scheduled_condition(self.fake, name, ns) or {}).get("message") or "")

    def nominated(self, name: str, ns: str = "team-a") -> str | None:
        pod = self.fake.get_object("pods", name, ns) or {}
        return (pod.get("status") or {}).get("nominatedNodeName")

    def terminating(self, ns: str = "team-a") -> set[str]:
        return {
            p["metadata"]["name"]
            for p in self.fake.list_objects("pods", ns)
            if p["metadata"].get("deletionTimestamp")
        }

    def pdb(self, name: str, labels: dict[str, str], min_available: int, ns: str = "team-a"):
        body = make_pdb(name, match_labels=labels, min_available=min_available)
        client.PolicyV1Api(self.core.api_client).create_namespaced_pod_disruption_budget(
            ns, body, _preload_content=False
        )
        for pod in self.fake.list_objects("pods", ns):
            if all(pod["metadata"].get("labels", {}).get(k) == v for k, v in labels.items()):
                self.fake.start_pod(pod["metadata"]["name"], ns)
        self.fake.settle_pdb(name, ns)

    def replace_queue_a(self, **limits: Any) -> None:
        """Queue `a` (team-a's) again, with `limits` (`queue_body`'s gpu_min, gpu_max)."""
        self.custom.delete_cluster_custom_object("scheduling.gputopo.io", "v1alpha1", "queues", "a")
        create_queue(self.custom, queue_body("a", namespaces=["team-a"], **limits))

    def elastic_gang(self, gpus: int, **kw: Any) -> None:
        """Pods e0, e1, e2 of `gpus` GPUs, all pending when their PodGroup `elastic` (minMember 2)
        comes; returns once e0 and e1, its minimum, are bound."""
        for i in range(3):
            self.pod(f"e{i}", gpus=gpus, labels={GANG_LABEL: "elastic"}, **kw)
        wait_for(lambda: self.reason("e2"), 10, "the pods wait for their group")
        create_podgroup(self.custom, podgroup("elastic", 2, namespace="team-a"))
        bound = lambda: {"e0", "e1"} <= set(bound_pods(self.fake, "team-a"))  # noqa: E731
        wait_for(bound, 20, "the minimum bound")

    def priority_class(self, name: str, value: int, **extra: Any) -> None:
        client.SchedulingV1Api(self.core.api_client).create_priority_class(
            {"metadata": {"name": name}, "value": value, **extra}
        )


def config(**preemption: Any) -> Any:
    return dataclasses.replace(load_config(None), preemption=PreemptionSettings(**preemption))


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    clock = SteppingClock()
    with FakeApiServer(clock=clock) as fake, fake.api_client() as api_client:
        core = client.CoreV1Api(api_client)
        for ns in TEAMS:
            create_namespace(core, ns)
        gpu_node(fake, "gpu-a", gpus=8)
        gpu_node(fake, "gpu-b", gpus=8)
        custom = client.CustomObjectsApi(api_client)
        create_queue(custom, queue_body("a", namespaces=["team-a"]))
        created = Cluster(fake, core, custom, clock)
        created.priority_class("high", 100)
        yield created


def _on(c: Cluster, names: list[str], ns: str = "team-a") -> dict[str, str]:
    placed = bound_pods(c.fake, ns)
    return {n: placed[n] for n in names if n in placed}


# -- (1) priority, (5) no repeated evictions while victims terminate ----------------------------
def test_a_high_priority_pod_evicts_one_whole_node_and_the_freed_gpus_wait_for_it(cluster):
    c = cluster
    with running(c.fake, config=config()) as runtime:
        low = c.fill(16, terminationGracePeriodSeconds=30)
        before = _on(c, low)
        c.pod("big", gpus=8, priorityClassName="high")
        wait_for(lambda: len(c.terminating()) == 8, 20, "8 victims terminating")
        victims = c.terminating()
        node = {before[v] for v in victims}
        assert len(node) == 1, "the victims are on one node, never spread over two"
        (where,) = node
        wait_for(lambda: c.nominated("big") == where, 10, "big nominated there")
        # Meanwhile: a pod elsewhere finishes (the unit is tried again) and new pods arrive.
        survivor = next(n for n in low if before[n] != where)
        c.core.delete_namespaced_pod(survivor, "team-a", grace_period_seconds=0)
        for i in range(3):
            c.pod(f"late{i}", gpus=1)
        time.sleep(1.5)
        assert sorted(c.deleted()) == sorted(f"team-a/{v}" for v in victims)
        assert c.terminating() == victims
        c.fake.complete_pod_deletions()
        wait_for(lambda: bound_pods(c.fake, "team-a").get("big") == where, 20, "big bound there")
        late = _on(c, [f"late{i}" for i in range(3)])
        assert where not in late.values()
        wait_for(lambda: c.nominated("big") is None, 10, "the nomination cleared")
        sample = runtime.metrics.registry.get_sample_value
        assert sample("gputopo_scheduler_preemption_victims_total", {"reason": "preempt"}) == 8
        assert sample("gputopo_scheduler_preemption_attempts_total", {"result": "evicted"}) == 1
    for victim in victims:
        assert any(e["reason"] == "Preempted" for e in events_for(c.fake, victim, "team-a"))
    preempting = [e for e in events_for(c.fake, "big", "team-a") if e["reason"] == "Preempting"]
    assert preempting
    assert f"preempting 8 pods on {where}" in preempting[0]["message"]


def test_victims_get_disruption_target_before_their_deletion(cluster):
    c = cluster
    with running(c.fake, config=config()):
        c.fill(16)
        c.pod("big", gpus=8, priorityClassName="high")
        wait_for(lambda: bound_pods(c.fake, "team-a").get("big"), 20, "big bound")
    writes = [(r.method, r.path) for r in c.fake.writes()]
    deleted = {p.split("/")[1] for p in c.deleted()}
    assert len(deleted) == 8
    for name in deleted:
        marked = writes.index(("PATCH", f"/api/v1/namespaces/team-a/pods/{name}/status"))
        assert marked < writes.index(("DELETE", f"/api/v1/namespaces/team-a/pods/{name}"))
    conditions = [
        r.body["status"]["conditions"][0]
        for r in c.fake.requests_matching("PATCH", r"/pods/low\d+/status$")
        if "conditions" in (r.body or {}).get("status", {})
    ]
    assert len(conditions) == 8
    assert {(x["type"], x["status"], x["reason"]) for x in conditions} == {
        ("DisruptionTarget", "True", "PreemptionByScheduler")
    }
    assert all("pod/team-a/big" in x["message"] for x in conditions)


def test_a_failed_deletion_spares_the_victim_and_the_preemptor_searches_again(cluster):
    c = cluster
    with running(c.fake, config=config()):
        low = c.fill(16)
        before = _on(c, low)
        c.fake.fail_next(1, status=500, path_regex=r"/pods/low\d+$", method="DELETE")
        c.pod("big", gpus=8, priorityClassName="high")
        wait_for(lambda: bound_pods(c.fake, "team-a").get("big"), 20, "big bound")
        where = bound_pods(c.fake, "team-a")["big"]
    gone = [n for n in low if c.fake.get_object("pods", n, "team-a") is None]
    assert len(gone) == 8
    assert {before[n] for n in gone} == {where}


# -- nomination timeout ---------------------------------------------------------------------------
def test_a_nomination_its_preemptor_cannot_use_ends_after_the_timeout(cluster):
    """`big` evicts a node's pods, then its queue is paused, so once its victims are gone it still
    cannot start. The node stays held from lower priorities for `nominationTimeoutSeconds`
    after the last victim left, then the nomination ends and the pods waiting for room start
    there at once (not at the next periodic retry of unschedulable pods)."""
    c = cluster
    create_queue(c.custom, queue_body("b", namespaces=["team-b"]))
    timeout = 2.0
    with running(c.fake, config=config(nomination_timeout=timeout), unschedulable_flush=60):
        low = c.fill(16, terminationGracePeriodSeconds=30)
        before = _on(c, low)
        c.pod("big", gpus=8, priorityClassName="high")
        wait_for(lambda: len(c.terminating()) == 8, 20, "8 victims terminating")
        (where,) = {before[v] for v in c.terminating()}
        wait_for(lambda: c.nominated("big") == where, 10, "big nominated there")
        patch_queue(c.custom, "a", {"paused": True})
        wait_for(lambda: "paused" in c.reason("big"), 10, "big held back by its paused queue")
        for i in range(4):
            c.pod(f"b{i}", "team-b", gpus=1)
        c.fake.complete_pod_deletions()
        gone = time.monotonic()
        time.sleep(timeout - 0.5)
        assert bound_pods(c.fake, "team-b") == {}, "the freed node is still held for big"
        wait_for(lambda: len(bound_pods(c.fake, "team-b")) == 4, 10, "team-b bound")
        took = time.monotonic() - gone
        assert set(bound_pods(c.fake, "team-b").values()) == {where}
        assert timeout < took < timeout + 5  # the timeout, a housekeeping tick, slack (not 60)
        wait_for(lambda: c.nominated("big") is None, 10, "big's nomination cleared")
    assert "big" not in bound_pods(c.fake, "team-a")
    assert sorted(c.deleted()) == sorted(f"team-a/{n}" for n in low if before[n] == where)


# -- (2) reclaim ----------------------------------------------------------------------------------
def test_a_queue_within_its_guarantee_reclaims_what_another_borrows(cluster):
    c = cluster
    c.replace_queue_a(gpu_min=8, gpu_max=16)
    create_queue(c.custom, queue_body("b", gpu_min=8, gpu_max=16, namespaces=["team-b"]))
    with running(c.fake, config=config()) as runtime:
        a_pods = c.fill(16)
        for i in range(8):
            c.pod(f"b{i}", "team-b", gpus=1)
        wait_for(lambda: len(bound_pods(c.fake, "team-b")) == 8, 30, "b gets its 8 GPUs")
        sample = runtime.metrics.registry.get_sample_value
        assert sample("gputopo_scheduler_preemption_victims_total", {"reason": "reclaim"}) == 8
    kept = bound_pods(c.fake, "team-a")
    assert len(kept) >= 8
    assert sorted(c.deleted()) == sorted(f"team-a/{n}" for n in a_pods[8:])  # the youngest


# -- (3) gangs ------------------------------------------------------------------------------------
def test_evicting_one_member_of_a_running_gang_evicts_the_whole_gang(cluster):
    c = cluster
    create_podgroup(c.custom, podgroup("train", 4, namespace="team-a"))
    members = [f"train{i}" for i in range(4)]
    with running(c.fake, config=config()):
        for name in members:
            c.pod(name, gpus=4, labels={GANG_LABEL: "train"})
        wait_for(lambda: set(members) <= set(bound_pods(c.fake, "team-a")), 20, "gang bound")
        c.pod("big", gpus=4, priorityClassName="high")
        wait_for(lambda: bound_pods(c.fake, "team-a").get("big"), 20, "big bound")
    assert sorted(c.deleted()) == sorted(f"team-a/{m}" for m in members)


def test_a_gang_that_would_not_fit_after_every_allowed_eviction_evicts_nothing(cluster):
    c = cluster
    c.priority_class("top", 1000)
    c.fill(8, prefix="low", node="gpu-a")
    c.fill(8, prefix="top", node="gpu-b", priorityClassName="top")
    create_podgroup(c.custom, podgroup("pair", 2, namespace="team-a"))
    with running(c.fake, config=config()):
        for i in range(2):
            c.pod(f"pair{i}", gpus=8, labels={GANG_LABEL: "pair"}, priorityClassName="high")
        wait_for(lambda: "preemption:" in c.reason("pair0"), 20, "the gang's reason")
        time.sleep(0.5)
        assert "would still not fit the pod group" in c.reason("pair0")
    assert c.deleted() == []


def test_a_gang_preemptor_is_nominated_member_by_member_and_binds_whole(cluster):
    c = cluster
    create_podgroup(c.custom, podgroup("pair", 2, namespace="team-a"))
    with running(c.fake, config=config()):
        c.fill(16, terminationGracePeriodSeconds=30)
        for i in range(2):
            c.pod(f"pair{i}", gpus=8, labels={GANG_LABEL: "pair"}, priorityClassName="high")
        wait_for(lambda: len(c.terminating()) == 16, 20, "every low pod terminating")
        wait_for(lambda: c.nominated("pair0") and c.nominated("pair1"), 10, "both nominated")
        assert {c.nominated("pair0"), c.nominated("pair1")} == {"gpu-a", "gpu-b"}
        c.fake.complete_pod_deletions()
        wait_for(
            lambda: {"pair0", "pair1"} <= set(bound_pods(c.fake, "team-a")), 20, "the gang bound"
        )
    assert len(c.deleted()) == 16


def test_an_elastic_gang_evicts_for_its_minimum_only(cluster):
    """16 GPUs taken; a gang of minMember 2 with three 8-GPU pods: room for all three cannot be
    made, room for its minimum can. Two nodes' low pods go, two members bind, one waits."""
    c = cluster
    with running(c.fake, config=config()):
        c.fill(16)
        c.elastic_gang(8, priorityClassName="high")
        time.sleep(0.5)
    assert len(c.deleted()) == 16
    assert "e2" not in bound_pods(c.fake, "team-a")


def test_an_elastic_gang_over_its_queue_max_starts_with_the_minimum_the_max_admits(cluster):
    c = cluster
    c.replace_queue_a(gpu_max=8)
    with running(c.fake, config=config()):
        c.elastic_gang(4)  # 12 GPUs asked, 8 allowed: the minimum, 8, is
        over = "queue a: nvidia.com/gpu 8 used + 4 requested > max 8"
        wait_for(lambda: c.reason("e2") == over, 10, "e2 held back by the max")
        time.sleep(0.5)
    assert "e2" not in bound_pods(c.fake, "team-a")


def test_a_pod_held_back_by_its_queue_max_preempts_in_its_own_queue(cluster):
    c = cluster
    c.replace_queue_a(gpu_max=4)
    with running(c.fake, config=config()):
        low = c.fill(4)
        c.pod("urgent", gpus=1, priorityClassName="high")
        wait_for(lambda: bound_pods(c.fake, "team-a").get("urgent"), 20, "urgent bound")
    assert len(c.deleted()) == 1
    assert c.deleted()[0] in {f"team-a/{n}" for n in low}
    assert len(bound_pods(c.fake, "team-a")) == 4  # the max holds


# -- (4) PodDisruptionBudgets ---------------------------------------------------------------------
def _guarded(c: Cluster, guard_a: bool, guard_b: bool) -> None:
    c.fill(8, prefix="a", node="gpu-a", labels={"app": "a"})
    c.fill(8, prefix="b", node="gpu-b", labels={"app": "b"})
    if guard_a:
        c.pdb("guard-a", {"app": "a"}, 8)
    if guard_b:
        c.pdb("guard-b", {"app": "b"}, 8)


def test_pdb_preferred_takes_the_node_whose_pods_no_budget_protects(cluster):
    c = cluster
    _guarded(c, guard_a=True, guard_b=False)
    with running(c.fake, config=config()):
        c.pod("big", gpus=8, priorityClassName="high")
        wait_for(lambda: bound_pods(c.fake, "team-a").get("big") == "gpu-b", 20, "big on gpu-b")
    assert sorted(c.deleted()) == sorted(f"team-a/b{i}" for i in range(8))


def test_pdb_preferred_violates_a_budget_when_every_set_does(cluster):
    c = cluster
    _guarded(c, guard_a=True, guard_b=True)
    with running(c.fake, config=config()):
        c.pod("big", gpus=8, priorityClassName="high")
        wait_for(lambda: bound_pods(c.fake, "team-a").get("big"), 20, "big bound")
    assert len(c.deleted()) == 8


def test_pdb_required_waits_naming_the_budget_and_deletes_nothing(cluster):
    c = cluster
    _guarded(c, guard_a=True, guard_b=True)
    with running(c.fake, config=config(pdb_required=True)):
        c.pod("big", gpus=8, priorityClassName="high")
        wait_for(lambda: "PodDisruptionBudget" in c.reason("big"), 20, "the reason")
        time.sleep(0.5)
    assert "team-a/guard-a" in c.reason("big")
    assert c.deleted() == []
    assert "big" not in bound_pods(c.fake, "team-a")


# -- (6) who never evicts, who is never evicted ---------------------------------------------------
def test_preemption_policy_never_evicts_nothing(cluster):
    c = cluster
    c.priority_class("polite", 100, preemptionPolicy="Never")
    with running(c.fake, config=config()):
        c.fill(16)
        c.pod("big", gpus=8, priorityClassName="polite")
        wait_for(lambda: "preemptionPolicy is Never" in c.reason("big"), 20, "the reason")
    assert c.deleted() == []


def test_pods_at_the_non_preemptible_priority_are_never_victims(cluster):
    c = cluster
    c.priority_class("mid", 50)
    with running(c.fake, config=config(non_preemptible_priority=50)):
        c.fill(16, priorityClassName="mid")
        c.pod("big", gpus=8, priorityClassName="high")
        wait_for(lambda: "Insufficient nvidia.com/gpu" in c.reason("big"), 20, "the reason")
        time.sleep(0.5)
    assert c.deleted() == []


def test_pods_of_other_schedulers_are_never_victims(cluster):
    c = cluster
    for node in ("gpu-a", "gpu-b"):
        c.fill(8, prefix=f"other-{node}-", node=node, scheduler="default-scheduler")
    with running(c.fake, config=config()):
        c.pod("big", gpus=8, priorityClassName="high")
        wait_for(lambda: "Insufficient nvidia.com/gpu" in c.reason("big"), 20, "the reason")
        time.sleep(0.5)
    assert c.deleted() == []


def test_with_preemption_and_reclaim_off_nothing_is_evicted(cluster):
    c = cluster
    with running(c.fake, config=config(enabled=False, reclaim=False)):
        c.fill(16)
        c.pod("big", gpus=8, priorityClassName="high")
        wait_for(lambda: c.reason("big"), 20, "the reason")
        time.sleep(0.5)
    assert c.deleted() == []


# -- (8) a new leader during a preemption ----------------------------------------------------------
def test_a_new_leader_neither_evicts_twice_nor_loses_the_nomination(cluster):
    c = cluster
    with running(c.fake, config=config()):
        c.fill(16, terminationGracePeriodSeconds=30)
        c.pod("big", gpus=8, priorityClassName="high")
        wait_for(lambda: len(c.terminating()) == 8, 20, "8 victims terminating")
        wait_for(lambda: c.nominated("big"), 10, "big nominated")
    where, victims = c.nominated("big"), c.terminating()
    first = list(c.deleted())
    with running(c.fake, config=config()):
        c.pod("late", gpus=1)
        time.sleep(1.5)
        assert c.deleted() == first
        c.fake.complete_pod_deletions()
        wait_for(lambda: bound_pods(c.fake, "team-a").get("big") == where, 20, "big bound there")
        time.sleep(0.3)
    assert bound_pods(c.fake, "team-a").get("late") is None
    assert victims.isdisjoint(bound_pods(c.fake, "team-a"))


def test_a_new_leader_finishes_an_eviction_the_old_one_only_marked(cluster):
    c = cluster
    low = c.fill(8, node="gpu-a")
    c.fill(8, prefix="other", node="gpu-b", scheduler="default-scheduler")
    c.pod("big", gpus=8, priorityClassName="high")
    marked = low[:8]
    for name in marked:  # what the old leader wrote before it stopped
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": disruption_message("gputopo-scheduler", "pod/team-a/big", 100),
        }
        c.core.patch_namespaced_pod_status(
            name, "team-a", {"status": {"conditions": [condition]}}, _preload_content=False
        )
    with running(c.fake, config=config()):
        wait_for(lambda: bound_pods(c.fake, "team-a").get("big") == "gpu-a", 20, "big bound")
    assert sorted(c.deleted()) == sorted(f"team-a/{n}" for n in marked)


# -- (7) the starvation guard ---------------------------------------------------------------------
def _stream(c: Cluster, seconds: float, period: float, big: str) -> float | None:
    """Every `period` s the oldest running small pod finishes and two arrive; returns when
    `big` was bound (seconds from the start), or None if not while the stream ran."""
    start, n = time.monotonic(), 0
    order = [f"low{i}" for i in range(16)]
    while time.monotonic() - start < seconds:
        if bound_pods(c.fake, "team-a").get(big):
            return time.monotonic() - start
        placed = bound_pods(c.fake, "team-a")
        done = next((p for p in order if p in placed), None)
        if done is not None:
            order.remove(done)
            c.core.delete_namespaced_pod(done, "team-a", grace_period_seconds=0)
        for _ in range(2):
            c.pod(f"s{n}", gpus=1)
            order.append(f"s{n}")
            n += 1
        time.sleep(period)
    return None


@pytest.mark.parametrize(
    ("starvation", "starts"),
    [
        pytest.param(1.0, True, id="with the guard: starts within starvationSeconds + a drain"),
        pytest.param(600.0, False, id="without: waits to the end of the stream"),
    ],
)
def test_the_starvation_guard_lets_a_big_pod_start_in_a_stream_of_small_ones(
    cluster, starvation, starts
):
    c = cluster
    settings = config(enabled=False, reclaim=False, starvation_seconds=starvation)
    with running(c.fake, config=settings) as runtime:
        c.fill(16)
        c.pod("big", gpus=8)
        took = _stream(c, seconds=6.0, period=0.15, big="big")
        if starts:
            assert took is not None
            assert took < 1.0 + 8 * 0.15 + 2.5  # starvationSeconds + one node's drain + slack
            sample = runtime.metrics.registry.get_sample_value
            assert sample("gputopo_scheduler_held_gpu_seconds_total") > 0
        else:
            assert took is None
            for pod in c.fake.list_objects("pods", "team-a"):  # the stream ends, its pods go
                if pod["metadata"]["name"] != "big":
                    c.core.delete_namespaced_pod(
                        pod["metadata"]["name"], "team-a", grace_period_seconds=0
                    )
            wait_for(lambda: bound_pods(c.fake, "team-a").get("big"), 20, "big bound at the end")
    assert c.deleted() == []


def test_the_guard_holds_for_a_pod_whose_rules_read_beyond_its_node(cluster):
    """The big pod shuns `app=db` pods over the zone (none runs): a rule beyond the hostname,
    so a hold is judged on the live snapshot, not on a clone of the held node. It holds, and
    starts within starvationSeconds and a drain, as a pod without rules does."""
    c = cluster
    shun = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": ZONE_KEY}
    affinity = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [shun]}}
    settings = config(enabled=False, reclaim=False, starvation_seconds=1.0)
    with running(c.fake, config=settings) as runtime:
        c.fill(16)
        c.pod("big", gpus=8, affinity=affinity)
        took = _stream(c, seconds=6.0, period=0.15, big="big")
        assert took is not None
        assert took < 1.0 + 8 * 0.15 + 2.5
        sample = runtime.metrics.registry.get_sample_value
        assert sample("gputopo_scheduler_held_gpu_seconds_total") > 0
    assert c.deleted() == []


def test_a_starvation_hold_gives_way_to_reclaim(cluster, caplog):
    """`big` (team-a, 8 GPUs) starves and holds `gpu-a`, the node its 8 youngest pods run on.
    Team-b, owed its guarantee, reclaims one of those pods: the reclaim is nominated on
    `gpu-a`, the hold gives way, and team-b's pod (of big's own priority, which the hold kept
    off the node) starts there. A hold shows nowhere in the API, so its end is read from the
    scheduler's log (its own nomination would let team-b's pod start there in any case)."""
    c = cluster
    c.replace_queue_a(gpu_min=8, gpu_max=24)
    create_queue(c.custom, queue_body("b", gpu_min=8, gpu_max=16, namespaces=["team-b"]))
    caplog.set_level("INFO", logger="scheduler.runtime.preempting.nominating")
    settings = config(enabled=False, reclaim=True, starvation_seconds=1.0)
    with running(c.fake, config=settings) as runtime:
        c.fill(8, prefix="old", node="gpu-b")
        young = c.fill(8, prefix="young", node="gpu-a")
        c.pod("big", gpus=8)
        wait_for(lambda: "big starves: gpu-a held" in caplog.text, 20, "big holds gpu-a")
        c.pod("b0", "team-b", gpus=1)
        wait_for(lambda: bound_pods(c.fake, "team-b").get("b0"), 20, "b0 bound")
        assert bound_pods(c.fake, "team-b")["b0"] == "gpu-a"
        assert "pod/team-a/big: its starvation hold gives way to pod/team-b/b0" in caplog.text
        sample = runtime.metrics.registry.get_sample_value
        assert sample("gputopo_scheduler_preemption_victims_total", {"reason": "reclaim"}) == 1
    assert len(c.deleted()) == 1
    assert c.deleted()[0] in {f"team-a/{n}" for n in young}


def test_a_hold_whose_node_drained_is_renewed_before_a_unit_behind_it_takes_the_room(
    cluster, caplog
):
    """`big` (team-a, priority high, 8 GPUs) holds `gpu-a`; one of the pods there ends, so the
    node drained while held. `b0` (team-b, priority 0, 1 GPU) waits for room, kept off `gpu-a`
    by the hold. When the hold runs out it is renewed at once, in the same housekeeping tick:
    `b0`, whose queue the order across queues offers first (within its min), does not get the
    freed GPU, and `big` starts on `gpu-a` once the rest of its pods end. (Renewed only at big's
    next cycle, b0 was tried first, bound there, and the node no longer counted as drained.)"""
    c = cluster
    create_queue(c.custom, queue_body("b", gpu_min=1, namespaces=["team-b"]))  # b goes first
    caplog.set_level("INFO", logger="scheduler.runtime.preempting.nominating")
    held = "pod/team-a/big starves: gpu-a held for it"
    settings = config(
        enabled=False, reclaim=False, starvation_seconds=1.0, starvation_hold_seconds=1.5
    )
    with running(c.fake, config=settings):
        c.fill(8, prefix="old", node="gpu-b")
        young = c.fill(8, prefix="young", node="gpu-a")
        c.pod("big", gpus=8, priorityClassName="high")
        wait_for(lambda: held in caplog.text, 20, "big holds gpu-a")
        c.pod("b0", "team-b", gpus=1)
        c.core.delete_namespaced_pod(young[0], "team-a", grace_period_seconds=0)
        wait_for(lambda: "big: its nomination or hold timed out" in caplog.text, 20, "expiry")
        wait_for(lambda: caplog.text.count(held) >= 2, 20, "the hold renewed")
        time.sleep(0.3)  # b0 is tried again after the expiry: the renewed hold keeps it off
        assert "b0" not in bound_pods(c.fake, "team-b")
        for name in young[1:]:
            c.core.delete_namespaced_pod(name, "team-a", grace_period_seconds=0)
        wait_for(lambda: bound_pods(c.fake, "team-a").get("big") == "gpu-a", 20, "big bound")
        assert bound_pods(c.fake, "team-b").get("b0") != "gpu-a"
    assert c.deleted() == []


# -- (7) inter-pod anti-affinity ------------------------------------------------------------------
def _apart(app: str, key: str = "kubernetes.io/hostname") -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def test_a_pod_kept_out_by_hostname_anti_affinity_evicts_the_pod_in_its_way(cluster):
    """Both nodes have room, but each runs a low-priority `web` pod: the high-priority replica,
    anti-affine to `web` by hostname, evicts one of them (and nothing else) and binds there."""
    c = cluster
    with running(c.fake, config=config()):
        c.fill(1, prefix="web-a", node="gpu-a", labels={"app": "web"})
        c.fill(1, prefix="web-b", node="gpu-b", labels={"app": "web"})
        c.fill(4, prefix="batch", labels={"app": "batch"})
        c.pod(
            "web-new",
            gpus=1,
            priorityClassName="high",
            labels={"app": "web"},
            affinity=_apart("web"),
        )
        wait_for(lambda: bound_pods(c.fake, "team-a").get("web-new"), 20, "web-new bound")
    assert len(c.deleted()) == 1
    (victim,) = c.deleted()
    assert victim in ("team-a/web-a0", "team-a/web-b0")
    placed = bound_pods(c.fake, "team-a")
    assert placed["web-new"] == {"team-a/web-a0": "gpu-a", "team-a/web-b0": "gpu-b"}[victim]


def _zone(c: Any, zone: str, *names: str) -> None:
    for name in names:
        node = c.fake.get_object("nodes", name)
        node["metadata"]["labels"]["topology.kubernetes.io/zone"] = zone
        c.fake.put_object("nodes", node)


def test_zone_anti_affinity_evicts_the_replica_in_its_zone_on_the_node_it_takes(cluster):
    """Both nodes are in zone z and have room; a low-priority `web` pod runs on gpu-a. The new
    replica, anti-affine to `web` over the zone, evicts it, and nothing on gpu-b: evicting
    there could not lift the zone's refusal (as kube-scheduler, victims only on the node the
    pod is nominated to). Once it is gone, the zone takes the replica."""
    c = cluster
    _zone(c, "z", "gpu-a", "gpu-b")
    with running(c.fake, config=config()):
        c.fill(1, prefix="web-a", node="gpu-a", labels={"app": "web"})
        c.fill(2, prefix="batch-b", node="gpu-b", labels={"app": "batch"})
        c.pod(
            "web-new",
            gpus=1,
            priorityClassName="high",
            labels={"app": "web"},
            affinity=_apart("web", "topology.kubernetes.io/zone"),
        )
        wait_for(lambda: bound_pods(c.fake, "team-a").get("web-new"), 20, "web-new bound")
    assert c.deleted() == ["team-a/web-a0"]


def _gang(c: Cluster, name: str, gpus: int, labels: dict[str, str], affinity: Any) -> None:
    """Two high-priority pods `<name>0`, `<name>1` of PodGroup `name`."""
    create_podgroup(c.custom, podgroup(name, 2, namespace="team-a"))
    for i in range(2):
        c.pod(
            f"{name}{i}",
            gpus=gpus,
            priorityClassName="high",
            labels={GANG_LABEL: name, **labels},
            affinity=affinity,
        )


def test_a_gang_placed_exclusively_per_zone_evicts_the_other_job_in_the_zone_it_takes(cluster):
    """Zone z1 (gpu-a) runs a low-priority job `old` on 2 of its 8 GPUs, zone z2 (gpu-b) is full
    of high-priority work. The high-priority gang `new` (2 × 2 GPUs), exclusive per zone, has
    room on gpu-a but not beside `old`: it evicts both of old's pods, and binds in z1."""
    c = cluster
    _zone(c, "z1", "gpu-a")
    _zone(c, "z2", "gpu-b")
    zone = "topology.kubernetes.io/zone"
    with running(c.fake, config=config()):
        c.fill(2, prefix="old", node="gpu-a", labels={"job": "old"})
        c.fill(8, prefix="busy", node="gpu-b", priorityClassName="high")
        _gang(c, "new", 2, {"job": "new"}, exclusive_affinity("new", zone))
        wait_for(
            lambda: {"new0", "new1"} <= set(bound_pods(c.fake, "team-a")), 20, "the gang bound"
        )
        assert _on(c, ["new0", "new1"]) == {"new0": "gpu-a", "new1": "gpu-a"}
    assert sorted(c.deleted()) == ["team-a/old0", "team-a/old1"]


def test_a_gang_under_zone_anti_affinity_to_itself_in_one_zone_evicts_nobody(cluster):
    """Both nodes are in one zone and each member shuns the other over it: evicting cannot
    place the pair, so nobody is evicted and the reason says so."""
    c = cluster
    _zone(c, "z", "gpu-a", "gpu-b")
    with running(c.fake, config=config()):
        c.fill(1, prefix="web-a", node="gpu-a", labels={"app": "web"})
        _gang(c, "pair", 1, {"app": "web"}, _apart("web", "topology.kubernetes.io/zone"))
        wait_for(lambda: "preemption:" in c.reason("pair0"), 20, "the reason")
        assert c.reason("pair0").endswith(
            "preemption: evicting every eligible victim would still not fit the pod group"
        )
    assert c.deleted() == []
