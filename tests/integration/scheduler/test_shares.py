"""GPU shares through the real scheduler process (DESIGN §12): the real client against the fake
API server; the agent's half of the share lock is a stand-in (`agent_releasing_locks`)."""

from __future__ import annotations

import dataclasses

from scheduler.config import load_config
from scheduler.placement import Placer, Snapshot, default_scoring
from tests.builders.placement import GIB, share, share_pod, shared_node
from tests.builders.scheduler import (
    bound_pods,
    create_pod,
    delete_pod,
    gpu_node,
    node_of,
    pod_body,
    running,
    scheduled_condition,
    wait_for,
)
from tests.builders.shares import (
    agent_releasing_locks,
    gpus_annotation,
    share_body,
    shared_gpu_node,
)
from tests.builders.topology import dgx_h100, gpu_uuid

SIZES = (30, 10, 30, 20, 20, 10, 10, 10)  # Gi: 140 of the two GPUs' ~159


def _expected_gpus() -> list[int]:
    """The GPU the pure placement code gives each share in turn (the runtime must agree)."""
    memory = dgx_h100().gpus[0].memory_mib << 20
    snap = Snapshot([shared_node("s1", shared=2, slots=5, gpu_memory=memory)])
    placer = Placer(snap, default_scoring())
    out = []
    for i, size in enumerate(SIZES):
        request = share_pod(f"default/p{i}", share("main", memory=size * GIB))
        assignment = placer.decide(request).assignment
        assert assignment is not None
        snap.assume(request, assignment)
        out.append(assignment.shares[0].gpu)
    return out


def test_shares_pack_are_annotated_before_the_bind_and_the_ninth_waits(
    fake_api, core_v1, custom_objects
):
    shared_gpu_node(fake_api, custom_objects, "s1", slots=5)
    with running(fake_api, bind_workers=1), agent_releasing_locks(fake_api):
        for i, size in enumerate(SIZES):
            create_pod(core_v1, share_body(f"p{i}", f"{size}Gi"))
            wait_for(lambda i=i: node_of(fake_api, f"p{i}"), 10, f"share p{i} bound")
        create_pod(core_v1, share_body("ninth", "20Gi"))
        condition = wait_for(lambda: scheduled_condition(fake_api, "ninth"), 10, "ninth refused")
    uuids = [str(gpu_uuid(g)) for g in range(8)]
    placed = [uuids.index(gpus_annotation(fake_api, f"p{i}")["main"]) for i in range(8)]
    assert placed == _expected_gpus()
    assert set(placed) == {0, 1}
    for i in range(8):
        annotate = fake_api.requests_matching("PATCH", rf"/namespaces/default/pods/p{i}$")
        bind = fake_api.requests_matching("POST", rf"/pods/p{i}/binding$")
        assert len(annotate) == 1
        assert len(bind) == 1
        order = fake_api.requests
        assert order.index(annotate[0]) < order.index(bind[0])
    assert "no shared GPU had 20Gi free for a share" in condition["message"]
    assert node_of(fake_api, "ninth") is None


def test_a_held_lock_sends_the_next_share_elsewhere_and_then_makes_it_wait(
    fake_api, core_v1, custom_objects
):
    for name in ("s1", "s2"):
        shared_gpu_node(fake_api, custom_objects, name)
    gpu_node(fake_api, "w1", gpus=8)
    with running(fake_api):
        create_pod(core_v1, share_body("a", "10Gi"))
        first = wait_for(lambda: node_of(fake_api, "a"), 10, "a bound")
        create_pod(core_v1, share_body("b", "10Gi"))
        second = wait_for(lambda: node_of(fake_api, "b"), 10, "b bound on the other node")
        assert {first, second} == {"s1", "s2"}
        create_pod(core_v1, share_body("c", "10Gi"))
        create_pod(core_v1, pod_body("whole", gpus=2))
        wait_for(lambda: node_of(fake_api, "whole"), 10, "a whole-GPU pod binds meanwhile")
        condition = wait_for(lambda: scheduled_condition(fake_api, "c"), 10, "c waits")
        assert "share lock held by" in condition["message"]
        assert node_of(fake_api, "c") is None
        with agent_releasing_locks(fake_api):
            wait_for(lambda: node_of(fake_api, "c"), 10, "c bound once a lock is released")


