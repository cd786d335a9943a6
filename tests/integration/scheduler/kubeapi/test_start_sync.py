"""Nothing is bound before every collection was listed: a fast first bind from a partial cache
could double-book GPUs (a node's bound pods not yet seen) or pass a Queue's max (its Queue not
yet seen). Each collection's first list fails in turn; its retry comes a second later, and the
first binding comes after it."""

from __future__ import annotations

import time

import pytest

from scheduler.runtime.intake import FIRST_BATCH
from tests.builders.scheduler import create_pod, gpu_node, node_of, pod_body, running, wait_for

PLURALS = ["nodes", "pods", "noderesourcetopologies", "podgroups", "queues"]


def _index(requests: list, predicate) -> int:
    return next(i for i, r in enumerate(requests) if predicate(r))


@pytest.mark.parametrize("plural", PLURALS)
def test_the_first_bind_waits_for_a_failed_list_to_succeed(fake_api, core_v1, plural):
    gpu_node(fake_api, "n1")
    create_pod(core_v1, pod_body("p", gpus=1))
    fake_api.fail_next(1, 500, path_regex=rf"/{plural}$", method="GET")
    with running(fake_api):
        wait_for(lambda: node_of(fake_api, "p"), 10, "p bound")
    requests = fake_api.requests

    def listed(r) -> bool:
        return r.method == "GET" and r.path.endswith(f"/{plural}") and "watch" not in r.query

    failed = _index(requests, listed)
    retried = _index(requests[failed + 1 :], listed) + failed + 1
    bound = _index(requests, lambda r: r.path.endswith("/binding"))
    assert failed < retried < bound


def test_a_busy_cache_is_listed_again_within_moments(fake_api, core_v1):
    """A real API server answers 429 while its cache of a kind initialises (a CRD's first list):
    four such answers in a row cost well under the four seconds of the general retry."""
    gpu_node(fake_api, "n1")
    create_pod(core_v1, pod_body("p", gpus=1))
    fake_api.fail_next(4, 429, path_regex=r"/noderesourcetopologies$", method="GET",
                       message="storage is (re)initializing")  # fmt: skip
    started = time.monotonic()
    with running(fake_api):
        wait_for(lambda: node_of(fake_api, "p"), 10, "p bound")
        took = time.monotonic() - started
    assert took < 3.5


def test_a_start_binds_the_waiting_pods_highest_priority_first(fake_api, core_v1):
    """After a start the waiting pods are read after the sync, in batches in queue order: the
    one pod of a higher priority, listed last among hundreds, gets the only GPU first (had a low
    one been bound before it, the high one would preempt it: two binds)."""
    from kubernetes import client

    gpu_node(fake_api, "n1", gpus=1)
    client.SchedulingV1Api(core_v1.api_client).create_priority_class(
        {"metadata": {"name": "high"}, "value": 1000}
    )
    waiting = FIRST_BATCH + 10  # two later steps
    for i in range(waiting):
        create_pod(core_v1, pod_body(f"low-{i:04d}", gpus=1))
    create_pod(core_v1, pod_body("zz-high", gpus=1, priorityClassName="high"))
    with running(fake_api) as runtime:
        wait_for(lambda: node_of(fake_api, "zz-high"), 20, "zz-high bound")
        wait_for(lambda: len(runtime.cache.pods) == waiting + 1, 20, "every pod read")
    bound = [r for r in fake_api.requests if r.path.endswith("/binding")]
    assert [r.path.split("/")[-2] for r in bound] == ["zz-high"]


def test_the_informer_is_synced_before_the_steps_left_for_later_and_watches_after_them(
    fake_api, core_v1
):
    import threading

    from scheduler.kubeapi.client import PODS, KubeClient
    from scheduler.kubeapi.informer import Informer

    create_pod(core_v1, pod_body("p", gpus=1))
    seen: list[str] = []
    stop = threading.Event()

    class Sink:
        informer: Informer

        def replace(self, kind, items):
            seen.append(f"list {len(items)}")
            return [lambda: seen.append(f"later synced={self.informer.synced.is_set()}")] * 2

        def event(self, kind, etype, obj):
            seen.append(f"event {obj['metadata']['name']}")

    sink = Sink()
    kube = KubeClient(fake_api.api_client(), "gputopo-scheduler", "t", timeout=5.0)
    sink.informer = informer = Informer(kube, PODS, sink, stop, watch_timeout=5)
    informer.start()
    try:
        wait_for(informer.synced.is_set, 10, "synced")
        create_pod(core_v1, pod_body("q", gpus=1))
        wait_for(lambda: "event q" in seen, 10, "the watch event")
    finally:
        stop.set()
        informer.close()
        informer.join(5)
        kube.close()
    assert seen[:4] == ["list 1", "later synced=True", "later synced=True", "event q"]


def test_the_first_pod_list_leaves_the_waiting_pods_for_later_steps_in_queue_order(fake_api):
    from scheduler.cli.runtime import Runtime
    from scheduler.kubeapi.client import KubeClient
    from tests.builders.scheduler import settings

    def pod(name: str, priority: int, minute: int, **spec: object) -> dict:
        body = pod_body(name, gpus=1, priority=priority, **spec)
        body["metadata"].update(uid=name, creationTimestamp=f"2026-12-01T10:{minute:02d}:00Z")
        return body

    low = [pod(f"low-{i:03d}", 0, i % 60) for i in range(FIRST_BATCH + 5)]
    older_high = pod("high-old", 1000, 1)
    newer_high = pod("high-new", 1000, 2)
    bound = pod("bound", 0, 0, nodeName="n1")
    other = pod("other", 0, 0, schedulerName="default-scheduler")
    kube = KubeClient(fake_api.api_client(), "gputopo-scheduler", "t", timeout=5.0)
    runtime = Runtime(settings(), kube)
    try:
        later = runtime.scheduler.replace("pods", [*low, newer_high, older_high, bound, other])
        assert set(runtime.cache.pods) == {"default/bound", "default/other"}
        assert len(later) == 2
        later[0]()
        first = set(runtime.cache.pods) - {"default/bound", "default/other"}
        assert len(first) == FIRST_BATCH
        assert {"default/high-old", "default/high-new"} <= first
        earliest = sorted(
            low, key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"])
        )
        assert {f"default/{p['metadata']['name']}" for p in earliest[: FIRST_BATCH - 2]} <= first
        later[1]()
        assert len(runtime.cache.pods) == len(low) + 4
    finally:
        runtime.server.stop()  # never started: its socket is closed
        runtime.scheduler.close()
        runtime.reporter.close()
        kube.close()
