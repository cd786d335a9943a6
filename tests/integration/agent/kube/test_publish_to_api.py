"""The publisher end to end: fake PodResources -> real kubernetes client -> fake API server."""

from __future__ import annotations

import threading
import time

import pytest

from agent.cli.publish_service import StateReader
from agent.fingerprint import pods_fingerprint
from agent.kube.client import FIELD_MANAGER, KubeSink
from agent.kube.node_pods import TerminalPodFilter
from agent.kube.publisher import Publisher, PublisherSettings
from agent.labels import COUNT, PRESENT
from agent.nrt import ATTR_FINGERPRINT, decode
from deviceplugin.podresources import PodResourcesClient
from tests.builders.agentnode import NODE
from tests.builders.clock import FakeClock
from tests.builders.topology import gpu_pod

NRT_PATH = r"/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies"


@pytest.fixture
def stack(fake_api_with_crd, podresources, inventory):
    api_client = fake_api_with_crd.api_client()
    sink = KubeSink(api_client, timeout_s=2.0)
    client = PodResourcesClient(podresources.socket, timeout_s=1.0)
    clock = FakeClock(0.0)
    reader = StateReader(
        client,
        inventory=lambda: inventory,
        unhealthy=frozenset,
        is_terminal=TerminalPodFilter(lambda: sink.pod_phases(NODE), clock=clock),
    )
    settings = PublisherSettings(node_name=NODE, poll_s=0.02)
    publisher = Publisher(settings, sink, reader, clock=clock)
    yield publisher, clock
    client.close()
    api_client.close()


def stored(fake):
    obj = fake.get_object("noderesourcetopologies", NODE)
    assert obj is not None
    return decode(obj)


def gpu_free(decoded, index: int) -> int:
    return decoded.gpu_counts(index)["nvidia.com/gpu"].available


def test_creates_the_object_owned_by_the_node_with_server_side_apply(
    stack, fake_api_with_crd, inventory
) -> None:
    fake = fake_api_with_crd
    publisher, _ = stack
    publisher.step()
    obj = fake.get_object("noderesourcetopologies", NODE)
    node = fake.get_object("nodes", NODE)
    assert obj["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node["metadata"]["uid"]}
    ]
    assert [m["manager"] for m in obj["metadata"]["managedFields"]] == [FIELD_MANAGER]
    (apply,) = fake.requests_matching("PATCH", NRT_PATH)
    assert apply.content_type.startswith("application/apply-patch+yaml")
    assert apply.query == {"fieldManager": FIELD_MANAGER, "force": "true"}
    decoded = decode(obj)
    assert decoded.inventory.links.cells() == inventory.links.cells()
    assert decoded.availability.source == "podresources"
    assert node["metadata"]["labels"][PRESENT] == "true"
    assert node["metadata"]["labels"][COUNT] == "8"


def test_nothing_is_written_while_nothing_changes(stack, fake_api_with_crd) -> None:
    publisher, clock = stack
    publisher.step()
    fake_api_with_crd.clear_requests()
    for _ in range(40):
        clock.now += 0.5
        publisher.step()
    assert fake_api_with_crd.requests == []
    clock.now += 60
    publisher.step()  # the periodic check reads the Node and the object back, and writes nothing
    assert [(r.method, r.path) for r in fake_api_with_crd.requests] == [
        ("GET", f"/api/v1/nodes/{NODE}"),
        ("GET", f"{NRT_PATH}/{NODE}"),
    ]
    assert fake_api_with_crd.writes() == []


def test_an_allocation_lands_within_a_second(
    stack, fake_api_with_crd, podresources, inventory
) -> None:
    publisher, _ = stack
    publisher.step()
    thread = threading.Thread(target=publisher.run)
    thread.start()
    try:
        started = time.monotonic()
        podresources.set_pod(gpu_pod("ml", "train-0", str(inventory.gpus[2].uuid)))
        landed = threading.Event()
        while not landed.wait(0.01) and time.monotonic() - started < 5:
            if gpu_free(stored(fake_api_with_crd), 2) == 0:
                landed.set()
        latency = time.monotonic() - started
    finally:
        publisher.stop()
        thread.join(timeout=5)
    assert landed.is_set()
    assert latency < 1.0
    assert stored(fake_api_with_crd).attributes[ATTR_FINGERPRINT] == pods_fingerprint(
        [("ml", "train-0")]
    )


def test_api_server_down_then_back_the_latest_state_lands(
    stack, fake_api_with_crd, podresources, inventory
) -> None:
    fake = fake_api_with_crd
    publisher, clock = stack
    publisher.step()
    fake.down()
    podresources.set_pod(gpu_pod("ml", "a", str(inventory.gpus[0].uuid)))
    clock.now += 1
    publisher.step()
    podresources.set_pod(gpu_pod("ml", "b", str(inventory.gpus[1].uuid)))
    clock.now += 5
    publisher.step()
    fake.up()
    clock.now += 60
    publisher.step()
    decoded = stored(fake)
    assert [gpu_free(decoded, i) for i in range(3)] == [0, 0, 1]
    assert decoded.attributes[ATTR_FINGERPRINT] == pods_fingerprint([("ml", "a"), ("ml", "b")])


def test_a_failed_apply_is_retried(stack, fake_api_with_crd, podresources, inventory) -> None:
    fake = fake_api_with_crd
    publisher, clock = stack
    publisher.step()
    fake.fail_next(1, 500, path_regex="noderesourcetopologies", method="PATCH")
    podresources.set_pod(gpu_pod("ml", "a", str(inventory.gpus[5].uuid)))
    clock.now += 1
    publisher.step()
    assert gpu_free(stored(fake), 5) == 1
    clock.now += 0.5  # the first backoff
    publisher.step()
    assert gpu_free(stored(fake), 5) == 0


def test_terminal_pods_hold_nothing(stack, fake_api_with_crd, podresources, inventory) -> None:
    fake = fake_api_with_crd
    for name, phase in (("done", "Succeeded"), ("busy", "Running")):
        fake.put_object(
            "pods",
            {
                "metadata": {"name": name, "namespace": "ml"},
                "spec": {"nodeName": NODE, "containers": []},
                "status": {"phase": phase},
            },
        )
    podresources.set_pod(gpu_pod("ml", "done", str(inventory.gpus[0].uuid)))
    podresources.set_pod(gpu_pod("ml", "busy", str(inventory.gpus[1].uuid)))
    publisher, _ = stack
    publisher.step()
    decoded = stored(fake)
    assert [gpu_free(decoded, i) for i in range(2)] == [1, 0]
    assert decoded.attributes[ATTR_FINGERPRINT] == pods_fingerprint([("ml", "busy")])


def test_a_deleted_object_is_recreated_at_the_periodic_check(stack, fake_api_with_crd) -> None:
    fake = fake_api_with_crd
    publisher, clock = stack
    publisher.step()
    assert fake.delete_object("noderesourcetopologies", NODE)
    clock.now += 61
    publisher.step()
    assert stored(fake).node_name == NODE
