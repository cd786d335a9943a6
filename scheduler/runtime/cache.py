"""The scheduler's incremental view of the cluster: pods, nodes, NRTs, PodGroups, a live snapshot.

Every non-terminal pod bound or assumed on a node is counted there, whichever scheduler placed it
(a foreign pod bound by hand or by kube-scheduler takes room like ours). The placement `Snapshot`
is kept up to date incrementally: a node is rebuilt (`nodeview.build_node_state`) when its Node,
its NRT or the set of pods on it changes; this scheduler's own assumptions are charged directly.

Not thread-safe by itself: callers hold `cache.lock` (an RLock) around reads and writes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from agent.errors import TopologyDecodeError
from agent.nrt import DecodedTopology, decode
from scheduler.placement import Assignment, PodRequest, Snapshot, TopologyConstraint
from scheduler.runtime.nodeview import (
    NodeInfo,
    PodOnNode,
    SelectorCache,
    build_node_state,
    parse_node,
)
from scheduler.runtime.podspec import pod_request, resource_list

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]
GroupKey = tuple[str, str]
TOPOLOGY_REQUIRED = "gputopo.io/topology-required"
TOPOLOGY_PREFERRED = "gputopo.io/topology-preferred"
DEFAULT_GANG_TIMEOUT = 60.0
_TERMINAL = ("Succeeded", "Failed")


def parse_time(text: object) -> float:
    """An RFC 3339 timestamp as epoch seconds (0.0 when absent or unreadable)."""
    if not isinstance(text, str) or not text:
        return 0.0
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


@dataclass(slots=True)
class PodInfo:
    """One pod as the scheduler tracks it. `node` is the bound node, or the assumed one."""

    key: str
    uid: str
    namespace: str
    name: str
    obj: Obj
    request: PodRequest
    error: str | None
    node: str | None
    assumed: bool
    assignment: Assignment | None
    ours: bool
    gated: bool
    terminal: bool
    group: str | None
    created: float

    @property
    def pending(self) -> bool:
        """Ours, not bound or assumed, not finished: waiting for this scheduler."""
        return self.ours and self.node is None and not self.terminal

    @property
    def counted(self) -> bool:
        """Takes room on `node`."""
        return self.node is not None and not self.terminal

    @property
    def group_key(self) -> GroupKey | None:
        return None if self.group is None else (self.namespace, self.group)


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupInfo:
    """A PodGroup (`scheduling.x-k8s.io/v1alpha1`); `error` says why it is unusable."""

    namespace: str
    name: str
    uid: str
    obj: Obj
    min_member: int = 1
    min_resources: Mapping[str, int] | None = None
    timeout: float = DEFAULT_GANG_TIMEOUT
    topology: TopologyConstraint | None = None
    error: str | None = None


def parse_group(
    obj: Obj, *, default_timeout: float = DEFAULT_GANG_TIMEOUT, levels: Iterable[str] | None = None
) -> GroupInfo:
    """Read a PodGroup; a malformed one comes back with `error` set (never raises).

    `levels`: the configured topology levels a topology annotation may name (None: any label).
    """
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    base = GroupInfo(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        obj=obj,
    )
    try:
        min_member = spec.get("minMember", 1)
        timeout = spec.get("scheduleTimeoutSeconds", default_timeout)
        if not isinstance(min_member, int) or isinstance(min_member, bool) or min_member < 0:
            raise ValueError(f"spec.minMember: must be a non-negative integer, got {min_member!r}")
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
            raise ValueError(
                f"spec.scheduleTimeoutSeconds: must be a positive number, got {timeout!r}"
            )
        resources = resource_list(spec.get("minResources"), "spec.minResources") or None
        return replace(
            base,
            min_member=max(min_member, 1),
            min_resources=resources,
            timeout=float(timeout),
            topology=_topology(meta.get("annotations") or {}, levels),
        )
    except (ValueError, TypeError, AttributeError) as exc:
        return replace(base, error=f"invalid PodGroup {base.namespace}/{base.name}: {exc}")


def _topology(
    annotations: Mapping[str, Any], levels: Iterable[str] | None
) -> TopologyConstraint | None:
    for key, required in ((TOPOLOGY_REQUIRED, True), (TOPOLOGY_PREFERRED, False)):
        if key in annotations:
            label = str(annotations[key] or "").strip()
            if not label:
                raise ValueError(f"metadata.annotations[{key}]: must name a node label")
            if levels is not None and label not in set(levels):
                known = ", ".join(levels) or "none"
                raise ValueError(
                    f"metadata.annotations[{key}]: {label} is not a configured topology level "
                    f"(topologyLevels: {known})"
                )
            return TopologyConstraint(label=label, required=required)
    return None


ParsedPod = tuple[PodRequest, str | None]


def parse_pod(obj: Obj) -> ParsedPod:
    """The pod's request, or an empty one and the problem (pure: callable without the lock)."""
    try:
        return pod_request(obj), None
    except ValueError as exc:
        return PodRequest(key=_pod_key(obj)), str(exc)


