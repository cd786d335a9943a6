"""The scheduler's incremental view of the cluster: pods, nodes, NRTs, PodGroups, a live snapshot.

Every non-terminal pod bound or assumed on a node is counted there, whichever scheduler placed it
(a foreign pod bound by hand or by kube-scheduler takes room like ours). The placement `Snapshot`
is kept up to date incrementally: a node is rebuilt (`nodeview.build_node_state`) when its Node,
its NRT or the set of pods on it changes; this scheduler's own assumptions are charged directly.

Pods and PodGroups are keyed by their `ObjectKey` (`namespace/name`), made once when the object
is read (`podinfo.read_pod`, `parse_group`). Not thread-safe by itself: callers hold `cache.lock`
(an RLock) around reads and writes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from agent.errors import TopologyDecodeError
from agent.nrt import DecodedTopology, decode
from agent.objkey import ObjectKey, key_of, object_key
from scheduler.config import DEFAULT_GANG_TIMEOUT_SECONDS
from scheduler.placement import CLIQUE_LABEL, Assignment, GpuShare, Snapshot
from scheduler.placement.load import LoadAware
from scheduler.runtime.cluster.budgets import BudgetBook
from scheduler.runtime.cluster.composite import (
    COMPOSITE_MARK,
    MAX_DEPTH,
    CompositeInfo,
    build_tree,
    composite_key,
    parse_composite,
    root_of,
)
from scheduler.runtime.cluster.groups import (
    TOPOLOGY_PREFERRED,
    TOPOLOGY_REQUIRED,
    GroupInfo,
    parse_group,
    workload_gang,
)
from scheduler.runtime.cluster.loadview import LoadClock
from scheduler.runtime.cluster.nodeview import (
    AllocatableMemo,
    NodeInfo,
    NodeShapes,
    SelectorCache,
    build_node_state,
    parse_node,
)
from scheduler.runtime.cluster.podinfo import PodInfo, RequestMemo, read_pod
from scheduler.runtime.cluster.queuebook import QueueBook
from scheduler.runtime.cluster.running import RunningUnits
from scheduler.runtime.cluster.upstream import parse_upstream_group, parse_workload_group

__all__ = ["TOPOLOGY_PREFERRED", "TOPOLOGY_REQUIRED", "ClusterCache", "GroupInfo", "parse_group"]

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]
UPSTREAM_PODGROUPS = "podgroups.scheduling.k8s.io"
"""The intake's kind name of upstream PodGroups (`scheduler.kubeapi.workloads.KIND_NAME`)."""
WORKLOADS = "workloads.scheduling.k8s.io"
"""The intake's kind name of 1.35 Workloads (`workloads.WORKLOADS_KIND_NAME`)."""
COMPOSITES = "compositepodgroups.scheduling.k8s.io"
"""The intake's kind name of CompositePodGroups (`workloads.COMPOSITES_KIND_NAME`)."""


def _namespace_labels(obj: Obj) -> tuple[str, dict[str, str]]:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    return str(meta.get("name") or ""), {str(k): str(v) for k, v in labels.items()}


