"""The cluster as placement sees it: nodes plus incremental indexes; a decision scans few nodes.

Indexes (each the names of a key, in order: `SortedNames`, whose adds and removals shift one
block of names, not a bucket of most of the cluster; brought up to date when next read, for the
nodes changed since: a caller that never reads them, as the verdict memo while pods fit, never
pays for them):

- whole GPUs: key (node has GPUs in use, number of idle GPUs), for nodes with an idle GPU;
- GPU shares: key (largest free share on a partly used GPU) // 100;
- MIG: key (profile, node has GPUs in use), for nodes with a free device of that profile;
- shared GPUs: key the replica resource, for nodes with a free replica (their free replicas of
  `nvidia.com/gpu` also count as idle GPUs: a plain request is equal splits there).

`candidates(pod)` walks them in binpack order: used nodes before idle ones, fewest idle GPUs /
tightest share first, names ascending. Pods without GPUs walk every node, starting at a position
derived from the pod key (CRC-32), so equal pods spread without any mutable cursor.

Also kept incrementally: cluster resource totals (for a PodGroup's `minResources`), how many
nodes have GPUs and how many of those have none in use (`gpu_nodes`, `idle_gpu_nodes`: the
`fragmentation` score consolidates while idle ones are scarce), the nodes running a pod with
required anti-affinity by term (`anti_affinity_terms`), per topology label asked for once, the
domains of that label with their free milli-GPU, and once any is asked for, the pods by each of
their labels (`pods_labelled`: what inter-pod rules select).

Change tracking: every mutation of a node (add, replace, remove, assume, forget, `refresh`) bumps
`generation` and stamps the node with it (`node_version`), so a caller that caches per-node results
asks `changed_since(generation)` for what to recompute instead of being told. Removed nodes are
remembered (the last `_REMOVED_KEPT`) so their removal is reported. A node's index keys are
kept with its state (`NodeState.derive`), so nodes copied from one state (`NodeState.copy_as`)
compute them once; `refresh` drops what was derived, as assume and forget do.

Not thread-safe: the caller serialises access (the scheduler holds its cache lock).
"""

from __future__ import annotations

import zlib
from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, cast

from agent.model import MILLI_PER_GPU
from agent.resource_names import GPU_RESOURCE

from .filters import choose_devices
from .node import Assignment, NodeState
from .request import Effect, HostPort, PodRequest, PodTerm
from .sorted_names import SortedNames

__all__ = ["HARD_AFFINITY_WEIGHT", "Domain", "Snapshot"]

_SHARE_BUCKET = 100
HARD_AFFINITY_WEIGHT = 1
"""What a running pod's required affinity term weighs on the pods it selects (kube-scheduler's
`hardPodAffinityWeight` default)."""
_NO_PODS: Mapping[str, Mapping[str, str]] = {}
_REMOVED_KEPT = 4096
_IndexKey = tuple[str, object]


@dataclass(slots=True)
class Domain:
    """One value of a topology label: its nodes and their free milli-GPU (non-MIG GPUs).
    Change `names` through `add` and `discard`, which keep `members` in step."""

    names: set[str] = field(default_factory=set)
    free_milli: int = 0
    _members: frozenset[str] | None = None

    def add(self, name: str) -> None:
        self.names.add(name)
        self._members = None

    def discard(self, name: str) -> None:
        self.names.discard(name)
        self._members = None

    def members(self) -> frozenset[str]:
        """`names` frozen: one object while the domain's nodes stand, so a caller that keys
        something on the node set it passes (`VerdictMemo`'s allowed mask) finds it again."""
        if self._members is None:
            self._members = frozenset(self.names)
        return self._members


