"""The publisher loop (when it writes, backs off, repairs drift) with a fake clock: the real
publisher and the real client (`KubeSink`) against the fake API server, over HTTP."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from agent.errors import NodeNotFound, PublishError
from agent.kube.client import KubeSink
from agent.kube.node_pods import TerminalPodFilter
from agent.kube.publisher import Publisher, PublisherSettings
from agent.labels import COUNT, PRESENT
from agent.metrics import AgentMetrics
from agent.nrt import GROUP, PLURAL, VERSION
from tests.builders.agentnode import NODE, NODE_CAPACITY, NodeStateSource, gpu_available
from tests.builders.clock import FakeClock
from tests.builders.topology import gpu_pod, gpu_uuid
from tests.fakeapi import FakeApiServer

NODE_PATH = f"/api/v1/nodes/{NODE}"
NRT_PATH = f"/apis/{GROUP}/{VERSION}/{PLURAL}/{NODE}"
CALL_NAMES = {
    ("GET", NODE_PATH): "node",
    ("GET", NRT_PATH): "get",
    ("PATCH", NRT_PATH): "apply",
    ("PATCH", NODE_PATH): "labels",
}
"""The publisher's four API calls by (method, path): read the Node, read the object, server-side
apply the object, merge-patch the Node's labels."""


@dataclass(slots=True, kw_only=True)
class Rig:
    publisher: Publisher
    clock: FakeClock
    source: NodeStateSource
    metrics: AgentMetrics


@pytest.fixture
def sink(fake_api_with_crd: FakeApiServer) -> Iterator[KubeSink]:
    api_client = fake_api_with_crd.api_client()
    yield KubeSink(api_client, timeout_s=2.0)
    api_client.close()  # type: ignore[no-untyped-call]


def make(sink: KubeSink, **settings: Any) -> Rig:
    clock, source, metrics = FakeClock(), NodeStateSource(), AgentMetrics()
    publisher = Publisher(
        PublisherSettings(node_name=NODE, **settings), sink, source, clock=clock, metrics=metrics
    )
    return Rig(publisher=publisher, clock=clock, source=source, metrics=metrics)


def calls(fake: FakeApiServer) -> list[str]:
    """Every request so far, named as in CALL_NAMES (KeyError for any other request)."""
    return [CALL_NAMES[(r.method, r.path)] for r in fake.requests]


def writes(fake: FakeApiServer) -> list[str]:
    return [c for c in calls(fake) if c in {"apply", "labels"}]


def stored(fake: FakeApiServer) -> dict[str, Any]:
    obj = fake.get_object("noderesourcetopologies", NODE)
    assert obj is not None
    return obj


def labels(fake: FakeApiServer) -> dict[str, str]:
    node = fake.get_object("nodes", NODE)
    assert node is not None
    return dict(node["metadata"].get("labels") or {})


def node_uid(fake: FakeApiServer) -> str:
    node = fake.get_object("nodes", NODE)
    assert node is not None
    uid: str = node["metadata"]["uid"]
    return uid


def assert_stored_is(fake: FakeApiServer, written: dict[str, Any] | None) -> None:
    """The stored object says what the publisher wrote (server-set metadata aside)."""
    assert written is not None
    obj = stored(fake)
    for key in ("topologyPolicies", "zones", "attributes"):
        assert obj.get(key) == written.get(key), key
    owners = obj["metadata"].get("ownerReferences")
    assert owners == written["metadata"].get("ownerReferences")


def failures(rig: Rig) -> float | None:
    return rig.metrics.registry.get_sample_value("gputopo_agent_publish_failures_total")