class ClusterCache:
    def __init__(
        self,
        scheduler_name: str,
        *,
        gang_timeout: float = DEFAULT_GANG_TIMEOUT_SECONDS,
        topology_levels: Iterable[str] | None = None,
        load: LoadClock | None = None,
    ) -> None:
        self.scheduler_name = scheduler_name
        self.load = load or LoadClock(LoadAware())  # measured use, issue 47
        self._gang_timeout = gang_timeout
        self._levels = None if topology_levels is None else tuple(topology_levels)
        # GPU gangs prefer one NVLink clique while the clique label is a topology level (§13).
        self.prefers_cliques = self._levels is None or CLIQUE_LABEL in self._levels
        self.lock = threading.RLock()
        self.snapshot = Snapshot()
        self.pods: dict[ObjectKey, PodInfo] = {}
        self.nodes: dict[str, NodeInfo] = {}
        self.nrts: dict[str, DecodedTopology] = {}
        self.groups: dict[ObjectKey, GroupInfo] = {}
        self.workloads: dict[ObjectKey, Obj] = {}  # 1.35 Workloads: their pod groups are gangs
        self.composites: dict[ObjectKey, CompositeInfo] = {}  # 1.37 CompositePodGroups
        self._children: dict[ObjectKey, set[ObjectKey]] = {}  # a composite's: groups, composites
        self._node_pods: dict[str, set[ObjectKey]] = {}
        self._group_pods: dict[ObjectKey, set[ObjectKey]] = {}
        self._selectors = SelectorCache()
        self._allocatable = AllocatableMemo()  # nodes of one shape share a reading
        self._shapes = NodeShapes()  # ... and, without an NRT, one starting state
        self.queues = QueueBook()
        self.running = RunningUnits(self.snapshot)
        self.budgets = BudgetBook()
        self.requests = RequestMemo()  # pods of one template share a read request
        self.offering: dict[str, set[str]] = {}  # resource -> nodes whose allocatable has it

    # -- namespaces ------------------------------------------------------------------------
    def replace_namespaces(self, items: Iterable[Obj]) -> bool:
        """Every namespace's labels, from a list; whether any namespace's labels changed (an
        inter-pod term's `namespaceSelector` reads them: `Snapshot.namespace_labels`)."""
        listed = {name: labels for name, labels in map(_namespace_labels, items) if name}
        changed = listed != self.snapshot.namespace_labels
        self.snapshot.namespace_labels.clear()
        self.snapshot.namespace_labels.update(listed)
        return changed

    def namespace_event(self, etype: str, obj: Obj) -> bool:
        """A namespace added, changed or deleted; whether its labels changed."""
        name, labels = _namespace_labels(obj)
        table = self.snapshot.namespace_labels
        before = table.get(name)
        if etype == "DELETED":
            table.pop(name, None)
            return bool(before)
        table[name] = labels
        return (before or {}) != labels

    # -- pods ------------------------------------------------------------------------------
    def read_pod(self, obj: Obj) -> PodInfo:
        """`obj` as this scheduler reads it (pure: callable without the lock)."""
        return read_pod(obj, self.scheduler_name, memo=self.requests)

    def upsert_pod(self, obj: Obj, read: PodInfo | None = None) -> tuple[PodInfo | None, PodInfo]:
        """Record an added or updated pod; returns (before, after). `read`: `self.read_pod(obj)`,
        when the caller made it before taking the lock (it becomes the cache's entry)."""
        new = read if read is not None else self.read_pod(obj)
        old = self.pods.get(new.key)
        if old is not None and old.uid != new.uid:
            self.delete_pod(new.key)  # same name, new pod
            old = None
        _keep_assumption(old, new)
        self.pods[new.key] = new
        self._index_group(old, new)
        if not self._confirms(old, new):
            self._move(new.key, old, new)
        self._charge(new.key)
        return old, new

    def _confirms(self, old: PodInfo | None, new: PodInfo) -> bool:
        """Our binding seen bound as assumed, or an update while it stays assumed there (its
        status written during the bind): the snapshot already counts it (unless an NRT may now
        be trusted, which needs a rebuild)."""
        if old is None or not old.assumed or new.node != old.node:
            return False
        if new.assumed:  # `_keep_assumption` kept the request it was assumed with
            return new.request is old.request
        return new.request == old.request and new.node not in self.nrts

    def delete_pod(self, key: ObjectKey) -> PodInfo | None:
        old = self.pods.pop(key, None)
        if old is not None:
            self._index_group(old, None)
            self._move(key, old, None)
            self._charge(key, gone=old)
        return old

    def _index_group(self, old: PodInfo | None, new: PodInfo | None) -> None:
        if old is not None and old.group_key is not None:
            self._group_pods.get(old.group_key, set()).discard(old.key)
        if new is not None and new.group_key is not None:
            self._group_pods.setdefault(new.group_key, set()).add(new.key)
            if new.group_key not in self.groups:
                self._derive_workload_group(new.group_key)

    def _derive_workload_group(self, gkey: ObjectKey) -> GroupInfo | None:
        """The gang of a 1.35 Workload's pod group, read from the Workload when it is known."""
        gang = workload_gang(gkey)
        workload = None if gang is None else self.workloads.get(gang.workload_key)
        if gang is None or workload is None:
            return None
        group = parse_workload_group(workload, gang)
        self._set_group(group)
        return group

    def _move(self, key: ObjectKey, old: PodInfo | None, new: PodInfo | None) -> None:
        before = old.node if old is not None and old.counted else None
        after = new.node if new is not None and new.counted else None
        if before is not None:
            self._node_pods.get(before, set()).discard(key)
        if after is not None:
            self._node_pods.setdefault(after, set()).add(key)
        for node in {before, after} - {None}:
            self._rebuild(str(node))

    def assume(self, key: ObjectKey, assignment: Assignment) -> None:
        """Charge a pending pod of ours to `assignment.node` before binding it."""
        info = self.pods[key]
        info.node, info.assumed, info.assignment = assignment.node, True, assignment
        self._node_pods.setdefault(assignment.node, set()).add(key)
        self.snapshot.assume(info.request, assignment)
        self._charge(key)

    def forget(self, key: ObjectKey) -> bool:
        """Undo `assume` when the binding failed; False when the pod is bound or gone by now."""
        info = self.pods.get(key)
        if info is None or not info.assumed or info.node is None:
            return False
        self._node_pods.get(info.node, set()).discard(key)
        self.snapshot.forget(key)
        info.node, info.assumed, info.assignment = None, False, None
        self._charge(key)
        return True

    # -- nodes and NRTs --------------------------------------------------------------------
    def upsert_node(self, obj: Obj) -> tuple[bool, str | None]:
        """Record a Node: (whether what placement sees changed, the problem when malformed).

        A malformed node is left out of the snapshot; a status heartbeat changes nothing.
        """
        name = str((obj.get("metadata") or {}).get("name") or "")
        old = self.nodes.get(name)
        try:
            info = parse_node(obj, self._allocatable)
        except ValueError as exc:
            self._offer(old, None)
            self.nodes.pop(name, None)
            self.queues.set_node(name, None)
            self._rebuild(name)
            return old is not None, str(exc)
        if info == old:
            return False, None
        self._offer(old, info)
        self.nodes[name] = info
        remodelled = self.queues.set_node(name, info.allocatable, info.labels)
        self._rebuild(name)
        for key in sorted(self._node_pods.get(name, ())) if remodelled else ():
            self._charge(key)  # its GPUs count under the node's model key now
        return True, None

    def delete_node(self, name: str) -> None:
        self._offer(self.nodes.get(name), None)
        self.nodes.pop(name, None)
        self.queues.set_node(name, None)
        self._rebuild(name)

    def _offer(self, old: NodeInfo | None, new: NodeInfo | None) -> None:
        """`offering` with node `old` replaced by `new` (an extended resource backed by DRA is
        asked of DRA on the nodes that do not offer it: `scheduler.runtime.claims`)."""
        if old is not None and old.allocatable is not (None if new is None else new.allocatable):
            for name, amount in old.allocatable.items():
                held = self.offering.get(name)
                if amount > 0 and held is not None:
                    held.discard(old.name)
                    if not held:
                        del self.offering[name]
        if new is not None and (old is None or old.allocatable is not new.allocatable):
            for name, amount in new.allocatable.items():
                if amount > 0:
                    self.offering.setdefault(name, set()).add(new.name)

    def offering_any(self, names: Iterable[str]) -> frozenset[str]:
        """The nodes whose allocatable offers any of `names`."""
        found: set[str] = set()
        for name in names:
            found |= self.offering.get(name, set())
        return frozenset(found)

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

    def expire_load(self) -> None:
        """Rebuild the nodes whose measured use went stale (judged by requests alone again)."""
        for name in self.load.stale():
            self._rebuild(name)

    def _rebuild(self, name: str) -> None:
        info = self.nodes.get(name)
        if info is None:
            self.snapshot.remove_node(name)
            self.queues.set_shared(name, None)
            return
        keys = sorted(self._node_pods.get(name, ()))
        pods = [self.pods[k] for k in keys]
        new = name not in self.snapshot
        nrt, view = self.nrts.get(name), self.load.view()
        state = build_node_state(info, nrt, pods, self._selectors, self._shapes, view)
        self.load.note(name, nrt, view)
        self.snapshot.add_node(state)
        self.queues.set_shared(name, state)
        if new:  # pods seen before their node: their running units read their places now
            self.running.moved(keys)
            for key in keys:
                self._track(key, self.pods[key], None)

    # -- queues ----------------------------------------------------------------------------
    def _charge(self, key: ObjectKey, gone: PodInfo | None = None) -> None:
        """Charge the pod to its queue and keep its running unit current (`gone`: the pod as
        it was, when it was just deleted)."""
        info = self.pods.get(key)
        self.queues.charge(key, info, self.group_obj(info), self._placed_shares(key, info))
        self._track(key, info, gone)
        seen = info or gone
        if seen is not None:
            self.budgets.on_pod(key, info, seen.namespace)

    def _placed_shares(self, key: ObjectKey, info: PodInfo | None) -> tuple[GpuShare, ...]:
        """Where the pod's GPU shares are on its node (the node view placed them)."""
        if info is None or info.node is None or info.node not in self.snapshot:
            return ()
        placed = self.snapshot.node(info.node).pods.get(key)
        return () if placed is None else placed[1].shares

    def _track(self, key: ObjectKey, info: PodInfo | None, gone: PodInfo | None) -> None:
        seen = info or gone
        gkey = None if seen is None else seen.group_key
        if gkey is None:
            self.running.track_pod(key, info, self._leaf)
            return
        group = self.groups.get(gkey)
        usable = group if group is not None and not group.error else None
        together = None if usable is None else self.evicted_with(usable)
        if together is not None:  # one victim with its whole subtree
            self.running.drop_gang(gkey)
            self.running.track_gang(
                together.key,
                self.members(together.key),
                1,
                self._leaf,
                key if info is None else None,
                priority=together.priority,
                whole=True,
            )
            return
        self.running.track_gang(
            gkey,
            self.members(gkey),
            1 if usable is None else usable.min_member,
            self._leaf,
            key if info is None else None,
            priority=None if usable is None else usable.priority,
            whole=usable is not None and usable.whole,
        )

    def _leaf(self, info: PodInfo) -> str:
        return self.leaf_of(info)[0]

    def doom(self, keys: list[ObjectKey]) -> None:
        """`keys` were chosen as victims: no longer in any running unit."""
        self.running.doom(keys)
        for key in keys:
            self._track(key, self.pods.get(key), None)

    def spare(self, keys: list[ObjectKey]) -> None:
        """The eviction of `keys` failed: they may be chosen again."""
        self.running.spare(keys)
        for key in keys:
            self._track(key, self.pods.get(key), None)

    def group_obj(self, info: PodInfo | None) -> Obj | None:
        """The PodGroup object of `info`'s gang (None: no gang, or not seen yet)."""
        if info is None or info.group_key is None:
            return None
        group = self.groups.get(info.group_key)
        return None if group is None else group.obj

    def apply_queue(
        self, kind: str, etype: str, obj: Obj | None, items: list[Any] | None = None
    ) -> bool:
        """A Queue or ElasticQuota event (`obj`), or a full list (`items`); True when the tree
        changed (every pod is charged again)."""
        if items is not None:
            changed = self.queues.replace(kind, items)
        else:
            changed = obj is not None and self.queues.apply(kind, etype, obj)
        if changed:
            self.recharge_all()
        return changed

    def recharge_all(self) -> None:
        self.queues.restart_usage()
        self.running.invalidate()
        for key in self.pods:
            self._charge(key)

    def leaf_of(self, info: PodInfo) -> tuple[str, str | None]:
        """`info`'s leaf queue and why it must wait whatever it asks (None: may be tried)."""
        return self.queues.resolve(info, self.group_obj(info))

    # -- pod groups ------------------------------------------------------------------------
    def read_group(self, obj: Obj, *, upstream: bool = False) -> GroupInfo:
        """`obj` as a gang: our PodGroup, or with `upstream` a scheduling.k8s.io one."""
        if upstream:
            return parse_upstream_group(obj, levels=self._levels)
        return parse_group(obj, default_timeout=self._gang_timeout, levels=self._levels)

    def upsert_group(self, obj: Obj, *, upstream: bool = False) -> GroupInfo:
        group = self.read_group(obj, upstream=upstream)
        self._set_group(group)
        return group

    def _set_group(self, group: GroupInfo) -> None:
        old = self.groups.get(group.key)
        self.groups[group.key] = group
        self._link(group.key, group.namespace, old.parent if old else None, group.parent)
        moved = old is None or _labels(old.obj) != _labels(group.obj)  # its queue may have moved
        if moved or _charged(old) != _charged(group):
            for key in self._group_pods.get(group.key, ()):
                self._charge(key)

    def delete_group(self, key: ObjectKey) -> GroupInfo | None:
        old = self.groups.pop(key, None)
        if old is not None:
            self._link(key, old.namespace, old.parent, None)
        return old

    # -- CompositePodGroups: trees of groups, each tree one gang (`composite`) ------------------
    def _link(self, key: ObjectKey, namespace: str, before: str | None, after: str | None) -> None:
        """Group or composite `key` moved from parent `before` to `after` (names, or None)."""
        if before is not None:
            self._children.get(composite_key(namespace, before), set()).discard(key)
        if after is not None:
            self._children.setdefault(composite_key(namespace, after), set()).add(key)

    def upsert_composite(self, obj: Obj) -> CompositeInfo:
        info = parse_composite(obj, levels=self._levels)
        old = self.composites.get(info.key)
        self.composites[info.key] = info
        self._link(info.key, info.namespace, old.parent if old else None, info.parent)
        self._recharge_below(info.key)
        return info

    def delete_composite(self, key: ObjectKey) -> CompositeInfo | None:
        old = self.composites.pop(key, None)
        if old is not None:
            self._link(key, old.namespace, old.parent, None)
            self.running.drop_gang(key)
            self._recharge_below(key)
        return old

    def _recharge_below(self, key: ObjectKey) -> None:
        """The pods below composite `key` are charged again (their victim unit may change)."""
        for leaf in self.tree_leaves(key):
            for pod in sorted(self._group_pods.get(leaf, ())):
                self._charge(pod)

    def evicted_with(self, group: GroupInfo) -> CompositeInfo | None:
        """The topmost CompositePodGroup of `disruptionMode: all` above `group` (its pods are
        evicted with that whole subtree), or None."""
        found, parent, seen = None, group.parent, 0
        while parent is not None and seen <= MAX_DEPTH:
            above = self.composites.get(composite_key(group.namespace, parent))
            if above is None:
                break
            if above.whole and not above.error:
                found = above
            parent, seen = above.parent, seen + 1
        return found

    def unit_of(self, gkey: ObjectKey) -> ObjectKey:
        """The gang a group's pods are scheduled in: the root's tree for a group with a parent
        (`composite_key` of the root), once the chain up to it is whole; else the group."""
        owner: GroupInfo | CompositeInfo | None = self.groups.get(gkey) or self.composites.get(gkey)
        if owner is None or owner.parent is None:
            return gkey
        root, _ = root_of(self.composites, owner.namespace, owner.parent)
        return gkey if root is None else root.key

    def broken_chain(self, group: GroupInfo) -> str:
        """Why the parents above `group` reach no root (a cycle, too deep, one missing); ""
        when they do, or it has none."""
        if group.parent is None:
            return ""
        return root_of(self.composites, group.namespace, group.parent)[1]

    def gang(self, key: ObjectKey) -> GroupInfo | None:
        """The group a gang key names: a PodGroup's, or a root CompositePodGroup's tree."""
        if key.endswith(COMPOSITE_MARK):
            return self.tree_group(key)
        return self.groups.get(key)

    def tree_group(self, key: ObjectKey) -> GroupInfo | None:
        """Root CompositePodGroup `key`'s whole tree as one gang (None: not a root we hold)."""
        root = self.composites.get(key)
        if root is None or root.parent is not None:
            return None
        built = build_tree(root, self.composites, self.groups, self._children)
        return GroupInfo(
            key=key,
            namespace=root.namespace,
            name=root.name,
            uid=root.uid,
            obj=root.obj,
            upstream=True,
            min_member=root.min_groups,
            topology=root.topology,
            priority=root.priority,
            never_preempts=root.never_preempts,
            error=built.error or None,
            tree=built.tree,
        )

    def tree_leaves(self, key: ObjectKey) -> list[ObjectKey]:
        """The PodGroups under composite `key`, however deep (any layout; no order)."""
        found: list[ObjectKey] = []
        stack, seen = [key], {key}
        while stack:
            for child in self._children.get(stack.pop(), ()):
                if child in seen:
                    continue
                seen.add(child)
                (stack if child in self.composites else found).append(child)
        return found

    def upsert_workload(self, obj: Obj) -> list[GroupInfo]:
        """A 1.35 Workload added or changed: the gangs of its pod groups that have members, read
        again from it."""
        key = key_of(obj)
        self.workloads[key] = obj
        gangs = self.workload_gangs(key)
        return [g for g in map(self._derive_workload_group, gangs) if g is not None]

    def delete_workload(self, key: ObjectKey) -> list[ObjectKey]:
        """A 1.35 Workload deleted: its gangs are dropped (their members wait for it again)."""
        self.workloads.pop(key, None)
        gangs = self.workload_gangs(key)
        for gkey in gangs:
            self.groups.pop(gkey, None)
        return gangs

    def workload_gangs(self, key: ObjectKey) -> list[ObjectKey]:
        """The gang keys of Workload `key`'s pod groups, those with members or read before."""
        known = {*self._group_pods, *self.groups}
        return sorted(
            gkey
            for gkey in known
            if (gang := workload_gang(gkey)) is not None and gang.workload_key == key
        )

    def members(self, key: ObjectKey) -> list[PodInfo]:
        """The group's pods (any state), oldest first; a composite's: its whole tree's."""
        groups = self.tree_leaves(key) if key.endswith(COMPOSITE_MARK) else [key]
        found = [
            self.pods[k] for g in groups for k in self._group_pods.get(g, ()) if k in self.pods
        ]
        return sorted(found, key=lambda p: (p.created, p.key))

    # -- bulk ------------------------------------------------------------------------------
    def keys_of(self, kind: str) -> Iterable[str]:
        """Current keys of `kind` (pods: ns/name, nodes and NRTs: name, PodGroups of either API:
        ns/name)."""
        if kind == "pods":
            return list(self.pods)
        if kind == "nodes":
            return list(self.nodes)
        if kind == "noderesourcetopologies":
            return list(self.nrts)
        if kind == "queues":
            return list(self.queues.queue_objs)
        if kind == "elasticquotas":
            return list(self.queues.quota_objs)
        if kind == "poddisruptionbudgets":
            return self.budgets.keys()
        if kind == WORKLOADS:
            return list(self.workloads)
        if kind == COMPOSITES:
            return [object_key(c.namespace, c.name) for c in self.composites.values()]
        upstream = kind == UPSTREAM_PODGROUPS  # listed by their objects' keys
        return [
            object_key(g.namespace, g.name) if upstream else key
            for key, g in self.groups.items()
            if g.upstream == upstream and g.workload is None
        ]

    def node_pod_keys(self, name: str) -> set[ObjectKey]:
        return set(self._node_pods.get(name, ()))


def _labels(obj: Obj) -> object:
    return (obj.get("metadata") or {}).get("labels")


def _charged(group: GroupInfo | None) -> tuple[object, ...]:
    """What of a group its members' running unit reads (a change: they are charged again)."""
    if group is None:
        return ()
    return (group.min_member, group.priority, group.whole, group.error is None)


def _keep_assumption(old: PodInfo | None, new: PodInfo) -> None:
    """Carry over to `new` what only the cache knows about `old`: while the API does not show
    the pod bound, the node this scheduler assumed it on and the request it assumed it with (a
    pod with claims: the GPUs and shares they take, which its reading lacks until it is bound:
    an update while its bind runs, such as the status naming its made claim, would otherwise
    uncharge them from the node and its queue, and rebuild the node twice); the devices it
    chose, while the pod stays assumed or bound to the same node."""
    if old is None:
        return
    if new.node is None and old.assumed:
        new.node, new.assumed, new.assignment = old.node, True, old.assignment
        new.request, new.claim_shares = old.request, old.claim_shares
    elif old.node == new.node:
        new.assignment = old.assignment
