"""pytest fixtures for the fake API server (registered in tests/conftest.py).

def test_x(fake_api, core_v1): ...
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.fakeapi.server import FakeApiServer


@pytest.fixture
def fake_api() -> Iterator[FakeApiServer]:
    """A started fake API server with the default namespaces and the NRT and PodGroup CRDs."""
    with FakeApiServer() as fake:
        yield fake


@pytest.fixture
def kube_client(fake_api: FakeApiServer) -> Iterator[client.ApiClient]:
    """A real `kubernetes.client.ApiClient` for `fake_api`; closed after the test."""
    api_client = fake_api.api_client()
    try:
        yield api_client
    finally:
        api_client.close()  # type: ignore[no-untyped-call]


@pytest.fixture
def core_v1(kube_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(kube_client)


@pytest.fixture
def custom_objects(kube_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube_client)