def test_first_step_publishes_and_labels_then_nothing_while_unchanged(
    sink, fake_api_with_crd
) -> None:
    fake, rig = fake_api_with_crd, make(sink)
    assert rig.publisher.step() == 0.5
    assert writes(fake) == ["apply", "labels"]
    assert stored(fake)["metadata"]["ownerReferences"][0]["uid"] == node_uid(fake)
    assert labels(fake)[PRESENT] == "true"
    for _ in range(50):
        rig.clock.advance(0.5)
        rig.publisher.step()
    assert writes(fake) == ["apply", "labels"]
    assert rig.publisher.ready
    writes_total = rig.metrics.registry.get_sample_value("gputopo_agent_publish_writes_total")
    assert writes_total == 1.0


def test_an_allocation_is_published_on_the_next_step(sink, fake_api_with_crd) -> None:
    fake, rig = fake_api_with_crd, make(sink)
    rig.publisher.step()
    rig.source.allocate(gpu_pod("ml", "a", gpu_uuid(0)))
    rig.clock.advance(0.5)
    rig.publisher.step()
    assert writes(fake) == ["apply", "labels", "apply"]
    assert gpu_available(stored(fake)) == "3"


def test_api_down_backs_off_and_the_latest_state_lands(sink, fake_api_with_crd) -> None:
    fake, rig = fake_api_with_crd, make(sink)
    rig.publisher.step()
    fake.down()
    rig.source.allocate(gpu_pod("ml", "a", gpu_uuid(0)))
    for attempt in range(1, 8):
        rig.clock.advance(30)  # past any backoff so every step tries
        rig.publisher.step()
        assert failures(rig) == attempt
    rig.source.allocate(gpu_pod("ml", "a", gpu_uuid(0)), gpu_pod("ml", "b", gpu_uuid(1)))
    fake.up()
    rig.clock.advance(30)
    rig.publisher.step()
    assert gpu_available(stored(fake)) == "2"
    assert_stored_is(fake, rig.publisher.written)


def test_backoff_doubles_up_to_the_cap_and_skips_reads_meanwhile(sink, fake_api_with_crd) -> None:
    fake = fake_api_with_crd
    rig = make(sink, backoff_initial_s=1.0, backoff_max_s=4.0, poll_s=10.0)
    fake.fail_next(1000, 503)
    waits = []
    for _ in range(5):
        waits.append(rig.publisher.step())
        reads, requests = rig.source.reads, len(fake.requests)
        rig.clock.advance(0.5)
        rig.publisher.step()  # inside the backoff window: neither the state nor the API is touched
        assert (rig.source.reads, len(fake.requests)) == (reads, requests)
        rig.clock.advance(waits[-1])
    assert waits == [1.0, 2.0, 4.0, 4.0, 4.0]
    assert calls(fake) == ["node"] * 5


def test_resync_repairs_a_deleted_object_and_lost_labels(sink, fake_api_with_crd) -> None:
    fake, rig = fake_api_with_crd, make(sink)
    rig.publisher.step()
    assert fake.delete_object("noderesourcetopologies", NODE)
    node = fake.get_object("nodes", NODE)
    assert node is not None
    node["metadata"]["labels"] = {"kubernetes.io/hostname": NODE}
    fake.put_object("nodes", node)
    rig.clock.advance(30)
    rig.publisher.step()
    assert fake.get_object("noderesourcetopologies", NODE) is None  # not noticed before the resync
    rig.clock.advance(30)
    rig.publisher.step()
    assert_stored_is(fake, rig.publisher.written)
    assert labels(fake)[COUNT] == "8"
    assert calls(fake)[-4:] == ["node", "get", "apply", "labels"]


def test_resync_without_drift_writes_nothing(sink, fake_api_with_crd) -> None:
    fake, rig = fake_api_with_crd, make(sink)
    rig.publisher.step()
    touched = stored(fake)  # someone else annotates it: a new resourceVersion, the same content
    touched["metadata"]["annotations"] = {"example.com/seen": "yes"}
    version = touched["metadata"]["resourceVersion"]
    assert fake.put_object("noderesourcetopologies", touched)["metadata"]["resourceVersion"] != (
        version
    )
    rig.clock.advance(61)
    rig.publisher.step()
    assert writes(fake) == ["apply", "labels"]
    assert calls(fake)[-2:] == ["node", "get"]


