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

A list can also be decoded in part (`Decoder.listed_in_part`): each object's `PodHead` (what tells
whether a pod waits, and its place in the queue) and its raw bytes, decoded whole only when asked
(`Listed.whole`). The scheduler's first list of pods after a start holds thousands of waiting
pods, and decoding all of them whole was a third of a second before the first bind (10,000 pods,
21 MB on a real API server); they are read in steps after the sync (`scheduler.runtime.intake`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

import msgspec

__all__ = ["NODE_FIELDS", "WHOLE", "DecodeError", "Decoder", "Listed", "NodeFields", "PodHead"]

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


class _PodHeadMeta(TypedDict, total=False):
    name: Any
    namespace: Any
    creationTimestamp: Any
    deletionTimestamp: Any


class _PodHeadSpec(TypedDict, total=False):
    schedulerName: Any
    nodeName: Any
    priority: Any


class _PodHeadStatus(TypedDict, total=False):
    phase: Any
    nominatedNodeName: Any


class PodHead(TypedDict, total=False):
    """What says whether a pod waits for a scheduler and where it stands in its queue."""

    metadata: _PodHeadMeta
    spec: _PodHeadSpec
    status: _PodHeadStatus


class _RawList(TypedDict, total=False):
    metadata: dict[str, Any]
    items: list[msgspec.Raw] | None


@dataclass(frozen=True, slots=True)
class Listed:
    """One object of a list decoded in part: `head` now, the whole object when asked."""

    head: dict[str, Any]
    raw: msgspec.Raw
    decoder: Decoder

    def whole(self) -> dict[str, Any]:
        """The object as `Decoder.list_body` would have decoded it."""
        obj = self.decoder.whole_object(self.raw)
        return obj if isinstance(obj, dict) else {}


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
        self._raw_list = msgspec.json.Decoder(_RawList)
        self._head = msgspec.json.Decoder(PodHead)

    def list_body(self, data: bytes) -> dict[str, Any]:
        """A list answer: `{"metadata": ..., "items": [...]}` (an empty body: {})."""
        body = self._list.decode(data) if data else {}
        if not isinstance(body, dict):
            raise DecodeError(f"a list answer must be a JSON object, got {type(body).__name__}")
        return body

    def listed_in_part(self, data: bytes) -> tuple[list[Listed], dict[str, Any]]:
        """A list answer's objects decoded in part (`Listed`) and its `metadata`."""
        body = self._raw_list.decode(data) if data else {}
        if not isinstance(body, dict):
            raise DecodeError(f"a list answer must be a JSON object, got {type(body).__name__}")
        items = [Listed(self._head_of(raw), raw, self) for raw in body.get("items") or ()]
        return items, dict(body.get("metadata") or {})

    def _head_of(self, raw: msgspec.Raw) -> dict[str, Any]:
        """The object's `PodHead`; a malformed one (say, a `metadata` that is no object) whole,
        so that reading it names what is wrong, as a whole list's would."""
        try:
            return dict(self._head.decode(raw))
        except msgspec.ValidationError:
            obj = self._whole.decode(raw)
            return obj if isinstance(obj, dict) else {}

    def whole_object(self, raw: msgspec.Raw) -> object:
        return self._object.decode(raw)

    def event(self, line: bytes) -> tuple[str, dict[str, Any]]:
        """One watch event: its type and object (an ERROR's object whole: it is a Status)."""
        event = self._event.decode(line)
        etype, raw = str(event.get("type")), event.get("object")
        obj = {} if raw is None else (self._whole if etype == "ERROR" else self._object).decode(raw)
        return etype, obj if isinstance(obj, dict) else {}


WHOLE = Decoder()  # every field of every object
NODE_FIELDS = Decoder(NodeFields, _NodeList)  # a Node's `NodeFields`
