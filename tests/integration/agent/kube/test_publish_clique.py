"""A GB200 node's NVLink clique reaches the API: the node label and the NRT attributes, through
the real publisher and client against the fake API server over HTTP."""

from __future__ import annotations

import pytest

from agent.inventory import load_inventory
from agent.kube.client import KubeSink
from agent.kube.publisher import NodeState, Publisher, PublisherSettings
from agent.labels import CLIQUE
from agent.metrics import AgentMetrics
from tests.builders.agentnode import NODE, NodeStateSource
from tests.builders.clock import FakeClock
from tests.builders.topology import allocatable_of
from tests.fakeapi import FakeApiServer

GB200_CLIQUE = "5c1f0e7a-3d2b-4c8e-9a61-0b7d2e4f9c13.1"


@pytest.mark.parametrize("node_labels", [True, False], ids=["labels on", "labels off"])
def test_gb200_node_publishes_its_clique(
    fake_api_with_crd: FakeApiServer, node_labels: bool
) -> None:
    source = NodeStateSource()
    inventory = load_inventory("gb200-nvl72-node")
    source.state = NodeState(inventory=inventory, snapshot=allocatable_of(inventory))
    api_client = fake_api_with_crd.api_client()
    try:
        publisher = Publisher(
            PublisherSettings(node_name=NODE, node_labels=node_labels),
            KubeSink(api_client, timeout_s=2.0),
            source,
            clock=FakeClock(),
            metrics=AgentMetrics(),
        )
        publisher.step()
    finally:
        api_client.close()  # type: ignore[no-untyped-call]
    node = fake_api_with_crd.get_object("nodes", NODE)
    nrt = fake_api_with_crd.get_object("noderesourcetopologies", NODE)
    assert node is not None
    assert nrt is not None
    labels = node["metadata"].get("labels") or {}
    assert labels.get(CLIQUE) == (GB200_CLIQUE if node_labels else None)
    attributes = {a["name"]: a["value"] for a in nrt["attributes"]}
    assert attributes["gputopo.io/nvlinkClique"] == GB200_CLIQUE