def test_recreated_node_gets_a_new_owner_reference_at_resync(sink, fake_api_with_crd) -> None:
    fake, rig = fake_api_with_crd, make(sink)
    rig.publisher.step()
    old_uid = node_uid(fake)
    assert fake.delete_object("nodes", NODE)  # the garbage collector takes the object too
    fake.add_node(NODE, capacity=NODE_CAPACITY)
    assert node_uid(fake) != old_uid
    rig.clock.advance(61)
    rig.publisher.step()
    assert stored(fake)["metadata"]["ownerReferences"][0]["uid"] == node_uid(fake)
    assert labels(fake)[PRESENT] == "true"


def test_a_missing_node_gets_no_object_until_it_appears(sink, fake_api_with_crd) -> None:
    """A mistyped --node-name would leave an object nothing owns: nothing is written, the Node is
    looked up every node_wait_s, and the object lands, owned, once the Node exists."""
    fake = fake_api_with_crd
    assert fake.delete_object("nodes", NODE)
    rig = make(sink, node_wait_s=5.0)
    rig.publisher.step()
    assert calls(fake) == ["node"]
    assert not rig.publisher.ready
    assert rig.publisher.problem == (
        f"Node {NODE} not found: nothing is published for it until it exists "
        "(is --node-name right?)"
    )
    rig.clock.advance(4.5)
    rig.publisher.step()
    assert calls(fake) == ["node"]  # within node_wait_s: not asked again
    rig.clock.advance(0.5)
    rig.publisher.step()
    assert calls(fake) == ["node", "node"]
    fake.add_node(NODE, capacity=NODE_CAPACITY)
    rig.clock.advance(5)
    rig.publisher.step()
    assert writes(fake) == ["apply", "labels"]
    assert stored(fake)["metadata"]["ownerReferences"][0]["uid"] == node_uid(fake)
    assert (rig.publisher.ready, rig.publisher.problem) == (True, None)


def test_a_deleted_node_is_not_given_its_object_back_at_resync(sink, fake_api_with_crd) -> None:
    fake, rig = fake_api_with_crd, make(sink)
    rig.publisher.step()
    assert fake.delete_object("nodes", NODE)  # the garbage collector takes the object too
    rig.source.allocate(gpu_pod("ml", "a", gpu_uuid(0)))
    rig.clock.advance(61)
    rig.publisher.step()
    assert fake.get_object("noderesourcetopologies", NODE) is None
    assert writes(fake) == ["apply", "labels"]


def test_publish_once_for_a_missing_node_fails_and_writes_nothing(sink, fake_api_with_crd) -> None:
    fake = fake_api_with_crd
    assert fake.delete_object("nodes", NODE)
    with pytest.raises(NodeNotFound, match=f"^Node {NODE} not found: "):
        make(sink).publisher.publish_once()
    assert writes(fake) == []


def test_the_first_write_and_a_repair_are_logged_with_the_resource_version(
    sink, fake_api_with_crd, caplog
) -> None:
    fake, rig = fake_api_with_crd, make(sink)
    caplog.set_level(logging.DEBUG, logger="agent.kube.publisher")

    def published() -> list[tuple[int, str]]:
        return [(r.levelno, r.getMessage()) for r in caplog.records if "published" in r.message]

    rig.publisher.step()
    version = stored(fake)["metadata"]["resourceVersion"]
    line = f"published NodeResourceTopology {NODE} (resourceVersion {version})"
    assert published() == [(logging.INFO, line)]
    rig.source.allocate(gpu_pod("ml", "a", gpu_uuid(0)))
    rig.clock.advance(0.5)
    rig.publisher.step()  # a routine update: DEBUG
    version = stored(fake)["metadata"]["resourceVersion"]
    line = f"published NodeResourceTopology {NODE} (resourceVersion {version})"
    assert published()[1:] == [(logging.DEBUG, line)]
    assert fake.delete_object("noderesourcetopologies", NODE)
    rig.clock.advance(61)
    rig.publisher.step()  # the repair at resync: INFO again
    version = stored(fake)["metadata"]["resourceVersion"]
    line = f"published NodeResourceTopology {NODE} (resourceVersion {version})"
    assert published()[2:] == [(logging.INFO, line)]


