"""Inter-pod rules in the victim search, read as kube-scheduler's preemption reads them.

A pod's rules that read only its own node (none, or anti-affinity on `kubernetes.io/hostname`,
`interpod.decided_per_node`) are decided on the what-if areas' clones, as any filter. Others read
domains beyond an area (a zone, a rack) and every domain's count (spread): for a single pod they
are judged on the live snapshot with the area's victims read as gone (`InterPodFit`), the way
the stock scheduler reruns its filters on a node without the pods it would evict there. The
search then keeps to the nodes where evicting could lift a refusal at all
(`interpod.refused_whatever_leaves`).
"""

from __future__ import annotations

from scheduler.placement import PodRequest, Snapshot
from scheduler.placement.interpod import ReadMemo, pods_read, refused_nodes

__all__ = ["InterPodFit"]


class InterPodFit:
    """Whether `pod`'s inter-pod rules, and the running pods' that select it, let it onto a node
    once some pods are gone: `refused_nodes` on the live snapshot, which must not change while
    this is used (one search). A `DeviceFit`. Only the pods the rules read count
    (`interpod.pods_read`): each set of those gone is worked out once, and what the rules read
    (each selector's matches, each spread constraint's count) once in all (`ReadMemo`)."""

    def __init__(self, pod: PodRequest, live: Snapshot, memo: ReadMemo | None = None) -> None:
        """`memo`: what the rules read of `live` already (the live Placer's, `read_memo`)."""
        self._pod = pod
        self._live = live
        self.memo = ReadMemo() if memo is None else memo
        """What the rules read of `live`, kept for this search (`interpod.ReadMemo`)."""
        self.read = pods_read(pod, live, self.memo)
        """The keys of the running pods the rules read."""
        self._refused: dict[frozenset[str], frozenset[str]] = {}

    def fits(self, node: str, gone: frozenset[str]) -> bool:
        read = gone & self.read
        refused = self._refused.get(read)
        if refused is None:
            found = refused_nodes(self._pod, self._live, read, self.memo)
            refused = frozenset(found or ())
            self._refused[read] = refused
        return node not in refused
