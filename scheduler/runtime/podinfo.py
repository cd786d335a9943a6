"""One pod as the scheduler runtime tracks it (`PodInfo`), read once when it arrives from the API.

`read_pod` turns the pod's JSON into its key, its placement request (or the problem that stops
one being made) and the flags the loop tests; it is pure, so intake calls it before taking the
cache lock. The cache then adds what only it knows: whether this scheduler assumed the pod on a
node before the API reported the binding, and the devices it assigned there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agent.objkey import DEFAULT_NAMESPACE, ObjectKey, object_key
from scheduler.placement import Assignment, PodRequest
from scheduler.runtime.podspec import pod_request

__all__ = ["PodInfo", "parse_time", "read_pod"]

Obj = Mapping[str, Any]
_TERMINAL = ("Succeeded", "Failed")


def parse_time(text: object) -> float:
    """An RFC 3339 timestamp as epoch seconds (0.0 when absent or unreadable)."""
    if not isinstance(text, str) or not text:
        return 0.0
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


@dataclass(slots=True, kw_only=True)
class PodInfo:
    """One pod. `node` is the bound node, or the one this scheduler assumed it on (`assumed`);
    `assignment` the devices this scheduler chose there. `group_key`: the PodGroup it joins."""

    key: ObjectKey
    uid: str
    namespace: str
    name: str
    obj: Obj
    request: PodRequest
    error: str | None
    node: str | None
    assumed: bool = False
    assignment: Assignment | None = None
    ours: bool
    gated: bool
    terminal: bool
    group: str | None
    group_key: ObjectKey | None
    created: float

    @property
    def pending(self) -> bool:
        """Ours, not bound or assumed, not finished: waiting for this scheduler."""
        return self.ours and self.node is None and not self.terminal

    @property
    def counted(self) -> bool:
        """Takes room on `node`."""
        return self.node is not None and not self.terminal


def read_pod(obj: Obj, scheduler_name: str) -> PodInfo:
    """The pod as the API object says (bound or not; nothing assumed). Never raises: a malformed
    pod gets an empty request and `error` says what is wrong."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    namespace = str(meta.get("namespace") or DEFAULT_NAMESPACE)
    name = str(meta.get("name") or "")
    key = object_key(namespace, name)
    try:
        request, error = pod_request(obj, key), None
    except ValueError as exc:
        request, error = PodRequest(key=key), str(exc)
    node = spec.get("nodeName")
    group = request.pod_group
    return PodInfo(
        key=key,
        uid=str(meta.get("uid") or ""),
        namespace=namespace,
        name=name,
        obj=obj,
        request=request,
        error=error,
        node=str(node) if node else None,
        ours=spec.get("schedulerName") == scheduler_name,
        gated=bool(spec.get("schedulingGates")),
        terminal=status.get("phase") in _TERMINAL,
        group=group,
        group_key=None if group is None else object_key(namespace, group),
        created=parse_time(meta.get("creationTimestamp")),
    )