def test_labels_off_leaves_labels_alone(sink, fake_api_with_crd) -> None:
    fake, rig = fake_api_with_crd, make(sink, node_labels=False)
    rig.publisher.step()
    assert writes(fake) == ["apply"]
    assert PRESENT not in labels(fake)


def test_unreadable_state_publishes_nothing(sink, fake_api_with_crd) -> None:
    fake, rig = fake_api_with_crd, make(sink)
    rig.source.state = None
    rig.publisher.step()
    assert fake.requests == []
    with pytest.raises(PublishError, match="node state unreadable"):
        rig.publisher.publish_once()


def test_publish_once_returns_the_object(sink, fake_api_with_crd) -> None:
    fake, rig = fake_api_with_crd, make(sink)
    obj = rig.publisher.publish_once()
    assert_stored_is(fake, obj)
    fake.down()
    with pytest.raises(PublishError, match="unreachable"):
        rig.publisher.publish_once()


def test_run_stops_on_the_event_and_poke_wakes_it(sink, fake_api_with_crd) -> None:
    fake, stop, source = fake_api_with_crd, threading.Event(), NodeStateSource()
    publisher = Publisher(PublisherSettings(node_name=NODE, poll_s=30.0), sink, source, stop=stop)
    thread = threading.Thread(target=publisher.run)
    thread.start()
    try:
        tick = threading.Event()
        for _ in range(500):
            if publisher.ready:
                break
            tick.wait(0.01)
        source.allocate(gpu_pod("ml", "a", gpu_uuid(4)))
        publisher.poke()
        for _ in range(500):
            if gpu_available(stored(fake), "node-1") == "3":
                break
            tick.wait(0.01)
        assert gpu_available(stored(fake), "node-1") == "3"
    finally:
        publisher.stop()
        thread.join(timeout=5)
    assert not thread.is_alive()


def test_no_publish_keeps_the_labels_only(sink, fake_api_with_crd) -> None:
    fake, rig = fake_api_with_crd, make(sink, publish_topology=False)
    rig.publisher.step()
    assert writes(fake) == ["labels"]
    assert rig.publisher.ready
    rig.source.allocate(gpu_pod("ml", "a", gpu_uuid(0)))
    rig.clock.advance(61)
    rig.publisher.step()
    assert fake.get_object("noderesourcetopologies", NODE) is None
    assert writes(fake) == ["labels"]


def test_terminal_pod_filter_lists_the_nodes_pods_and_keeps_the_last_answer_while_down(
    sink, fake_api_with_crd
) -> None:
    fake, clock = fake_api_with_crd, FakeClock()
    for name, phase in (("done", "Succeeded"), ("busy", "Running")):
        fake.put_object(
            "pods",
            {
                "metadata": {"name": name, "namespace": "ml"},
                "spec": {"nodeName": NODE, "containers": []},
                "status": {"phase": phase},
            },
        )
    is_terminal = TerminalPodFilter(lambda: sink.pod_phases(NODE), clock=clock)
    assert is_terminal("ml", "done")
    assert not is_terminal("ml", "busy")
    (listed,) = fake.requests
    assert (listed.path, listed.query["fieldSelector"]) == ("/api/v1/pods", f"spec.nodeName={NODE}")
    fake.down()
    clock.advance(61)
    assert is_terminal("ml", "done")  # the list failed: the last answer stands
