"""Nothing is bound before every collection was listed: a fast first bind from a partial cache
could double-book GPUs (a node's bound pods not yet seen) or pass a Queue's max (its Queue not
yet seen). Each collection's first list fails in turn; its retry comes a second later, and the
first binding comes after it."""

from __future__ import annotations

import time

import pytest

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
