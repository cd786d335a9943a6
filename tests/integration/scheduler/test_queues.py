"""Queues and elastic quotas end to end (DESIGN §10): the real scheduler against the fake API
server, driven through the real client. 16 GPUs (two 8-GPU nodes) unless a test says otherwise."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator

import pytest
import yaml
from kubernetes import client

from tests.builders.queues import (
    QUEUE_LABEL,
    bind_order,
    condition,
    create_namespace,
    create_queue,
    patch_queue,
    queue_body,
    queue_status,
)
from tests.builders.render import DAEMONSET
from tests.builders.scheduler import (
    bound_pods,
    create_gang,
    create_pod,
    gpu_node,
    pod_body,
    running,
    scheduled_condition,
    wait_for,
)
from tests.fakeapi import FakeApiServer

TEAMS = ("team-a", "team-b", "team-c")


@pytest.fixture
def api(fake_api) -> Iterator[tuple[client.CoreV1Api, client.CustomObjectsApi]]:
    with fake_api.api_client() as api_client:
        core = client.CoreV1Api(api_client)
        for ns in TEAMS:
            create_namespace(core, ns)
        gpu_node(fake_api, "gpu-a", gpus=8)
        gpu_node(fake_api, "gpu-b", gpus=8)
        yield core, client.CustomObjectsApi(api_client)


def _pods(core: client.CoreV1Api, ns: str, count: int, gpus: int = 1, prefix: str = "p") -> None:
    for i in range(count):
        create_pod(core, pod_body(f"{prefix}{i}", gpus=gpus, namespace=ns))


def _gpus_bound(fake, ns: str) -> int:
    pods = {p["metadata"]["name"]: p for p in fake.list_objects("pods", ns)}
    return sum(
        int(pods[name]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"])
        for name in bound_pods(fake, ns)
    )


def _reason(fake, name: str, ns: str) -> str:
    cond = scheduled_condition(fake, name, ns) or {}
    return str(cond.get("message") or "")


def test_a_queue_borrows_idle_gpus_up_to_max_and_the_other_waits_within_guarantee(
    fake_api, api
) -> None:
    core, custom = api
    create_queue(custom, queue_body("a", gpu_min=8, gpu_max=16, namespaces=["team-a"]))
    create_queue(custom, queue_body("b", gpu_min=8, gpu_max=16, namespaces=["team-b"]))
    with running(fake_api):
        _pods(core, "team-a", 18)
        wait_for(lambda: _gpus_bound(fake_api, "team-a") == 16, 20, "a runs 16 GPUs")
        waiting = [f"p{i}" for i in range(18) if f"p{i}" not in bound_pods(fake_api, "team-a")]
        message = "queue a: nvidia.com/gpu 16 used + 1 requested > max 16"
        for name in waiting:
            wait_for(lambda n=name: _reason(fake_api, n, "team-a") == message, 10, "the reason")
        _pods(core, "team-b", 2)
        wait_for(lambda: scheduled_condition(fake_api, "p0", "team-b"), 10, "b's pod waits")
        wait_for(
            lambda: queue_status(fake_api, "a").get("used") == {"nvidia.com/gpu": "16"},
            10,
            "status",
        )
        status = queue_status(fake_api, "a")
        assert status["borrowed"] == {"nvidia.com/gpu": "8"}
        assert _gpus_bound(fake_api, "team-a") == 16
        assert _gpus_bound(fake_api, "team-b") == 0


def test_a_queue_without_min_never_exceeds_its_max_on_an_idle_cluster(fake_api, api) -> None:
    core, custom = api
    create_queue(custom, queue_body("c", gpu_max=4, namespaces=["team-c"]))
    with running(fake_api):
        _pods(core, "team-c", 6)
        wait_for(lambda: _gpus_bound(fake_api, "team-c") == 4, 20, "c runs 4")
        wait_for(
            lambda: (
                "max 4" in _reason(fake_api, "p5", "team-c")
                or "max 4" in _reason(fake_api, "p4", "team-c")
            ),
            10,
            "reason",
        )
        assert _gpus_bound(fake_api, "team-c") == 4


def test_children_of_a_capped_parent_together_stay_under_it(fake_api, api) -> None:
    core, custom = api
    create_queue(custom, queue_body("org", gpu_max=12))
    create_queue(custom, queue_body("x", gpu_max=10, parent="org", namespaces=["team-a"]))
    create_queue(custom, queue_body("y", gpu_max=10, parent="org", namespaces=["team-b"]))
    with running(fake_api):
        _pods(core, "team-a", 8)
        _pods(core, "team-b", 8)
        wait_for(
            lambda: _gpus_bound(fake_api, "team-a") + _gpus_bound(fake_api, "team-b") == 12,
            20,
            "12 bound",
        )
        wait_for(
            lambda: queue_status(fake_api, "org").get("used") == {"nvidia.com/gpu": "12"},
            10,
            "org used",
        )
        assert _gpus_bound(fake_api, "team-a") + _gpus_bound(fake_api, "team-b") == 12


def test_an_elastic_quota_acts_as_a_leaf_with_its_min_and_max(fake_api, api) -> None:
    core, custom = api
    quota = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": "quota", "namespace": "team-c"},
        "spec": {"min": {"nvidia.com/gpu": 2}, "max": {"nvidia.com/gpu": 3}},
    }
    custom.create_namespaced_custom_object(
        "scheduling.x-k8s.io", "v1alpha1", "team-c", "elasticquotas", quota
    )
    with running(fake_api):
        _pods(core, "team-c", 5)
        wait_for(lambda: _gpus_bound(fake_api, "team-c") == 3, 20, "3 bound")
        wait_for(
            lambda: (
                "queue ns/team-c" in _reason(fake_api, "p4", "team-c")
                or "queue ns/team-c" in _reason(fake_api, "p3", "team-c")
            ),
            10,
            "reason",
        )
        assert _gpus_bound(fake_api, "team-c") == 3


def test_the_queue_furthest_below_its_min_goes_first(fake_api, api) -> None:
    core, custom = api
    create_queue(custom, queue_body("root", paused=True))
    create_queue(custom, queue_body("a", gpu_min=8, gpu_max=16, namespaces=["team-a"]))
    create_queue(custom, queue_body("b", gpu_min=8, gpu_max=16, namespaces=["team-b"]))
    for ns, running_gpus in (("team-a", 2), ("team-b", 6)):  # already bound by gputopo
        create_pod(
            core,
            pod_body(
                "old", gpus=running_gpus, namespace=ns, node="gpu-a" if ns == "team-a" else "gpu-b"
            ),
        )
    with running(fake_api, bind_workers=1):  # binds in the order decided
        create_pod(core, pod_body("new", gpus=1, namespace="team-b"))  # older of the two
        create_pod(core, pod_body("new", gpus=1, namespace="team-a"))
        for ns in ("team-b", "team-a"):  # both seen (the Queue's informer may run ahead)
            wait_for(lambda ns=ns: "paused" in _reason(fake_api, "new", ns), 10, "paused")
        fake_api.clear_requests()
        patch_queue(custom, "root", {"paused": False})
        wait_for(lambda: len(bind_order(fake_api)) == 2, 10, "both bound")
        assert bind_order(fake_api) == ["team-a/new", "team-b/new"]


def test_inside_a_queue_a_higher_priority_class_goes_first(fake_api, api) -> None:
    core, custom = api
    client.SchedulingV1Api(core.api_client).create_priority_class(
        {"metadata": {"name": "high"}, "value": 1000}
    )
    create_queue(custom, queue_body("a", gpu_max=16, namespaces=["team-a"], paused=True))
    with running(fake_api, bind_workers=1):  # binds in the order decided
        create_pod(core, pod_body("low", gpus=1, namespace="team-a"))
        create_pod(core, pod_body("high", gpus=1, namespace="team-a", priorityClassName="high"))
        wait_for(lambda: "paused" in _reason(fake_api, "high", "team-a"), 10, "paused reason")
        fake_api.clear_requests()
        patch_queue(custom, "a", {"paused": False})
        wait_for(lambda: len(bind_order(fake_api)) == 2, 10, "both bound")
        assert bind_order(fake_api) == ["team-a/high", "team-a/low"]


def test_a_unit_that_does_not_fit_does_not_block_the_ones_behind_it(fake_api, api) -> None:
    core, custom = api
    create_queue(custom, queue_body("a", gpu_max=16, namespaces=["team-a"]))
    with running(fake_api):
        create_pod(core, pod_body("huge", gpus=12, namespace="team-a"))
        create_pod(core, pod_body("small", gpus=1, namespace="team-a"))
        wait_for(lambda: bound_pods(fake_api, "team-a").get("small"), 10, "small bound")
        assert "huge" not in bound_pods(fake_api, "team-a")


def test_pause_stops_new_starts_in_the_queue_and_resume_starts_them_within_a_second(
    fake_api, api
) -> None:
    core, custom = api
    create_queue(custom, queue_body("a", gpu_max=16, namespaces=["team-a"], paused=True))
    create_queue(custom, queue_body("b", gpu_max=16, namespaces=["team-b"]))
    with running(fake_api):
        _pods(core, "team-a", 2)
        _pods(core, "team-b", 2)
        wait_for(lambda: len(bound_pods(fake_api, "team-b")) == 2, 10, "b runs")
        wait_for(lambda: _reason(fake_api, "p0", "team-a") == "queue a is paused", 10, "reason")
        assert bound_pods(fake_api, "team-a") == {}
        start = time.monotonic()
        patch_queue(custom, "a", {"paused": False})
        wait_for(lambda: len(bound_pods(fake_api, "team-a")) == 2, 5, "a runs")
        assert time.monotonic() - start < 1.0
        create_queue(custom, queue_body("root", paused=True))
        wait_for(lambda: condition(fake_api, "root", "Valid"), 10, "root status")
        _pods(core, "team-b", 1, prefix="late")
        wait_for(
            lambda: "scheduler is paused" in _reason(fake_api, "late0", "team-b"), 10, "root paused"
        )
        assert "late0" not in bound_pods(fake_api, "team-b")


def test_malformed_queues_get_a_condition_and_the_others_keep_scheduling(fake_api, api) -> None:
    core, custom = api
    create_queue(custom, queue_body("cyc1", parent="cyc2"))
    create_queue(custom, queue_body("cyc2", parent="cyc1"))
    create_queue(custom, queue_body("orphan", parent="missing"))
    create_queue(custom, queue_body("inverted", gpu_min=8, gpu_max=4))
    create_queue(custom, queue_body("negative", gpu_max=-1))
    create_queue(custom, queue_body("good", gpu_max=4, namespaces=["team-a"]))
    with running(fake_api):
        _pods(core, "team-a", 2)
        wait_for(lambda: len(bound_pods(fake_api, "team-a")) == 2, 10, "good queue schedules")
        for name, reason in (
            ("cyc1", "Cycle"),
            ("cyc2", "Cycle"),
            ("orphan", "UnknownParent"),
            ("inverted", "Invalid"),
            ("negative", "Invalid"),
        ):
            cond = wait_for(lambda n=name: condition(fake_api, n, "Valid"), 10, f"{name} condition")
            assert cond["status"] == "False"
            assert cond["reason"] == reason
        good = wait_for(lambda: condition(fake_api, "good", "Valid"), 10, "good condition")
        assert good["status"] == "True"
        assert (
            "spec.min[nvidia.com/gpu] is above spec.max"
            in condition(fake_api, "inverted", "Valid")["message"]
        )
        labelled = pod_body("lost", gpus=1, namespace="team-b", labels={QUEUE_LABEL: "good"})
        create_pod(core, labelled)
        create_pod(
            core, pod_body("cyclic", gpus=1, namespace="team-b", labels={QUEUE_LABEL: "cyc1"})
        )
        wait_for(
            lambda: "does not serve namespace team-b" in _reason(fake_api, "lost", "team-b"),
            10,
            "ns reason",
        )
        wait_for(lambda: "cycle" in _reason(fake_api, "cyclic", "team-b"), 10, "cycle reason")
        warnings = [
            e for e in fake_api.list_objects("events", "default") if e.get("reason") == "Cycle"
        ]
        assert warnings


def test_a_new_scheduler_counts_the_same_usage_and_no_max_is_exceeded_across_a_restart(
    fake_api, api
) -> None:
    core, custom = api
    create_queue(custom, queue_body("a", gpu_max=8, namespaces=["team-a"]))
    fake_api.slow(0.02)  # binds in flight when the first scheduler stops
    with running(fake_api) as first:
        _pods(core, "team-a", 12)
        wait_for(lambda: len(bound_pods(fake_api, "team-a")) >= 3, 20, "some bound")
    with first.cache.lock:
        used_by_first = dict(first.cache.queues.usage.used("a"))
    bound_then = _gpus_bound(fake_api, "team-a")
    assert used_by_first == ({"nvidia.com/gpu": bound_then * 1000} if bound_then else {})
    with running(fake_api) as second:
        with second.cache.lock:
            assert dict(second.cache.queues.usage.used("a")) == used_by_first
        wait_for(lambda: _gpus_bound(fake_api, "team-a") == 8, 20, "8 bound")
        wait_for(
            lambda: queue_status(fake_api, "a").get("used") == {"nvidia.com/gpu": "8"}, 10, "status"
        )
    fake_api.slow(0)
    binds = [name for name in bind_order(fake_api) if name.startswith("team-a/")]
    assert len(set(binds)) == 8  # every bind ever asked for, across both: never above max
    assert _gpus_bound(fake_api, "team-a") == 8


def test_a_gang_is_admitted_whole_in_the_queue_its_podgroup_names(fake_api, api) -> None:
    core, custom = api
    create_queue(custom, queue_body("small", gpu_max=8))
    for name, members in (("too-big", 3), ("fits", 2)):
        labels = {QUEUE_LABEL: "small"}
        create_gang(core, custom, name, members, gpus=4, namespace="team-a", group_labels=labels)
    with running(fake_api):
        wait_for(lambda: len(bound_pods(fake_api, "team-a")) == 2, 10, "the fitting gang")
        assert set(bound_pods(fake_api, "team-a")) == {"fits-0", "fits-1"}
        message = "queue small: nvidia.com/gpu 8 used + 12 requested > max 8"
        wait_for(lambda: _reason(fake_api, "too-big-0", "team-a") == message, 10, "gang reason")


def _status_patches(fake) -> int:
    return len(fake.requests_matching("PATCH", r"/queues/[^/]+/status$"))


def test_queue_status_is_written_only_on_change_and_metrics_show_each_queue(fake_api, api) -> None:
    core, custom = api
    create_queue(custom, queue_body("a", gpu_min=2, gpu_max=4, namespaces=["team-a"]))
    with running(fake_api) as runtime:
        _pods(core, "team-a", 3)
        wait_for(
            lambda: queue_status(fake_api, "a").get("used") == {"nvidia.com/gpu": "3"}, 10, "used"
        )
        status = queue_status(fake_api, "a")
        assert status["borrowed"] == {"nvidia.com/gpu": "1"}
        assert status["pending"] == {"units": 0, "resources": {}}
        assert condition(fake_api, "a", "Valid")["status"] == "True"
        settled = _status_patches(fake_api)
        time.sleep(4.5)  # two status periods with nothing new: nothing written
        assert _status_patches(fake_api) == settled
        url = f"http://127.0.0.1:{runtime.server.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as reply:
            text = reply.read().decode()
        assert 'gputopo_scheduler_queue_used{queue="a",resource="nvidia.com/gpu"} 3.0' in text
        assert 'gputopo_scheduler_queue_max{queue="a",resource="nvidia.com/gpu"} 4.0' in text
        assert 'gputopo_scheduler_queue_pending_units{queue="a"} 0.0' in text
        assert 'gputopo_scheduler_queue_paused{queue="a"} 0.0' in text


def test_the_status_the_scheduler_writes_fits_the_shipped_queue_crd() -> None:
    shipped = yaml.safe_load((DAEMONSET / "crds" / "queue.yaml").read_text())
    with FakeApiServer(install_crds=False) as fake:
        fake.register_crd(shipped)
        gpu_node(fake, "gpu-a", gpus=8)
        with fake.api_client() as api_client:
            core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
            create_namespace(core, "team-a")
            create_queue(custom, queue_body("a", gpu_min=2, gpu_max=4, namespaces=["team-a"]))
            create_queue(custom, queue_body("orphan", gpu_max=4, parent="missing"))
            with running(fake):
                _pods(core, "team-a", 3)
                used = {"nvidia.com/gpu": "3"}
                wait_for(lambda: queue_status(fake, "a").get("used") == used, 10, "a's status")
                cond = wait_for(lambda: condition(fake, "orphan", "Valid"), 10, "orphan's status")
        assert cond["reason"] == "UnknownParent"
        assert queue_status(fake, "a")["borrowed"] == {"nvidia.com/gpu": "1"}
        assert queue_status(fake, "a")["pending"]["units"] == 0


def test_nothing_is_scheduled_before_the_queues_are_listed(fake_api, api) -> None:
    """A scheduler that placed pods before its Queue list arrived would admit them against no
    quota: the first Queue list fails, pods are pending, and still nothing passes max."""
    core, custom = api
    create_queue(custom, queue_body("a", gpu_max=2, namespaces=["team-a"]))
    _pods(core, "team-a", 6)
    fake_api.fail_next(1, 500, path_regex=r"/queues$", method="GET")
    with running(fake_api):
        wait_for(lambda: _gpus_bound(fake_api, "team-a") == 2, 20, "2 bound")
        time.sleep(0.5)
        assert _gpus_bound(fake_api, "team-a") == 2
