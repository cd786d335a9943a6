"""Nothing a share gets comes from what its pod's author can write (DESIGN §12 "Trust"), through
the real agent process, the kubelet emulator and the fake API server: a forged annotation at
create, after bind and after admission; a lock expired before Allocate, or judged by a clock ahead
of the scheduler's; a gputopo-scheduler pod that is not the Lease's pod."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest

from agent.inventory import load_inventory
from agent.share_pods import decode_share_pods
from agent.share_usage import MIB
from agent.shares import ALLOCATED_ANNOTATION, GPU_MEMORY, GPUS_ANNOTATION, encode_gpus
from deviceplugin.allocation import VISIBLE_DEVICES
from tests.builders.scheduler import wait_for
from tests.builders.sharenode import (
    FIXTURE,
    GPU,
    ShareNode,
    share_container,
    share_node,
    share_pod,
)

GIB = 1024**3
MEMORY = load_inventory(FIXTURE).gpus[0].memory_mib * MIB


@pytest.fixture(scope="module")
def node():
    with share_node() as made:
        made.start_agent()
        yield made


def visible(admission, container: str = "main") -> str:
    return admission.env(container, GPU)[VISIBLE_DEVICES]


def replica(node: ShareNode, gpu: int, n: int) -> str:
    return f"{node.uuid(gpu)}::{n}"


@contextmanager
def only_free(node: ShareNode, free: str) -> Iterator[None]:
    """Every replica but `free` held by pods the kubelet counts, so the next one is `free`."""
    others = set(node.kubelet.devices(GPU)) - {free} - node.kubelet.in_use.get(GPU, set())
    node.kubelet.in_use.setdefault(GPU, set()).update(others)
    try:
        yield
    finally:
        node.kubelet.release(GPU, sorted(others))


def patch_annotations(node: ShareNode, name: str, annotations: dict[str, str | None]) -> None:
    """The pod's author edits its annotations (a tenant may update its own pods)."""
    node.scheduler.core.patch_namespaced_pod(
        name, "default", {"metadata": {"annotations": annotations}},
        _content_type="application/merge-patch+json", _preload_content=False,
    )  # fmt: skip


def test_forged_allocated_and_gpus_at_create_are_not_honoured(node):
    """A pod bound around the scheduler, created with `allocated` naming the one free replica
    and `gpus` naming GPU 7: it gets the replica's own GPU, an equal split."""
    free = replica(node, 1, 0)
    body = share_pod("forged-create", share_container("main", None))
    body["metadata"]["annotations"] = {
        GPUS_ANNOTATION: encode_gpus({"main": node.uuid(7)}),
        ALLOCATED_ANNOTATION: json.dumps({"main": [free]}),
    }
    with only_free(node, free):
        pod = node.scheduler.bind_unplaced(body)
        (done,) = node.admitter.admit(pod)
    assert done.error is None
    assert done.devices["main"][GPU] == (free,)
    assert visible(done) == node.uuid(1)
    node.admitter.remove(pod)


def test_a_gpus_annotation_rewritten_between_bind_and_admission_is_not_served(node):
    """The scheduler chose GPU 2 (its Lease says so); the tenant rewrites `gpus` to GPU 7
    before the kubelet admits the pod: the container still gets GPU 2."""
    pod = node.scheduler.place(share_pod("forged-bind"), {"main": node.uuid(2)})
    patch_annotations(node, "forged-bind", {GPUS_ANNOTATION: encode_gpus({"main": node.uuid(7)})})
    (done,) = node.admitter.admit(pod)
    assert done.error is None
    assert visible(done) == node.uuid(2)
    node.scheduler.wait_released()
    node.admitter.remove(pod)


def _memory_free(node: ShareNode, gpu: int) -> int | None:
    zone = node.gpu_zone(gpu) or {}
    free = {r["name"]: r["available"] for r in zone.get("resources") or []}
    return int(free[GPU_MEMORY]) if GPU_MEMORY in free else None