def _pod_key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


class ClusterCache:
    def __init__(
        self,
        scheduler_name: str,
        *,
        gang_timeout: float = DEFAULT_GANG_TIMEOUT,
        topology_levels: Iterable[str] | None = None,
    ) -> None:
        self.scheduler_name = scheduler_name
        self._gang_timeout = gang_timeout
        self._levels = None if topology_levels is None else tuple(topology_levels)
        self.lock = threading.RLock()
        self.snapshot = Snapshot()
        self.pods: dict[str, PodInfo] = {}
        self.nodes: dict[str, NodeInfo] = {}
        self.nrts: dict[str, DecodedTopology] = {}
        self.groups: dict[GroupKey, GroupInfo] = {}
        self._node_pods: dict[str, set[str]] = {}
        self._group_pods: dict[GroupKey, set[str]] = {}
        self._selectors = SelectorCache()

    # -- pods ------------------------------------------------------------------------------
    def _pod_info(self, obj: Obj, old: PodInfo | None, parsed: ParsedPod | None) -> PodInfo:
        meta, spec, status = (
            obj.get("metadata") or {},
            obj.get("spec") or {},
            obj.get("status") or {},
        )
        key = _pod_key(obj)
        request, error = parsed if parsed is not None else parse_pod(obj)
        node = spec.get("nodeName") or None
        assumed = node is None and old is not None and old.assumed
        return PodInfo(
            key=key,
            uid=str(meta.get("uid") or ""),
            namespace=str(meta.get("namespace") or "default"),
            name=str(meta.get("name") or ""),
            obj=obj,
            request=request,
            error=error,
            node=str(node) if node else (old.node if assumed and old else None),
            assumed=assumed,
            assignment=old.assignment
            if old is not None and (assumed or old.node == node)
            else None,
            ours=spec.get("schedulerName") == self.scheduler_name,
            gated=bool(spec.get("schedulingGates")),
            terminal=status.get("phase") in _TERMINAL,
            group=request.pod_group,
            created=parse_time(meta.get("creationTimestamp")),
        )

    def upsert_pod(
        self, obj: Obj, parsed: ParsedPod | None = None
    ) -> tuple[PodInfo | None, PodInfo]:
        """Record an added or updated pod; returns (before, after). `parsed`: `parse_pod(obj)`,
        when the caller computed it before taking the lock."""
        key = _pod_key(obj)
        old = self.pods.get(key)
        if old is not None and old.uid != str((obj.get("metadata") or {}).get("uid") or ""):
            self.delete_pod(key)  # same name, new pod
            old = None
        new = self._pod_info(obj, old, parsed)
        self.pods[key] = new
        self._index_group(old, new)
        if not self._confirms(old, new):
            self._move(key, old, new)
        return old, new

    def _confirms(self, old: PodInfo | None, new: PodInfo) -> bool:
        """Our binding seen bound as assumed: the snapshot already counts it (unless an NRT
        may now be trusted, which needs a rebuild)."""
        return (
            old is not None
            and old.assumed
            and not new.assumed
            and new.node == old.node
            and new.request == old.request
            and new.node not in self.nrts
        )

    def delete_pod(self, key: str) -> PodInfo | None:
        old = self.pods.pop(key, None)
        if old is not None:
            self._index_group(old, None)
            self._move(key, old, None)
        return old

    def _index_group(self, old: PodInfo | None, new: PodInfo | None) -> None:
        if old is not None and old.group_key is not None:
            self._group_pods.get(old.group_key, set()).discard(old.key)
        if new is not None and new.group_key is not None:
            self._group_pods.setdefault(new.group_key, set()).add(new.key)

    def _move(self, key: str, old: PodInfo | None, new: PodInfo | None) -> None:
        before = old.node if old is not None and old.counted else None
        after = new.node if new is not None and new.counted else None
        if before is not None:
            self._node_pods.get(before, set()).discard(key)
        if after is not None:
            self._node_pods.setdefault(after, set()).add(key)
        for node in {before, after} - {None}:
            self._rebuild(str(node))

    def assume(self, key: str, assignment: Assignment) -> None:
        """Charge a pending pod of ours to `assignment.node` before binding it."""
        info = self.pods[key]
        info.node, info.assumed, info.assignment = assignment.node, True, assignment
        self._node_pods.setdefault(assignment.node, set()).add(key)
        self.snapshot.assume(info.request, assignment)

    def forget(self, key: str) -> bool:
        """Undo `assume` when the binding failed; False when the pod is bound or gone by now."""
        info = self.pods.get(key)
        if info is None or not info.assumed or info.node is None:
            return False
        self._node_pods.get(info.node, set()).discard(key)
        self.snapshot.forget(key)
        info.node, info.assumed, info.assignment = None, False, None
        return True

    # -- nodes and NRTs --------------------------------------------------------------------
    def upsert_node(self, obj: Obj) -> tuple[bool, str | None]:
        """Record a Node: (whether what placement sees changed, the problem when malformed).

        A malformed node is left out of the snapshot; a status heartbeat changes nothing.
        """
        name = str((obj.get("metadata") or {}).get("name") or "")
        old = self.nodes.get(name)
        try:
            info = parse_node(obj)
        except ValueError as exc:
            self.nodes.pop(name, None)
            self._rebuild(name)
            return old is not None, str(exc)
        if info == old:
            return False, None
        self.nodes[name] = info
        self._rebuild(name)
        return True, None

    def delete_node(self, name: str) -> None:
        self.nodes.pop(name, None)
        self._rebuild(name)

    def upsert_nrt(self, obj: Obj) -> str | None:
        """Record a NodeResourceTopology; returns the problem when it cannot be decoded."""
        name = str((obj.get("metadata") or {}).get("name") or "")
        try:
            self.nrts[name] = decode(obj)
        except (TopologyDecodeError, ValueError, KeyError, TypeError) as exc:
            self.nrts.pop(name, None)
            self._rebuild(name)
            return str(exc)
        self._rebuild(name)
        return None

    def delete_nrt(self, name: str) -> None:
        self.nrts.pop(name, None)
        self._rebuild(name)

    def _rebuild(self, name: str) -> None:
        info = self.nodes.get(name)
        if info is None:
            self.snapshot.remove_node(name)
            return
        pods = [self.pods[k] for k in sorted(self._node_pods.get(name, ()))]
        on_node = [PodOnNode(p.request, p.namespace, p.name, p.assignment) for p in pods]
        self.snapshot.add_node(
            build_node_state(info, self.nrts.get(name), on_node, self._selectors)
        )

    # -- pod groups ------------------------------------------------------------------------
    def upsert_group(self, obj: Obj) -> GroupInfo:
        group = parse_group(obj, default_timeout=self._gang_timeout, levels=self._levels)
        self.groups[(group.namespace, group.name)] = group
        return group

    def delete_group(self, key: GroupKey) -> GroupInfo | None:
        return self.groups.pop(key, None)

    def members(self, key: GroupKey) -> list[PodInfo]:
        """The group's pods (any state), oldest first."""
        found = [self.pods[k] for k in self._group_pods.get(key, ()) if k in self.pods]
        return sorted(found, key=lambda p: (p.created, p.key))

    # -- bulk ------------------------------------------------------------------------------
    def keys_of(self, kind: str) -> Iterable[str]:
        """Current keys of `kind` (pods: ns/name, nodes and NRTs: name, podgroups: ns/name)."""
        if kind == "pods":
            return list(self.pods)
        if kind == "nodes":
            return list(self.nodes)
        if kind == "noderesourcetopologies":
            return list(self.nrts)
        return [f"{ns}/{name}" for ns, name in self.groups]

    def node_pod_keys(self, name: str) -> set[str]:
        return set(self._node_pods.get(name, ()))
