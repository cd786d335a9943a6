"""Shared set-up: fake API server with our NRT CRD and a GPU node; fake PodResources server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agent.nvml.fixture import load_fixture
from deviceplugin.testing.podresources_server import FakePodResourcesServer
from tests.builders import openapi
from tests.builders.agentnode import NODE, NODE_CAPACITY
from tests.builders.topology import allocatable_of
from tests.fakeapi import FakeApiServer
from tests.fakeapi.resources import podgroup_crd


@pytest.fixture
def fake_api_with_crd() -> Iterator[FakeApiServer]:
    """Started, with daemonset/crds/noderesourcetopology.yaml installed and one Ready GPU node."""
    with FakeApiServer(install_crds=False) as fake:
        fake.register_crd(openapi.load_crd())
        fake.register_crd(podgroup_crd())
        fake.add_node(NODE, capacity=NODE_CAPACITY)
        yield fake


@pytest.fixture
def inventory():
    return load_fixture("dgx-h100").inventory


@pytest.fixture
def podresources(inventory) -> Iterator[FakePodResourcesServer]:
    with FakePodResourcesServer() as fake:
        fake.set_allocatable(allocatable_of(inventory))
        yield fake
