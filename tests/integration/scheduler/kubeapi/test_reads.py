"""`KubeClient` single-object reads: the object, None when it is absent, an error otherwise."""

from __future__ import annotations

import pytest

from scheduler.errors import ApiError
from scheduler.kubeapi.client import NODES, KubeClient, discovery_read, lease_read
from tests.builders.scheduler import wait_for


@pytest.fixture
def kube(fake_api):
    client = KubeClient(fake_api.api_client(), "gputopo-scheduler", "unused", timeout=5.0)
    yield client
    client.close()


def test_a_lease_reads_back_and_a_missing_one_is_none(kube) -> None:
    assert kube.get_lease("default", "nobody") is None
    kube.create_lease("default", {"metadata": {"name": "held"}, "spec": {"holderIdentity": "a"}})
    lease = kube.get_lease("default", "held")
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == "a"


def test_a_missing_claim_is_none(kube) -> None:
    assert kube.get_pvc("default", "data") is None


@pytest.mark.parametrize("status", [403, 500])
def test_other_failures_are_errors_naming_the_read(fake_api, kube, status: int) -> None:
    fake_api.fail_next(1, status=status, path_regex="/leases/held")
    with pytest.raises(ApiError, match=f"get lease default/held: HTTP {status}") as info:
        kube.get_lease("default", "held")
    assert info.value.status == status


def _gets(fake_api, path: str) -> int:
    return len(fake_api.requests_matching("GET", f"^{path}$"))


def test_a_read_sent_early_is_answered_once_and_then_sent_anew(fake_api, kube) -> None:
    """`prefetch_reads` sends the GET at once; the first `read` of that path takes its answer
    (as the server gave it then), the next one asks again."""
    kube.create_lease("default", {"metadata": {"name": "held"}, "spec": {"holderIdentity": "a"}})
    early = lease_read("default", "held")
    kube.prefetch_reads([early])
    assert wait_for(lambda: _gets(fake_api, early.path) == 1, 5, "the early read")
    kube.replace_lease(
        "default", "held", {"metadata": {"name": "held"}, "spec": {"holderIdentity": "b"}}
    )
    first = kube.get_lease("default", "held")
    assert first is not None
    assert first["spec"]["holderIdentity"] == "a"
    assert _gets(fake_api, early.path) == 1
    second = kube.get_lease("default", "held")
    assert second is not None
    assert second["spec"]["holderIdentity"] == "b"
    assert _gets(fake_api, early.path) == 2


def test_an_early_reads_error_is_raised_by_the_read_that_takes_it(fake_api, kube) -> None:
    fake_api.fail_next(1, status=403, path_regex="/leases/held")
    kube.prefetch_reads([lease_read("default", "held")])
    with pytest.raises(ApiError, match="get lease default/held: HTTP 403"):
        kube.get_lease("default", "held")
    assert kube.get_lease("default", "held") is None  # asked anew: absent, not forbidden


def test_forgetting_early_reads_keeps_the_early_lists(fake_api, kube) -> None:
    """After start-up no read may take an old answer, but the informers' lists still wait."""
    discovery = discovery_read("resource.k8s.io", "v1")
    kube.prefetch((NODES,))
    kube.prefetch_reads([discovery])
    assert wait_for(lambda: _gets(fake_api, discovery.path) == 1, 5, "the early read")
    kube.forget_prefetched_reads()
    kube.resources("resource.k8s.io", "v1")
    assert _gets(fake_api, discovery.path) == 2
    kube.list(NODES)
    assert _gets(fake_api, "/api/v1/nodes") == 1
