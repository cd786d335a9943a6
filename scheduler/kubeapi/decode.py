"""The JSON of list answers and watch events, decoded by `msgspec` (C; no model classes).

Every kind is decoded whole into plain dicts, as `json.loads` would, except Nodes: of a Node the
scheduler reads only its name, labels, taints, `unschedulable` and allocatable
(`scheduler.runtime.cluster.nodeview.parse_node`), plus what an Event about it names (`uid`,
`apiVersion`). The rest (its status's conditions, addresses, `nodeInfo` and images, its
`managedFields`: most of its bytes, and what a kubelet rewrites at every heartbeat) is skipped
while decoding, never built as Python objects. A start lists every node, so this was most of a
start's decoding (5,000 of the fake API server's nodes: 200 -> 20 ms CPU).

The fields kept are typed `Any`: a malformed value reaches `parse_node`, which names the node and
the field, as before, instead of failing the whole list here.
"""

from __future__ import annotations

from typing import Any, TypedDict

import msgspec

__all__ = ["NODE_FIELDS", "WHOLE", "DecodeError", "Decoder", "NodeFields"]

DecodeError = msgspec.DecodeError  # malformed JSON; a ValueError


class _NodeMeta(TypedDict, total=False):
    name: Any
    namespace: Any
    uid: Any
    labels: Any
    resourceVersion: Any


class _NodeSpec(TypedDict, total=False):
    taints: Any
    unschedulable: Any


class _NodeStatus(TypedDict, total=False):
    allocatable: Any


class NodeFields(TypedDict, total=False):
    """What the scheduler reads of a Node."""

    apiVersion: Any
    kind: Any
    metadata: _NodeMeta
    spec: _NodeSpec
    status: _NodeStatus


class _NodeList(TypedDict, total=False):
    metadata: dict[str, Any]  # its resourceVersion (the scheduler lists whole: no `continue`)
    items: list[NodeFields] | None


class _Event(TypedDict, total=False):
    type: Any
    object: msgspec.Raw  # decoded by kind (an ERROR event's object is a Status)


class Decoder:
    """Decodes one kind's list answers and watch events into dicts (`obj_type`: the fields kept
    of each object; None: every field)."""

    def __init__(self, obj_type: type | None = None, list_type: type | None = None) -> None:
        whole: Any = msgspec.json.Decoder()
        self._whole = whole
        self._object: Any = msgspec.json.Decoder(obj_type) if obj_type else whole
        self._list: Any = msgspec.json.Decoder(list_type) if list_type else whole
        self._event = msgspec.json.Decoder(_Event)

    def list_body(self, data: bytes) -> dict[str, Any]:
        """A list answer: `{"metadata": ..., "items": [...]}` (an empty body: {})."""
        body = self._list.decode(data) if data else {}
        if not isinstance(body, dict):
            raise DecodeError(f"a list answer must be a JSON object, got {type(body).__name__}")
        return body

    def event(self, line: bytes) -> tuple[str, dict[str, Any]]:
        """One watch event: its type and object (an ERROR's object whole: it is a Status)."""
        event = self._event.decode(line)
        etype, raw = str(event.get("type")), event.get("object")
        obj = {} if raw is None else (self._whole if etype == "ERROR" else self._object).decode(raw)
        return etype, obj if isinstance(obj, dict) else {}


WHOLE = Decoder()  # every field of every object
NODE_FIELDS = Decoder(NodeFields, _NodeList)  # a Node's `NodeFields`