def test_annotations_edited_after_admission_do_not_move_shares_in_the_nrt(node):
    """A running 20Gi share on GPU 3 rewrites its `gpus` to GPU 4 and deletes its `allocated`;
    another share's admission makes the agent count again: GPU 3 still carries the 20Gi."""
    moved = share_pod("moved", share_container("main", "20Gi"))
    first = node.scheduler.place(moved, {"main": node.uuid(3)})
    node.admitter.admit(first)
    wait_for(lambda: _memory_free(node, 3) == MEMORY - 20 * GIB, 15, "GPU 3 charged 20Gi")
    patch_annotations(
        node, "moved",
        {GPUS_ANNOTATION: encode_gpus({"main": node.uuid(4)}), ALLOCATED_ANNOTATION: None},
    )  # fmt: skip
    witness = share_pod("witness", share_container("main", "5Gi"))
    second = node.scheduler.place(witness, {"main": node.uuid(5)})
    node.admitter.admit(second)
    wait_for(lambda: _memory_free(node, 5) == MEMORY - 5 * GIB, 15, "GPU 5 charged 5Gi")
    assert (_memory_free(node, 3), _memory_free(node, 4)) == (MEMORY - 20 * GIB, MEMORY)
    attributes = {a["name"]: a["value"] for a in (node.gpu_zone(3) or {})["attributes"]}
    (use,) = decode_share_pods(attributes["sharePods"])  # what the scheduler charges by UID
    assert (use.pod, use.uid, use.memory_bytes) == ("default/moved", first.uid, 20 * GIB)
    for pod in (first, second):
        node.admitter.remove(pod)


@pytest.mark.parametrize(
    "renewed",
    [
        pytest.param(timedelta(seconds=-40), id="node clock 40 s ahead of the scheduler's"),
        pytest.param(timedelta(hours=-1), id="lock expired an hour before Allocate"),
    ],
)
def test_the_leases_pod_is_served_its_gpu_whatever_the_clocks_say(node, renewed):
    pod = node.scheduler.place(
        share_pod("late", share_container("main", "30Gi")),
        {"main": node.uuid(6)},
        renewed=datetime.now(UTC) + renewed,
    )
    with only_free(node, replica(node, 0, 1)):
        (done,) = node.admitter.admit(pod)
    assert done.error is None
    assert visible(done) == node.uuid(6)  # not the replica's GPU 0
    node.scheduler.wait_released()
    node.admitter.remove(pod)
    node.scheduler.core.delete_namespaced_pod("late", "default", grace_period_seconds=0)
    node.fake.complete_pod_deletions()


def test_a_pod_whose_expired_lock_was_taken_for_another_fails_naming_it(node):
    """Pod A's lock expired and the scheduler took it for pod B: A's Allocate is refused with
    a reason naming A (it is given no GPU, not its replica's)."""
    expired = datetime.now(UTC) - timedelta(minutes=5)
    pod_a = node.scheduler.place(share_pod("expired-a"), {"main": node.uuid(1)}, renewed=expired)
    b = node.scheduler.create(share_pod("taken-b", scheduler="gputopo-scheduler"))
    node.scheduler.take_lock(b, {"main": node.uuid(2)}, steal=True)
    (refused,) = node.admitter.admit(pod_a)
    assert refused.error is not None
    assert "pod default/expired-a is gputopo-scheduler's but not the share lock's pod" in (
        refused.error
    )
    assert "(the lock names default/taken-b)" in refused.error
    assert node.scheduler.holder() == b["metadata"]["uid"]  # B keeps its lock
    node.scheduler.core.delete_namespaced_pod("taken-b", "default", grace_period_seconds=0)
    node.fake.complete_pod_deletions()
    node.scheduler.clear_lock()


def test_a_share_the_agent_cannot_record_is_refused_naming_why(node):
    """Unrecorded, a share would be lost to re-allocation and the NRT: Allocate refuses it."""
    blocker = node.folder / "not-a-directory"
    blocker.write_text("", encoding="utf-8")
    node.stop_agent()
    node.start_agent("--share-record", str(blocker / "shares.json"))
    try:
        pod = node.scheduler.place(share_pod("unrecorded"), {"main": node.uuid(4)})
        (refused,) = node.admitter.admit(pod)
    finally:
        node.stop_agent()
        node.start_agent()
    assert refused.error is not None
    assert "pod default/unrecorded container main: the agent cannot record its share" in (
        refused.error
    )
    assert node.scheduler.holder() is None  # released at once, for the next share pod