def test_a_lock_whose_pod_was_deleted_expires_and_the_next_share_binds(
    fake_api, core_v1, custom_objects
):
    shared_gpu_node(fake_api, custom_objects, "s1")
    config = dataclasses.replace(load_config(None), share_lock_seconds=1)
    with running(fake_api, config=config):
        create_pod(core_v1, share_body("gone", "10Gi"))
        wait_for(lambda: node_of(fake_api, "gone"), 10, "gone bound")
        delete_pod(core_v1, "gone")
        fake_api.complete_pod_deletions()
        create_pod(core_v1, share_body("next", "10Gi"))
        wait_for(lambda: node_of(fake_api, "next"), 10, "next bound after the lock expired")
    lease = fake_api.get_object("leases", "gputopo-share-s1", "default")
    assert lease is not None
    assert (
        lease["spec"]["holderIdentity"]
        == fake_api.get_object("pods", "next", "default")["metadata"]["uid"]
    )


def _per_gpu(runtime) -> tuple[list[int], list[int], list[int]]:
    with runtime.cache.lock:
        node = runtime.cache.snapshot.node("s1")
        return node.slots_free[:2], node.memory_free[:2], node.compute_free[:2]


def test_a_restart_rebuilds_the_per_gpu_view_from_pods(fake_api, core_v1, custom_objects):
    shared_gpu_node(fake_api, custom_objects, "s1")
    with running(fake_api) as first, agent_releasing_locks(fake_api):
        for name, memory, compute in (("x", "30Gi", 50), ("y", "10Gi", 20)):
            create_pod(core_v1, share_body(name, memory, compute=compute))
            wait_for(lambda name=name: node_of(fake_api, name), 10, f"{name} bound")
        before = _per_gpu(first)
    with running(fake_api) as second:
        assert _per_gpu(second) == before
    assert sum(before[0]) == 6
    assert sum(before[2]) == 200 - 70


def test_a_replica_another_scheduler_placed_is_counted(fake_api, core_v1, custom_objects):
    shared_gpu_node(fake_api, custom_objects, "s1")
    create_pod(core_v1, share_body("foreign", scheduler="default-scheduler", node="s1"))
    with running(fake_api) as runtime, agent_releasing_locks(fake_api):
        assert sorted(_per_gpu(runtime)[0]) == [3, 4]
        create_pod(core_v1, share_body("big", "70Gi"))
        wait_for(lambda: node_of(fake_api, "big"), 10, "big bound")
    assert gpus_annotation(fake_api, "big") == {"main": str(gpu_uuid(1))}
    assert set(bound_pods(fake_api)) == {"foreign", "big"}


def test_a_queue_max_on_gpu_memory_holds_for_shares(fake_api, core_v1, custom_objects):
    shared_gpu_node(fake_api, custom_objects, "s1")
    queue = {"metadata": {"name": "team"}, "spec": {"max": {"gputopo.io/gpu-memory": "30Gi"}}}
    custom_objects.create_cluster_custom_object(
        "scheduling.gputopo.io", "v1alpha1", "queues", queue
    )
    team = {"gputopo.io/queue": "team"}
    with running(fake_api), agent_releasing_locks(fake_api):
        create_pod(core_v1, share_body("first", "20Gi", labels=team))
        wait_for(lambda: node_of(fake_api, "first"), 10, "first bound")
        create_pod(core_v1, share_body("second", "20Gi", labels=team))
        condition = wait_for(lambda: scheduled_condition(fake_api, "second"), 10, "second waits")
    assert "queue team: gputopo.io/gpu-memory" in condition["message"]
    assert node_of(fake_api, "second") is None
