"""The publisher loop against an in-memory sink and a fake clock."""

from __future__ import annotations

import io
import threading
from dataclasses import replace
from typing import Any

import pytest
import yaml

from agent.errors import PublishError
from agent.kube.publisher import (
    DryRunSink,
    NodeInfo,
    NodeState,
    Publisher,
    PublisherSettings,
    TerminalPodFilter,
    TopologySink,
)
from agent.labels import COUNT, PRESENT
from agent.metrics import AgentMetrics
from tests.builders.clock import FakeClock
from tests.builders.topology import allocatable_of, dgx_h100, gpu_pod, gpu_uuid

NODE = "gpu-1"


DEFAULT_NODE = NodeInfo(uid="uid-1", labels={"kubernetes.io/hostname": NODE})


class MemorySink:
    """Stores what the publisher writes; `down` makes every call fail like an unreachable server."""

    def __init__(self, node: NodeInfo | None = DEFAULT_NODE) -> None:
        self.node_info = node
        self.objects: dict[str, dict[str, Any]] = {}
        self.calls: list[str] = []
        self.down = False

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if self.down:
            raise PublishError(f"{name}: API server unreachable (fake)")

    def node(self, name: str) -> NodeInfo | None:
        self._call("node")
        return self.node_info

    def get_topology(self, name: str) -> dict[str, Any] | None:
        self._call("get")
        return self.objects.get(name)

    def apply_topology(self, obj) -> None:
        self._call("apply")
        self.objects[obj["metadata"]["name"]] = dict(obj)

    def patch_labels(self, name: str, patch) -> None:
        self._call("labels")
        assert self.node_info is not None
        merged = {**self.node_info.labels, **patch}
        self.node_info = replace(
            self.node_info, labels={k: v for k, v in merged.items() if v is not None}
        )

    def writes(self) -> list[str]:
        return [c for c in self.calls if c in {"apply", "labels"}]


_: TopologySink = MemorySink()


class StateBox:
    def __init__(self) -> None:
        inv = dgx_h100()
        self.state: NodeState | None = NodeState(inventory=inv, snapshot=allocatable_of(inv))
        self.reads = 0

    def __call__(self) -> NodeState | None:
        self.reads += 1
        return self.state

    def allocate(self, *pods) -> None:
        assert self.state is not None
        snap = self.state.snapshot
        assert snap is not None
        self.state = replace(self.state, snapshot=replace(snap, pods=tuple(pods)))


def make(sink=None, **settings):
    sink = sink if sink is not None else MemorySink()
    clock, box = FakeClock(), StateBox()
    metrics = AgentMetrics()
    pub = Publisher(
        PublisherSettings(node_name=NODE, **settings), sink, box, clock=clock, metrics=metrics
    )
    return pub, sink, clock, box, metrics


def gpu_available(obj, zone="node-0") -> str:
    z = next(z for z in obj["zones"] if z["name"] == zone)
    return next(r["available"] for r in z["resources"] if r["name"] == "nvidia.com/gpu")


