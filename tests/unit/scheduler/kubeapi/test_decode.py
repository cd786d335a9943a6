"""List answers and watch events decode to the dicts `json.loads` makes, but Nodes, which keep
only what the scheduler reads: the scheduler's view of any node is the same either way, a
malformed node still fails alone (naming itself and its field), and an ERROR event keeps its
Status whole."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.kubeapi.decode import NODE_FIELDS, WHOLE, DecodeError
from scheduler.runtime.cluster.nodeview import parse_node
from tests.builders.nodes import node_obj

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)


def _kubelet_node(name: str) -> dict[str, Any]:
    """A Node as a kubelet keeps it: most of its bytes are fields the scheduler never reads."""
    body = node_obj(name, taints=[{"key": "gpu", "value": "a100", "effect": "NoSchedule"}])
    body["apiVersion"], body["kind"] = "v1", "Node"
    body["metadata"] |= {"uid": f"uid-{name}", "resourceVersion": "7", "managedFields": [{}] * 3}
    body["spec"] |= {"podCIDR": "10.0.0.0/24", "unschedulable": True}
    body["status"] |= {
        "capacity": dict(body["status"]["allocatable"]),
        "conditions": [{"type": "Ready", "status": "True"}],
        "images": [{"names": [f"registry/image-{i}:v1"], "sizeBytes": i} for i in range(20)],
        "nodeInfo": {"kubeletVersion": "v1.30.0"},
    }
    return body


def _view(obj: dict[str, Any]) -> object:
    try:
        return parse_node(obj)
    except ValueError as exc:
        return str(exc)


def test_a_node_keeps_what_the_scheduler_reads_and_drops_the_rest() -> None:
    full = _kubelet_node("n1")
    body = NODE_FIELDS.list_body(
        json.dumps({"metadata": {"resourceVersion": "9"}, "items": [full]}).encode()
    )
    node = body["items"][0]
    assert body["metadata"] == {"resourceVersion": "9"}
    assert parse_node(node) == parse_node(full)
    assert parse_node(node).unschedulable
    assert parse_node(node).taints
    assert node["metadata"] == {
        "name": "n1",
        "labels": {"kubernetes.io/hostname": "n1"},
        "uid": "uid-n1",
        "resourceVersion": "7",
    }
    assert set(node["status"]) == {"allocatable"}
    assert (node["apiVersion"], node["kind"]) == ("v1", "Node")


@given(
    extra=st.dictionaries(st.sampled_from(["metadata", "spec", "status"]), _JSON, max_size=3),
    field=st.sampled_from(["labels", "taints", "unschedulable", "allocatable"]),
    value=_JSON,
)
def test_any_node_reads_the_same_decoded_whole_or_trimmed(extra, field, value) -> None:
    """Whatever a node carries (a malformed value included), the scheduler's view of it, or the
    error that names it, is the same from the trimmed decoding as from the whole one."""
    full = _kubelet_node("n1")
    place = {"labels": "metadata", "taints": "spec", "unschedulable": "spec"}.get(field, "status")
    full[place][field] = value
    for part, more in extra.items():
        if isinstance(more, dict):
            full[part] = more | full[part]
    data = json.dumps({"items": [full, _kubelet_node("n2")]}).encode()
    whole, trimmed = WHOLE.list_body(data)["items"], NODE_FIELDS.list_body(data)["items"]
    assert [_view(n) for n in trimmed] == [_view(n) for n in whole]
    assert _view(trimmed[1]) == parse_node(_kubelet_node("n2"))


def test_other_kinds_decode_whole() -> None:
    body = {"metadata": {"resourceVersion": "3", "continue": ""}, "items": [_kubelet_node("n1")]}
    assert WHOLE.list_body(json.dumps(body).encode()) == body
    assert WHOLE.list_body(b"") == {}


def test_watch_events_decode_by_kind_and_an_error_keeps_its_status() -> None:
    full = _kubelet_node("n1")
    line = json.dumps({"type": "MODIFIED", "object": full}).encode()
    etype, obj = NODE_FIELDS.event(line)
    assert etype == "MODIFIED"
    assert parse_node(obj) == parse_node(full)
    assert "images" not in obj["status"]
    assert WHOLE.event(line) == ("MODIFIED", full)
    gone = {"kind": "Status", "code": 410, "message": "too old resource version: 1 (5)"}
    assert NODE_FIELDS.event(json.dumps({"type": "ERROR", "object": gone}).encode()) == (
        "ERROR",
        gone,
    )
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}}
    assert NODE_FIELDS.event(json.dumps(bookmark).encode()) == ("BOOKMARK", bookmark["object"])


@pytest.mark.parametrize("data", [b"{", b"[1, 2]", b'{"items": {"a": 1}}', b"null"])
def test_a_malformed_answer_is_a_decode_error(data: bytes) -> None:
    with pytest.raises(DecodeError):
        NODE_FIELDS.list_body(data)
    if data != b'{"items": {"a": 1}}':  # a whole decoding has no shape to check
        with pytest.raises(DecodeError):
            WHOLE.list_body(data)


def _pod_json(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "creationTimestamp": "2026-12-02T00:00:00Z",
            "managedFields": [{"manager": "kubectl"}],
            "labels": {"app": name},
        },
        "spec": {"schedulerName": "gputopo-scheduler", "containers": [{"name": "c"}], **spec},
        "status": {"phase": "Pending"},
    }


def test_a_list_decoded_in_part_holds_each_pods_head_and_its_whole_on_demand() -> None:
    pods = [_pod_json("a", priority=5), _pod_json("b", nodeName="n1")]
    data = json.dumps({"metadata": {"resourceVersion": "42"}, "items": pods}).encode()
    items, metadata = WHOLE.listed_in_part(data)
    assert metadata == {"resourceVersion": "42"}
    assert [item.head for item in items] == [
        {
            "metadata": {
                "name": "a",
                "namespace": "ml",
                "creationTimestamp": "2026-12-02T00:00:00Z",
            },
            "spec": {"schedulerName": "gputopo-scheduler", "priority": 5},
            "status": {"phase": "Pending"},
        },
        {
            "metadata": {
                "name": "b",
                "namespace": "ml",
                "creationTimestamp": "2026-12-02T00:00:00Z",
            },
            "spec": {"schedulerName": "gputopo-scheduler", "nodeName": "n1"},
            "status": {"phase": "Pending"},
        },
    ]
    assert [item.whole() for item in items] == pods


@given(st.lists(st.dictionaries(st.sampled_from(["metadata", "spec", "status", "x"]), _JSON)))
def test_any_object_decoded_in_part_is_whole_on_demand_as_the_whole_list_has_it(objs) -> None:
    """Whatever an item holds (a `metadata` that is no object included), its whole is what the
    whole list decodes, and its head never fails the list."""
    data = json.dumps({"items": objs}).encode()
    items, _ = WHOLE.listed_in_part(data)
    assert [item.whole() for item in items] == WHOLE.list_body(data)["items"]
    for item, obj in zip(items, objs, strict=True):
        assert set(item.head) <= set(obj)


def test_an_empty_answer_decoded_in_part_is_empty() -> None:
    assert WHOLE.listed_in_part(b"") == ([], {})
    assert WHOLE.listed_in_part(b'{"items": null}') == ([], {})
