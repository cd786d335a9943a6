"""Watches through `kubernetes.watch.Watch`: initial state, resume, selectors, 410, timeouts."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import urllib3
from kubernetes import watch
from kubernetes.client import ApiException, CoreV1Api

from tests.builders.fakeapi import make_binding, make_nrt, make_pod, make_podgroup


def new_watch() -> Any:
    """A `kubernetes.watch.Watch` (the module has no type annotations)."""
    return watch.Watch()  # type: ignore[no-untyped-call]


class Collector:
    """Runs a watch in a thread; collects (type, name) until `count` events or the stream ends."""

    def __init__(self, func: Callable[..., Any], count: int, **kwargs: Any) -> None:
        self.events: list[tuple[str, str]] = []
        self.raw: list[dict[str, Any]] = []
        self.error: BaseException | None = None
        self.watch = new_watch()
        self._enough = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(func, count, kwargs), daemon=True)
        self._thread.start()

    def _run(self, func: Callable[..., Any], count: int, kwargs: dict[str, Any]) -> None:
        try:
            for event in self.watch.stream(func, **kwargs):
                self.raw.append(event["raw_object"])
                self.events.append((event["type"], event["raw_object"]["metadata"]["name"]))
                if len(self.events) >= count:
                    self.watch.stop()
                    break
        except ApiException as exc:
            self.error = exc
        finally:
            self._enough.set()

    def wait(self, timeout: float = 5.0) -> list[tuple[str, str]]:
        assert self._enough.wait(timeout), f"watch ended with only {self.events}"
        return self.events


def _started(core: CoreV1Api, rv: str | None = None) -> str:
    """A resource version to watch from (so no race with the thread's start)."""
    meta = core.list_node().metadata
    assert meta is not None
    assert meta.resource_version is not None
    return rv or meta.resource_version


def test_watch_without_resource_version_starts_with_the_current_objects(core_v1):
    core_v1.create_node({"metadata": {"name": "n1"}})
    collector = Collector(core_v1.list_node, 1, timeout_seconds=5)
    assert collector.wait() == [("ADDED", "n1")]


def test_watch_from_a_resource_version_streams_changes(core_v1):
    core_v1.create_node({"metadata": {"name": "n0"}})
    rv = _started(core_v1)
    collector = Collector(core_v1.list_node, 3, resource_version=rv, timeout_seconds=5)
    core_v1.create_node({"metadata": {"name": "n1"}})
    core_v1.patch_node("n1", {"metadata": {"labels": {"gpu": "yes"}}})
    core_v1.delete_node("n1")
    assert collector.wait() == [("ADDED", "n1"), ("MODIFIED", "n1"), ("DELETED", "n1")]
    assert int(collector.raw[-1]["metadata"]["resourceVersion"]) > int(
        collector.raw[-2]["metadata"]["resourceVersion"]
    )


def test_watch_resumes_after_a_resource_version_without_repeats(core_v1):
    core_v1.create_node({"metadata": {"name": "n1"}})
    mid = core_v1.create_node({"metadata": {"name": "n2"}}).metadata.resource_version
    core_v1.create_node({"metadata": {"name": "n3"}})
    collector = Collector(core_v1.list_node, 1, resource_version=mid, timeout_seconds=5)
    assert collector.wait() == [("ADDED", "n3")]


def test_label_selected_watch_sees_objects_enter_and_leave(core_v1):
    core_v1.create_node({"metadata": {"name": "n1"}})
    rv = _started(core_v1)
    collector = Collector(
        core_v1.list_node, 2, resource_version=rv, label_selector="gpu=yes", timeout_seconds=5
    )
    core_v1.patch_node("n1", {"metadata": {"labels": {"gpu": "yes"}}})
    core_v1.patch_node("n1", {"metadata": {"labels": {"gpu": "no"}}})
    assert collector.wait() == [("ADDED", "n1"), ("DELETED", "n1")]


def test_pod_watch_by_scheduler_and_node_field_selector(core_v1):
    rv = core_v1.list_pod_for_all_namespaces().metadata.resource_version
    collector = Collector(
        core_v1.list_pod_for_all_namespaces,
        2,
        resource_version=rv,
        field_selector="spec.schedulerName=gputopo-scheduler,spec.nodeName=",
        timeout_seconds=5,
    )
    core_v1.create_namespaced_pod("default", make_pod("other"))
    core_v1.create_namespaced_pod("default", make_pod("mine", scheduler="gputopo-scheduler"))
    core_v1.create_namespaced_pod_binding(
        "mine", "default", make_binding("mine", "n1"), _preload_content=False
    )
    assert collector.wait() == [("ADDED", "mine"), ("DELETED", "mine")]


def test_namespaced_watch_ignores_other_namespaces(core_v1):
    core_v1.create_namespace({"metadata": {"name": "ml"}})
    rv = core_v1.list_pod_for_all_namespaces().metadata.resource_version
    collector = Collector(
        core_v1.list_namespaced_pod, 1, namespace="ml", resource_version=rv, timeout_seconds=5
    )
    core_v1.create_namespaced_pod("default", make_pod("elsewhere"))
    core_v1.create_namespaced_pod("ml", make_pod("here"))
    assert collector.wait() == [("ADDED", "here")]


def test_watch_from_a_compacted_resource_version_raises_410(fake_api, core_v1):
    old = core_v1.create_node({"metadata": {"name": "n1"}}).metadata.resource_version
    core_v1.create_node({"metadata": {"name": "n2"}})
    fake_api.compact()
    w = new_watch()
    with pytest.raises(ApiException) as err:
        list(w.stream(core_v1.list_node, resource_version=old, timeout_seconds=2))
    assert err.value.status == 410


def test_raw_watch_gets_an_error_event_with_a_410_status(fake_api, core_v1):
    old = core_v1.create_node({"metadata": {"name": "n1"}}).metadata.resource_version
    core_v1.create_node({"metadata": {"name": "n2"}})
    fake_api.compact()
    resp = core_v1.list_node(watch=True, resource_version=old, _preload_content=False)
    lines = [line for line in resp.read().decode().splitlines() if line]
    assert resp.status == 200
    assert '"type":"ERROR"' in lines[0]
    assert '"code":410' in lines[0]


def test_timeout_seconds_ends_the_stream_with_a_bookmark(core_v1):
    rv = _started(core_v1)
    w = new_watch()
    events = list(
        w.stream(
            core_v1.list_node, resource_version=rv, timeout_seconds=1, allow_watch_bookmarks=True
        )
    )
    assert [e["type"] for e in events] == ["BOOKMARK"]
    assert w.resource_version == rv


def test_watch_stream_breaks_when_the_server_goes_down(fake_api, core_v1):
    rv = _started(core_v1)
    resp = core_v1.list_node(watch=True, resource_version=rv, _preload_content=False)
    fake_api.down()
    with pytest.raises(urllib3.exceptions.ProtocolError):
        resp.read()


def test_custom_object_watch_streams_nrts_and_podgroups(fake_api, custom_objects):
    nrt = ("topology.node.k8s.io", "v1alpha2", "noderesourcetopologies")
    rv = custom_objects.list_cluster_custom_object(*nrt)["metadata"]["resourceVersion"]
    nrts = Collector(
        custom_objects.list_cluster_custom_object,
        2,
        group=nrt[0],
        version=nrt[1],
        plural=nrt[2],
        resource_version=rv,
        timeout_seconds=5,
    )
    groups = Collector(
        custom_objects.list_namespaced_custom_object,
        1,
        group="scheduling.x-k8s.io",
        version="v1alpha1",
        namespace="default",
        plural="podgroups",
        resource_version=rv,
        timeout_seconds=5,
    )
    custom_objects.create_cluster_custom_object(*nrt, make_nrt("n1"))
    custom_objects.patch_cluster_custom_object(*nrt, "n1", {"zones": []})
    custom_objects.create_namespaced_custom_object(
        "scheduling.x-k8s.io", "v1alpha1", "default", "podgroups", make_podgroup("g", 2)
    )
    assert nrts.wait() == [("ADDED", "n1"), ("MODIFIED", "n1")]
    assert groups.wait() == [("ADDED", "g")]
    assert nrts.raw[-1]["zones"] == []