def test_first_step_publishes_and_labels_then_nothing_while_unchanged() -> None:
    pub, sink, clock, _, metrics = make()
    assert pub.step() == 0.5
    assert sink.writes() == ["apply", "labels"]
    obj = sink.objects[NODE]
    assert obj["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert sink.node_info.labels[PRESENT] == "true"
    for _ in range(50):
        clock.advance(0.5)
        pub.step()
    assert sink.writes() == ["apply", "labels"]
    assert pub.ready
    assert metrics.registry.get_sample_value("gputopo_agent_publish_writes_total") == 1.0


def test_an_allocation_is_published_on_the_next_step() -> None:
    pub, sink, clock, box, _ = make()
    pub.step()
    box.allocate(gpu_pod("ml", "a", gpu_uuid(0)))
    clock.advance(0.5)
    pub.step()
    assert sink.writes() == ["apply", "labels", "apply"]
    assert gpu_available(sink.objects[NODE]) == "3"


def test_api_down_backs_off_and_the_latest_state_lands() -> None:
    pub, sink, clock, box, metrics = make()
    pub.step()
    sink.down = True
    box.allocate(gpu_pod("ml", "a", gpu_uuid(0)))
    for _ in range(7):
        clock.advance(30)  # past any backoff so every step tries
        before = len(sink.calls)
        pub.step()
        assert len(sink.calls) > before
    assert metrics.registry.get_sample_value("gputopo_agent_publish_failures_total") == 7.0
    box.allocate(gpu_pod("ml", "a", gpu_uuid(0)), gpu_pod("ml", "b", gpu_uuid(1)))
    sink.down = False
    clock.advance(30)
    pub.step()
    assert gpu_available(sink.objects[NODE]) == "2"
    assert pub.written == sink.objects[NODE]


def test_backoff_doubles_up_to_the_cap_and_skips_reads_meanwhile() -> None:
    pub, sink, clock, box, _ = make(backoff_initial_s=1.0, backoff_max_s=4.0, poll_s=10.0)
    sink.down = True
    waits = []
    for _ in range(5):
        waits.append(pub.step())
        reads = box.reads
        clock.advance(0.5)
        pub.step()  # inside the backoff window: neither the state nor the API is touched
        assert box.reads == reads
        clock.advance(waits[-1])
    assert waits == [1.0, 2.0, 4.0, 4.0, 4.0]


def test_resync_repairs_a_deleted_object_and_lost_labels() -> None:
    pub, sink, clock, _, _ = make()
    pub.step()
    del sink.objects[NODE]
    sink.node_info = NodeInfo(uid="uid-1", labels={})
    clock.advance(30)
    pub.step()
    assert NODE not in sink.objects  # not noticed before the resync
    clock.advance(30)
    pub.step()
    assert sink.objects[NODE] == pub.written
    assert sink.node_info.labels[COUNT] == "8"
    calls = sink.calls[-4:]
    assert calls == ["node", "get", "apply", "labels"]


def test_resync_without_drift_writes_nothing() -> None:
    pub, sink, clock, _, _ = make()
    pub.step()
    sink.objects[NODE] = {
        **sink.objects[NODE],
        "metadata": {**sink.objects[NODE]["metadata"], "resourceVersion": "9"},
    }
    clock.advance(61)
    pub.step()
    assert sink.writes() == ["apply", "labels"]
    assert sink.calls[-2:] == ["node", "get"]


def test_recreated_node_gets_a_new_owner_reference_at_resync() -> None:
    pub, sink, clock, _, _ = make()
    pub.step()
    sink.node_info = replace(sink.node_info, uid="uid-2")
    clock.advance(61)
    pub.step()
    assert sink.objects[NODE]["metadata"]["ownerReferences"][0]["uid"] == "uid-2"


def test_missing_node_publishes_without_owner_or_labels() -> None:
    pub, sink, _, _, _ = make(MemorySink(node=None))
    pub.step()
    assert "ownerReferences" not in sink.objects[NODE]["metadata"]
    assert sink.writes() == ["apply"]


def test_labels_off_leaves_labels_alone() -> None:
    pub, sink, _, _, _ = make(node_labels=False)
    pub.step()
    assert sink.writes() == ["apply"]
    assert PRESENT not in sink.node_info.labels


def test_unreadable_state_publishes_nothing() -> None:
    pub, sink, _, box, _ = make()
    box.state = None
    pub.step()
    assert sink.calls == []
    with pytest.raises(PublishError, match="node state unreadable"):
        pub.publish_once()


def test_publish_once_returns_the_object() -> None:
    pub, sink, _, _, _ = make()
    obj = pub.publish_once()
    assert sink.objects[NODE] == obj
    sink.down = True
    with pytest.raises(PublishError, match="unreachable"):
        pub.publish_once()


def test_run_stops_on_the_event_and_poke_wakes_it() -> None:
    stop = threading.Event()
    sink, box = MemorySink(), StateBox()
    pub = Publisher(PublisherSettings(node_name=NODE, poll_s=30.0), sink, box, stop=stop)
    thread = threading.Thread(target=pub.run)
    thread.start()
    try:
        deadline = threading.Event()
        for _ in range(200):
            if pub.ready:
                break
            deadline.wait(0.01)
        box.allocate(gpu_pod("ml", "a", gpu_uuid(4)))
        pub.poke()
        for _ in range(200):
            if gpu_available(sink.objects[NODE], "node-1") == "3":
                break
            deadline.wait(0.01)
        assert gpu_available(sink.objects[NODE], "node-1") == "3"
    finally:
        pub.stop()
        thread.join(timeout=5)
    assert not thread.is_alive()


def test_dry_run_prints_yaml_documents() -> None:
    out = io.StringIO()
    pub = Publisher(PublisherSettings(node_name=NODE), DryRunSink(out), StateBox())
    pub.publish_once()
    docs = list(yaml.safe_load_all(out.getvalue()))
    assert [d["kind"] for d in docs] == ["NodeResourceTopology", "Node"]
    assert docs[0]["metadata"] == {"name": NODE}
    assert docs[1]["metadata"]["labels"][PRESENT] == "true"


def test_terminal_pod_filter_refreshes_on_unseen_pods_and_ttl() -> None:
    clock = FakeClock()
    phases = {("a", "done"): "Succeeded", ("a", "run"): "Running"}
    lists = []

    def source():
        lists.append(clock.now)
        if phases.get("down"):
            raise PublishError("down")
        return dict(phases)

    is_terminal = TerminalPodFilter(source, clock=clock, ttl_s=60, min_interval_s=5)
    assert is_terminal("a", "done")
    assert not is_terminal("a", "run")
    assert len(lists) == 1
    phases[("a", "run")] = "Failed"
    phases[("a", "new")] = "Running"
    assert not is_terminal("a", "new")  # unseen, but within min_interval: no new list
    clock.advance(6)
    assert not is_terminal("a", "other")  # unseen: list again
    assert is_terminal("a", "run")
    assert len(lists) == 2
    clock.advance(61)
    phases["down"] = "x"  # type: ignore[index]
    assert is_terminal("a", "run")  # API down: the last answer stands
    assert len(lists) == 3


def test_no_publish_keeps_the_labels_only() -> None:
    pub, sink, clock, box, _ = make(publish_topology=False)
    pub.step()
    assert sink.writes() == ["labels"]
    assert pub.ready
    box.allocate(gpu_pod("ml", "a", gpu_uuid(0)))
    clock.advance(61)
    pub.step()
    assert sink.objects == {}
    assert sink.writes() == ["labels"]
