"""`KubeClient` single-object reads: the object, None when it is absent, an error otherwise."""

from __future__ import annotations

import pytest

from scheduler.errors import ApiError
from scheduler.kubeapi.client import KubeClient


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