class Snapshot:
    """Nodes by name, the pods assumed on them, and the indexes behind `candidates`."""

    def __init__(self, nodes: Iterable[NodeState] = ()) -> None:
        self._nodes: dict[str, NodeState] = {}
        self._all: list[str] = []
        self._names: tuple[str, ...] | None = None  # `_all` as `names` gives it, while it holds
        self._index: dict[_IndexKey, SortedNames] = {}  # names in order (`SortedNames`)
        self._keys: dict[str, tuple[_IndexKey, ...]] = {}  # each node's keys in `_index`
        self._unindexed: dict[str, None] = {}  # nodes whose keys may have changed since
        self._pod_node: dict[str, str] = {}
        self._max_gpus = 0
        self._alloc_total: dict[str, int] = {}
        self._req_total: dict[str, int] = {}
        self._free_milli: dict[str, int] = {}
        self._gpu_nodes = 0
        self._idle_gpu: set[str] = set()
        self._anti_terms: dict[PodTerm, dict[str, str]] = {}  # `anti_affinity_terms`
        self._weighed_terms: dict[tuple[int, PodTerm], dict[str, str]] = {}  # `weighed_terms`
        self._host_ports: dict[HostPort, dict[str, str]] = {}  # `host_ports`
        self._soft_tainted: set[str] = set()  # `soft_tainted`
        self.namespace_labels: dict[str, Mapping[str, str]] = {}
        """Each namespace's labels, as the caller keeps them (what an inter-pod term's
        `namespaceSelector` reads; a namespace not here has none)."""
        self._nodes_version = 0  # `nodes_version`
        self._labelled: dict[str, dict[str, dict[str, str]]] | None = None  # `pods_labelled`
        self._domains: dict[str, dict[str, Domain]] = {}
        self._generation = 0
        self._stamps: dict[str, int] = {}  # node -> generation of its last change, oldest first
        self._removed: dict[str, int] = {}  # removed nodes still in _stamps, oldest first
        self._horizon = 0  # changed_since(g) is complete for every g >= _horizon
        for node in nodes:
            self.add_node(node)

    # -- nodes ---------------------------------------------------------------------------------
    @property
    def nodes(self) -> Mapping[str, NodeState]:
        return self._nodes

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, name: object) -> bool:
        return name in self._nodes

    @property
    def gpu_nodes(self) -> int:
        """How many nodes have GPUs (MIG-enabled ones included)."""
        return self._gpu_nodes

    @property
    def idle_gpu_nodes(self) -> int:
        """How many nodes have GPUs and none of them in use (`NodeState.gpu_used`); pods without
        GPUs (DaemonSets, cpu jobs) do not count."""
        return len(self._idle_gpu)

    @property
    def most_whole_gpus(self) -> int:
        """At least as many whole GPUs as any one node can give pods: the most GPUs plus
        replicas of shared ones of any node added (never lowered when nodes leave)."""
        return self._max_gpus

    def node(self, name: str) -> NodeState:
        """The node called `name`; KeyError names it when unknown."""
        try:
            return self._nodes[name]
        except KeyError:
            raise KeyError(f"no node {name} in the snapshot") from None

    @property
    def weighed_terms(self) -> Mapping[tuple[int, PodTerm], Mapping[str, str]]:
        """Each (signed weight, term) of the pods here that weighs on other pods' scores ->
        {pod key: its node}: preferred affinity (+weight), preferred anti-affinity (-weight) and
        required affinity (+`HARD_AFFINITY_WEIGHT`), summed per term within a pod, as
        kube-scheduler's `InterPodAffinity` score reads the running pods' terms."""
        return self._weighed_terms

    @property
    def anti_affinity_terms(self) -> Mapping[PodTerm, Mapping[str, str]]:
        """Each required anti-affinity term of the pods here -> {pod key: its node} of the pods
        carrying it (kept incrementally: the replicas of one template share their terms, and a
        pod that matches none of them pays a look at each distinct term)."""
        return self._anti_terms

    @property
    def host_ports(self) -> Mapping[HostPort, Mapping[str, str]]:
        """Each host port the pods here take -> {pod key: its node} (kept incrementally)."""
        return self._host_ports

    @property
    def soft_tainted(self) -> AbstractSet[str]:
        """The nodes with a `PreferNoSchedule` taint."""
        return self._soft_tainted

    @property
    def nodes_version(self) -> int:
        """Grows whenever a node is added, replaced or removed (its labels and taints may have
        changed), not when pods come and go: what is worked out from the nodes' labels alone
        holds while it stays."""
        return self._nodes_version

    def names(self) -> tuple[str, ...]:
        """Node names, sorted: the same tuple while no node is added or removed."""
        if self._names is None:
            self._names = tuple(self._all)
        return self._names

    def add_node(self, node: NodeState) -> None:
        """Add `node`, or replace the node of that name (its pods come from the new state)."""
        if node.name in self._nodes:
            if self._nodes[node.name] is node:  # the same object again: it may have changed
                node.derived = None
            self.remove_node(node.name)
        self._removed.pop(node.name, None)
        self._nodes[node.name] = node
        self._nodes_version += 1
        if any(t.effect is Effect.PREFER_NO_SCHEDULE for t in node.taints):
            self._soft_tainted.add(node.name)
        insort(self._all, node.name)
        self._names = None
        # a node's whole-GPU key counts its idle GPUs and its free `nvidia.com/gpu` replicas
        self._max_gpus = max(self._max_gpus, node.gpu_count + sum(node.gpu_slots))
        self._gpu_nodes += node.gpu_count > 0
        for key, (pod, _assignment) in node.pods.items():
            self._pod_node[key] = node.name
            self._label_pod(pod, node.name)
        _add_into(self._alloc_total, node.allocatable.items(), 1)
        _add_into(self._req_total, node.requested.items(), 1)
        self._free_milli[node.name] = 0
        for label, domains in self._domains.items():
            value = node.labels.get(label)
            if value is not None:
                domains.setdefault(value, Domain()).add(node.name)
        self._reindex(node.name)

    def remove_node(self, name: str) -> NodeState | None:
        """Drop a node and the pods assumed on it; returns it, or None when unknown."""
        if name not in self._nodes:
            return None
        self._unindex(name)
        self._unindexed.pop(name, None)
        self._set_free_milli(name, 0)
        node = self._nodes.pop(name)
        self._nodes_version += 1
        self._soft_tainted.discard(name)
        del self._free_milli[name]
        self._gpu_nodes -= node.gpu_count > 0
        self._idle_gpu.discard(name)
        del self._all[bisect_left(self._all, name)]
        self._names = None
        for key, (pod, _assignment) in node.pods.items():
            self._pod_node.pop(key, None)
            self._unlabel_pod(pod)
        _add_into(self._alloc_total, node.allocatable.items(), -1)
        _add_into(self._req_total, node.requested.items(), -1)
        for label, domains in self._domains.items():
            value = node.labels.get(label)
            if value is not None:
                domains[value].discard(name)
                if not domains[value].names:
                    del domains[value]
        self._stamp(name)
        self._removed[name] = self._generation
        if len(self._removed) > _REMOVED_KEPT:
            oldest = next(iter(self._removed))
            self._horizon = max(self._horizon, self._removed.pop(oldest))
            del self._stamps[oldest]
        return node

    def copy(self) -> Snapshot:
        """A deep copy (nodes cloned; link matrices and selectors shared)."""
        copy = Snapshot(node.clone() for node in self._nodes.values())
        copy.namespace_labels = dict(self.namespace_labels)
        return copy

    # -- change tracking -----------------------------------------------------------------------
    @property
    def generation(self) -> int:
        """How many node changes this snapshot has seen (grows with every mutation)."""
        return self._generation

    def node_version(self, name: str) -> int:
        """The node's change counter: the `generation` of its last change (0: never seen).

        It increases with every change to that node (add, replace, remove, assume, forget,
        `refresh`), so an unchanged value means an unchanged node.
        """
        return self._stamps.get(name, 0)

    def changed_since(self, generation: int) -> list[str] | None:
        """Nodes added, removed or changed after `generation`, newest first; None when that is
        older than what is remembered (then the caller must look at every node again)."""
        if generation < self._horizon:
            return None
        out: list[str] = []
        for name, stamp in reversed(self._stamps.items()):
            if stamp <= generation:
                break
            out.append(name)
        return out

    def _stamp(self, name: str) -> None:
        self._generation += 1
        self._stamps.pop(name, None)
        self._stamps[name] = self._generation

    # -- pods ----------------------------------------------------------------------------------
    def assume(self, pod: PodRequest, assignment: Assignment) -> None:
        """Charge `pod` to `assignment.node`; a pod already assumed elsewhere is moved."""
        node = self.node(assignment.node)
        self.forget(pod.key)
        node.add_pod(pod, assignment)
        _add_into(self._req_total, pod.vector, 1)
        self._pod_node[pod.key] = node.name
        self._label_pod(pod, node.name)
        self.refresh(node.name)

    def assume_on(self, pod: PodRequest, node_name: str) -> Assignment:
        """Charge a pod bound by someone else to `node_name`; devices chosen as the kubelet would.

        Resources are always charged; devices are charged only when they are free (else none).
        """
        node = self.node(node_name)
        self.forget(pod.key)
        assignment = choose_devices(pod, node, None) or Assignment(node=node_name)
        self.assume(pod, assignment)
        return assignment

    def forget(self, key: str) -> Assignment | None:
        """Undo `assume`; returns the assignment, or None when the pod is unknown."""
        name = self._pod_node.pop(key, None)
        if name is None:
            return None
        entry = self._nodes[name].remove_pod(key)
        if entry is None:
            return None
        self._unlabel_pod(entry[0])
        _add_into(self._req_total, entry[0].vector, -1)
        self.refresh(name)
        return entry[1]

    def node_of(self, key: str) -> str | None:
        return self._pod_node.get(key)

    def free_totals(self) -> dict[str, int]:
        """Cluster allocatable minus requested, per resource (kept incrementally)."""
        return {r: a - self._req_total.get(r, 0) for r, a in self._alloc_total.items()}

    def _held_terms(self, pod: PodRequest) -> Iterator[tuple[dict[Any, dict[str, str]], Any]]:
        """The indexes `pod` is in (terms, host ports), each with its key there."""
        for port in pod.host_ports:
            yield self._host_ports, port
        rules, preferences = pod.inter_pod, pod.preferences
        weights: dict[PodTerm, int] = {}  # a term the pod repeats weighs as often as it appears
        if rules is not None:
            for term in rules.anti_affinity:
                yield self._anti_terms, term
            for term in rules.affinity:
                weights[term] = weights.get(term, 0) + HARD_AFFINITY_WEIGHT
        if preferences is not None:
            for weight, term in preferences.affinity:
                weights[term] = weights.get(term, 0) + weight
            for weight, term in preferences.anti_affinity:
                weights[term] = weights.get(term, 0) - weight
        for term, weight in weights.items():
            if weight:
                yield self._weighed_terms, (weight, term)

    def pods_labelled(self, key: str) -> Mapping[str, Mapping[str, str]]:
        """Label value -> {pod key: its node} for the pods carrying label `key` (every label is
        tracked from the first call on: a snapshot no inter-pod rule reads never pays)."""
        if self._labelled is None:
            self._labelled = {}
            for name, node in self._nodes.items():
                for pod, _assignment in node.pods.values():
                    self._label_pod(pod, name)
        return self._labelled.get(key, _NO_PODS)

    def _label_pod(self, pod: PodRequest, node: str) -> None:
        for table, key in self._held_terms(pod):
            table.setdefault(key, {})[pod.key] = node
        if self._labelled is not None:
            for key, value in pod.labels.items():
                self._labelled.setdefault(key, {}).setdefault(value, {})[pod.key] = node

    def _unlabel_pod(self, pod: PodRequest) -> None:
        for table, key in self._held_terms(pod):
            holders = table.get(key)
            if holders is not None:
                holders.pop(pod.key, None)
                if not holders:
                    del table[key]
        if self._labelled is None:
            return
        for key, value in pod.labels.items():
            values = self._labelled.get(key)
            pods = None if values is None else values.get(value)
            if pods is None or values is None:
                continue
            pods.pop(pod.key, None)
            if not pods:
                del values[value]
                if not values:
                    del self._labelled[key]

    # -- topology domains ----------------------------------------------------------------------
    def domains(self, label: str) -> Mapping[str, Domain]:
        """Label value -> its domain, for nodes carrying `label` (tracked from the first call)."""
        if label not in self._domains:
            table: dict[str, Domain] = {}
            for name, node in self._nodes.items():
                value = node.labels.get(label)
                if value is not None:
                    domain = table.setdefault(value, Domain())
                    domain.add(name)
                    domain.free_milli += self._free_milli[name]
            self._domains[label] = table
        return self._domains[label]

    def _set_free_milli(self, name: str, free: int) -> None:
        delta = free - self._free_milli[name]
        if not delta:
            return
        self._free_milli[name] = free
        labels = self._nodes[name].labels
        for label, domains in self._domains.items():
            value = labels.get(label)
            if value is not None:
                domains[value].free_milli += delta

    # -- indexes -------------------------------------------------------------------------------
    def refresh(self, name: str) -> None:
        """Re-index one node and count it changed; call after changing a node's state other than
        through this class (replacing it with `add_node` is the other way)."""
        self._nodes[name].derived = None
        self._reindex(name)

    def _reindex(self, name: str) -> None:
        """Count node `name` changed and keep its totals; its index keys wait for the next
        reader of the index (`_indexed`)."""
        self._stamp(name)
        self._unindexed[name] = None
        node = self._nodes[name]
        self._set_free_milli(name, node.gpu_capacity_milli() - node.used_milli)
        if node.gpu_count and not node.gpu_used():
            self._idle_gpu.add(name)
        else:
            self._idle_gpu.discard(name)

    def _indexed(self) -> dict[_IndexKey, SortedNames]:
        """The index, with the nodes changed since it was last read put under their keys now:
        a node changed many times between two reads is indexed once, and a memo that reads no
        index (`VerdictMemo` while pods fit) never pays for it."""
        if self._unindexed:
            index, nodes = self._index, self._nodes
            for name in self._unindexed:
                self._unindex(name)
                derive = nodes[name].derive  # (a removed node left `_unindexed`)
                keys = cast("tuple[_IndexKey, ...]", derive("index", _index_keys))
                for key in keys:
                    bucket = index.get(key)
                    if bucket is None:
                        bucket = index[key] = SortedNames()
                    bucket.add(name)
                self._keys[name] = keys
            self._unindexed.clear()
        return self._index

    def _unindex(self, name: str) -> None:
        for key in self._keys.pop(name, ()):
            self._index[key].remove(name)

    def candidates(
        self, pod: PodRequest, allowed: AbstractSet[str] | None = None
    ) -> Iterator[NodeState]:
        """Nodes that may fit `pod` (a superset of the feasible ones in `allowed`), best first."""
        index = self._indexed()
        order = self._visit_order(pod)
        if order is None:
            names: Iterable[str] = self._rotated(pod, allowed)
        elif allowed is not None and 4 * len(allowed) < len(self._all):
            names = self._ranked(order, allowed)
        else:
            names = (n for key in order for n in index.get(key, ()))
        seen: set[str] = set()
        for name in names:
            if name in seen or (allowed is not None and name not in allowed):
                continue
            seen.add(name)
            yield self._nodes[name]

    def _visit_order(self, pod: PodRequest) -> list[_IndexKey] | None:
        """Index keys in visiting order; None for a pod without GPUs (visit every node)."""
        if pod.shares:
            return [("shared", r) for r in sorted({a.resource for a in pod.shares})]
        if pod.gpus:
            return self._whole(pod.gpus)
        if pod.gpu_milli:
            first = pod.gpu_milli // _SHARE_BUCKET
            shares: list[_IndexKey] = [
                ("share", b) for b in range(first, MILLI_PER_GPU // _SHARE_BUCKET)
            ]
            return shares + self._whole(1)
        if pod.wants_gpu:
            profile = min(
                (p for p, n in pod.mig.items() if n > 0), key=lambda p: (self._mig_count(p), p)
            )
            return [("mig", (profile, True)), ("mig", (profile, False))]
        return None

    def _whole(self, need: int) -> list[_IndexKey]:
        return [
            ("whole", (used, idle))
            for used in (True, False)
            for idle in range(need, self._max_gpus + 1)
        ]

    def _ranked(self, order: list[_IndexKey], allowed: AbstractSet[str]) -> list[str]:
        """`allowed` in the order the full index walk would visit them (few nodes: sort them)."""
        self._indexed()  # the keys of every node up to date
        position = {key: i for i, key in enumerate(order)}
        ranked = [
            (position[key], name)
            for name in allowed
            for key in self._keys.get(name, ())
            if key in position
        ]
        ranked.sort()
        return [name for _pos, name in ranked]

    def _rotated(self, pod: PodRequest, allowed: AbstractSet[str] | None) -> list[str]:
        names = self._all if allowed is None else sorted(n for n in allowed if n in self._nodes)
        if not names:
            return []
        start = zlib.crc32(pod.key.encode()) % len(names)
        return names[start:] + names[:start]

    def _mig_count(self, profile: str) -> int:
        index = self._indexed()
        return len(index.get(("mig", (profile, True)), ())) + len(
            index.get(("mig", (profile, False)), ())
        )


def _add_into(totals: dict[str, int], items: Iterable[tuple[str, int]], sign: int) -> None:
    for name, qty in items:
        totals[name] = totals.get(name, 0) + sign * qty


def _index_keys(node: NodeState) -> tuple[_IndexKey, ...]:
    if not node.gpu_count:
        return ()
    used = node.gpu_used()
    keys: list[_IndexKey] = []
    idle = node.idle_mask.bit_count()
    if node.share_resource is not None and any(node.slots_free):
        keys.append(("shared", node.share_resource))
        if node.share_resource == GPU_RESOURCE:
            idle += sum(node.slots_free)  # a plain GPU request is equal splits there
    if idle:
        keys.append(("whole", (used, idle)))
    partial = [  # a shared GPU serves `gpu_milli` pods even with all its milli free
        min(f, MILLI_PER_GPU - 1)
        for g, f in enumerate(node.gpu_free)
        if not node.gpu_mig[g] and f > 0 and (f < MILLI_PER_GPU or node.gpu_slots[g])
    ]
    if partial:
        keys.append(("share", max(partial) // _SHARE_BUCKET))
    profiles = {p for free in node.mig_free for p, n in free.items() if n > 0}
    keys.extend(("mig", (p, used)) for p in sorted(profiles))
    return tuple(keys)
