"""What preemption writes on pods: `pods/status` patches (the `DisruptionTarget` condition,
`nominatedNodeName`) and graceful deletion, through the real client."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client import CoreV1Api

from tests.builders.clock import FakeClock
from tests.builders.fakeapi import make_binding, make_pod
from tests.fakeapi import FakeApiServer
from tests.fakeapi.objects import format_time

TARGET = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "PreemptionByScheduler",
    "message": "gputopo-scheduler: preempting to accommodate default/big",
}


def _bound(core_v1: Any, name: str = "p") -> None:
    core_v1.create_namespaced_pod("default", make_pod(name, scheduler="gputopo-scheduler"))
    core_v1.create_namespaced_pod_binding(
        name, "default", make_binding(name, "n1"), _preload_content=False
    )


def _types(fake: FakeApiServer) -> list[tuple[str, str | None]]:
    pod = fake.get_object("pods", "p", "default")
    assert pod is not None
    return [(c["type"], c.get("reason")) for c in pod["status"]["conditions"]]


def test_strategic_status_patch_merges_the_condition_by_type(fake_api, core_v1):
    _bound(core_v1)
    core_v1.patch_namespaced_pod_status("p", "default", {"status": {"conditions": [TARGET]}})
    assert _types(fake_api) == [("PodScheduled", None), ("DisruptionTarget", TARGET["reason"])]
    changed = dict(TARGET, message="again")
    core_v1.patch_namespaced_pod_status("p", "default", {"status": {"conditions": [changed]}})
    conditions = fake_api.get_object("pods", "p", "default")["status"]["conditions"]
    assert [c.get("message") for c in conditions] == [None, "again"]


def test_json_merge_status_patch_replaces_the_whole_list(fake_api, core_v1):
    _bound(core_v1)
    core_v1.patch_namespaced_pod_status(
        "p",
        "default",
        {"status": {"conditions": [TARGET]}},
        _content_type="application/merge-patch+json",
    )
    assert _types(fake_api) == [("DisruptionTarget", TARGET["reason"])]


def test_nominated_node_name_is_set_and_cleared_through_status(fake_api, core_v1):
    core_v1.create_namespaced_pod("default", make_pod("p", scheduler="gputopo-scheduler"))
    set_ = core_v1.patch_namespaced_pod_status(
        "p", "default", {"status": {"nominatedNodeName": "n1"}}
    )
    assert set_.status.nominated_node_name == "n1"
    listed = core_v1.list_namespaced_pod("default", field_selector="status.nominatedNodeName=n1")
    assert [p.metadata.name for p in listed.items] == ["p"]
    cleared = core_v1.patch_namespaced_pod_status(
        "p", "default", {"status": {"nominatedNodeName": None}}
    )
    assert cleared.status.nominated_node_name is None
    assert cleared.status.phase == "Pending"


def test_the_main_resource_cannot_change_status_nor_status_the_spec(fake_api, core_v1):
    core_v1.create_namespaced_pod("default", make_pod("p", scheduler="gputopo-scheduler"))
    main = core_v1.patch_namespaced_pod(
        "p", "default", {"status": {"nominatedNodeName": "n1", "conditions": [TARGET]}}
    )
    assert (main.status.nominated_node_name, main.status.conditions) == (None, None)
    status = core_v1.patch_namespaced_pod_status(
        "p", "default", {"spec": {"nodeName": "n1"}, "status": {"nominatedNodeName": "n2"}}
    )
    assert (status.spec.node_name, status.status.nominated_node_name) == (None, "n2")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_700_000_000.0)


@pytest.fixture
def timed(clock: FakeClock) -> Iterator[tuple[FakeApiServer, CoreV1Api]]:
    with FakeApiServer(clock=clock) as fake:
        api_client = fake.api_client()
        try:
            yield fake, CoreV1Api(api_client)
        finally:
            api_client.close()  # type: ignore[no-untyped-call]


def _graceful(core_v1: Any, grace: int) -> None:
    pod = make_pod("p", node="n1")
    pod["spec"]["terminationGracePeriodSeconds"] = grace
    core_v1.create_namespaced_pod("default", pod)


def test_a_bound_pod_stays_terminating_for_its_own_grace(timed, clock):
    fake, core_v1 = timed
    _graceful(core_v1, 45)
    core_v1.delete_namespaced_pod("p", "default")
    pod = core_v1.read_namespaced_pod("p", "default")
    assert pod.metadata.deletion_grace_period_seconds == 45
    assert pod.metadata.deletion_timestamp.timestamp() == clock.now + 45
    clock.advance(44)
    assert fake.complete_pod_deletions(only_expired=True) == 0
    clock.advance(1)
    assert fake.complete_pod_deletions(only_expired=True) == 1
    assert fake.list_objects("pods") == []


def test_a_second_delete_may_only_shorten_the_grace(timed, clock):
    fake, core_v1 = timed
    _graceful(core_v1, 30)
    start = clock.now
    core_v1.delete_namespaced_pod("p", "default")
    clock.advance(5)
    core_v1.delete_namespaced_pod("p", "default", grace_period_seconds=10)
    meta = fake.get_object("pods", "p", "default")["metadata"]
    assert (meta["deletionGracePeriodSeconds"], meta["deletionTimestamp"]) == (
        10,
        format_time(start + 10),
    )
    core_v1.delete_namespaced_pod("p", "default", grace_period_seconds=60)
    core_v1.delete_namespaced_pod("p", "default")
    assert fake.get_object("pods", "p", "default")["metadata"] == meta
    core_v1.delete_namespaced_pod("p", "default", grace_period_seconds=0)
    assert fake.get_object("pods", "p", "default") is None


def test_a_negative_grace_counts_as_one_second(timed, clock):
    fake, core_v1 = timed
    _graceful(core_v1, 30)
    core_v1.delete_namespaced_pod("p", "default", grace_period_seconds=-5)
    meta = fake.get_object("pods", "p", "default")["metadata"]
    assert (meta["deletionGracePeriodSeconds"], meta["deletionTimestamp"]) == (
        1,
        format_time(clock.now + 1),
    )
    assert fake.complete_pod_deletions() == 1
