"""The cluster as placement sees it: nodes plus incremental indexes; a decision scans few nodes.

Indexes (each a name-sorted list per key, kept up to date on every assume / forget):

- whole GPUs: key (node has GPUs in use, number of idle GPUs), for nodes with an idle GPU;
- GPU shares: key (largest free share on a partly used GPU) // 100;
- MIG: key (profile, node has GPUs in use), for nodes with a free device of that profile.

`candidates(pod)` walks them in binpack order: used nodes before idle ones, fewest idle GPUs /
tightest share first, names ascending. Pods without GPUs walk every node, starting at a position
derived from the pod key (CRC-32), so equal pods spread without any mutable cursor.

Not thread-safe: the caller serialises access (the scheduler holds its cache lock).
"""

from __future__ import annotations

import zlib
from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet

from agent.model import MILLI_PER_GPU

from .filters import choose_devices
from .node import Assignment, NodeState
from .request import PodRequest

__all__ = ["Snapshot"]

_SHARE_BUCKET = 100
_IndexKey = tuple[str, object]


class Snapshot:
    """Nodes by name, the pods assumed on them, and the indexes behind `candidates`."""

    def __init__(self, nodes: Iterable[NodeState] = ()) -> None:
        self._nodes: dict[str, NodeState] = {}
        self._all: list[str] = []
        self._index: dict[_IndexKey, list[str]] = {}
        self._keys: dict[str, list[_IndexKey]] = {}
        self._pod_node: dict[str, str] = {}
        self._max_gpus = 0
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

    def node(self, name: str) -> NodeState:
        """The node called `name`; KeyError names it when unknown."""
        try:
            return self._nodes[name]
        except KeyError:
            raise KeyError(f"no node {name} in the snapshot") from None

    def names(self) -> list[str]:
        """Node names, sorted."""
        return list(self._all)

    def add_node(self, node: NodeState) -> None:
        """Add `node`, or replace the node of that name (its pods come from the new state)."""
        if node.name in self._nodes:
            self.remove_node(node.name)
        self._nodes[node.name] = node
        insort(self._all, node.name)
        self._max_gpus = max(self._max_gpus, node.gpu_count)
        for key in node.pods:
            self._pod_node[key] = node.name
        self.refresh(node.name)

    def remove_node(self, name: str) -> NodeState | None:
        node = self._nodes.pop(name, None)
        if node is None:
            return None
        self._unindex(name)
        del self._all[bisect_left(self._all, name)]
        for key in node.pods:
            self._pod_node.pop(key, None)
        return node

    def copy(self) -> Snapshot:
        """A deep copy (nodes cloned; link matrices and selectors shared)."""
        return Snapshot(node.clone() for node in self._nodes.values())

    # -- pods ----------------------------------------------------------------------------------
    def assume(self, pod: PodRequest, assignment: Assignment) -> None:
        """Charge `pod` to `assignment.node`; a pod already assumed elsewhere is moved."""
        node = self.node(assignment.node)
        self.forget(pod.key)
        node.add_pod(pod, assignment)
        self._pod_node[pod.key] = node.name
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
        self.refresh(name)
        return None if entry is None else entry[1]

    def node_of(self, key: str) -> str | None:
        return self._pod_node.get(key)

    def free_totals(self, names: Iterable[str] | None = None) -> dict[str, int]:
        """Free quantity per resource summed over `names` (default: all nodes), negatives as 0."""
        totals: dict[str, int] = {}
        for name in self._all if names is None else names:
            node = self._nodes[name]
            for resource, alloc in node.allocatable.items():
                free = max(0, alloc - node.requested.get(resource, 0))
                totals[resource] = totals.get(resource, 0) + free
        return totals

    # -- indexes -------------------------------------------------------------------------------
    def refresh(self, name: str) -> None:
        """Re-index one node; call after changing a node's state other than through this class."""
        self._unindex(name)
        node = self._nodes[name]
        keys = _index_keys(node)
        for key in keys:
            insort(self._index.setdefault(key, []), name)
        self._keys[name] = keys

    def _unindex(self, name: str) -> None:
        for key in self._keys.pop(name, ()):
            bucket = self._index[key]
            del bucket[bisect_left(bucket, name)]

    def candidates(
        self, pod: PodRequest, allowed: AbstractSet[str] | None = None
    ) -> Iterator[NodeState]:
        """Nodes that may fit `pod`, best binpack first; a superset of the feasible nodes."""
        seen: set[str] = set()
        for name in self._candidate_names(pod):
            if name in seen or (allowed is not None and name not in allowed):
                continue
            seen.add(name)
            yield self._nodes[name]

    def _candidate_names(self, pod: PodRequest) -> Iterator[str]:
        if pod.gpus:
            yield from self._whole(pod.gpus)
        elif pod.gpu_milli:
            for bucket in range(pod.gpu_milli // _SHARE_BUCKET, MILLI_PER_GPU // _SHARE_BUCKET):
                yield from self._index.get(("share", bucket), ())
            yield from self._whole(1)
        elif any(pod.mig.values()):
            profile = min(
                (p for p, n in pod.mig.items() if n > 0),
                key=lambda p: (self._mig_count(p), p),
            )
            yield from self._index.get(("mig", (profile, True)), ())
            yield from self._index.get(("mig", (profile, False)), ())
        else:
            start = zlib.crc32(pod.key.encode()) % len(self._all) if self._all else 0
            yield from self._all[start:]
            yield from self._all[:start]

    def _whole(self, need: int) -> Iterator[str]:
        for used in (True, False):
            for idle in range(need, self._max_gpus + 1):
                yield from self._index.get(("whole", (used, idle)), ())

    def _mig_count(self, profile: str) -> int:
        return len(self._index.get(("mig", (profile, True)), ())) + len(
            self._index.get(("mig", (profile, False)), ())
        )


def _index_keys(node: NodeState) -> list[_IndexKey]:
    if not node.gpu_count:
        return []
    used = node.gpu_used()
    keys: list[_IndexKey] = []
    idle = len(node.free_whole_gpus())
    if idle:
        keys.append(("whole", (used, idle)))
    partial = [
        f for g, f in enumerate(node.gpu_free) if not node.gpu_mig[g] and 0 < f < MILLI_PER_GPU
    ]
    if partial:
        keys.append(("share", max(partial) // _SHARE_BUCKET))
    profiles = {p for free in node.mig_free for p, n in free.items() if n > 0}
    keys.extend(("mig", (p, used)) for p in sorted(profiles))
    return keys
