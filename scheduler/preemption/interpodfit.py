"""Inter-pod rules in the victim search, read as kube-scheduler's preemption reads them.

A pod's rules that read only its own node (none, or anti-affinity on `kubernetes.io/hostname`,
`interpod.decided_per_node`) are decided on the what-if areas' clones, as any filter. Others read
domains beyond an area (a zone, a rack) and every domain's count (spread): for a single pod they
are judged on the live snapshot with the area's victims read as gone (`InterPodFit`), the way
the stock scheduler reruns its filters on a node without the pods it would evict there. The
search then keeps to the nodes where evicting could lift a refusal at all
(`interpod.refused_whatever_leaves`).

A gang's members read each other (a gang spread over a rack, anti-affine to another job's pods
in its rack and affine to its own): `GangInterPodFit` judges a placement the what-if areas made
on the live snapshot with the victims gone and each member judged with the ones before it
placed, as `place_gang` places them. It changes the live snapshot for that and puts it back
before it returns.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.placement import Assignment, PodRequest, Snapshot
from scheduler.placement.interpod import HOSTNAME, ReadMemo, pods_read, refused_nodes
from scheduler.placement.request import PodTerm

__all__ = ["GANG_RULE_PODS", "GangInterPodFit", "InterPodFit"]


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


GANG_RULE_PODS = 512
"""The most running pods a gang's inter-pod rules may read for it to preempt: each placement
judged reads them all again (the live snapshot changes with the members), and a search judges
tens of placements (at 2,500 pods, 0.6-0.9 s a search at 5,000 nodes)."""


class GangInterPodFit:
    """Whether a gang's members, placed as given (in order), pass their inter-pod rules and the
    running pods' on the live snapshot once some pods are gone. Only the pods the members'
    rules read count (`interpod.pods_read`): each set of those gone with each choice of the
    members' nodes is judged once. For a judgement the snapshot loses the pods gone and gains
    the members before each one judged; everything is put back before `fits` returns (an
    exception included). One search at a time (under the caller's lock, as the search)."""

    def __init__(self, pods: Sequence[PodRequest], live: Snapshot) -> None:
        self._live = live
        self.read: frozenset[str] = frozenset().union(*(pods_read(p, live) for p in pods))
        """The keys of the running pods the members' rules read."""
        self.together, self.apart = _own_keys(pods[0], live) if pods else (None, None)
        """The node label whose one domain the members' affinity to each other keeps them in;
        the one over which they repel each other or spread (None: none, or hostname)."""
        self._judged: dict[tuple[frozenset[str], tuple[tuple[str, str], ...]], bool] = {}

    def fits(self, placed: Sequence[tuple[PodRequest, Assignment]], gone: frozenset[str]) -> bool:
        read = gone & self.read
        key = (read, tuple((pod.key, assignment.node) for pod, assignment in placed))
        found = self._judged.get(key)
        if found is None:
            found = self._judged[key] = self._judge(placed, read)
        return found

    def _judge(self, placed: Sequence[tuple[PodRequest, Assignment]], gone: frozenset[str]) -> bool:
        live = self._live
        taken: list[tuple[PodRequest, Assignment]] = []
        added: list[str] = []
        try:
            for key in sorted(gone):
                name = live.node_of(key)
                entry = None if name is None else live.node(name).pods.get(key)
                if entry is not None:
                    live.forget(key)
                    taken.append(entry)
            for pod, assignment in placed:
                refused = refused_nodes(pod, live)
                if refused is not None and assignment.node in refused:
                    return False
                live.assume(pod, assignment)
                added.append(pod.key)
            return True
        finally:
            for key in reversed(added):
                live.forget(key)
            for request, assignment in reversed(taken):
                live.assume(request, assignment)


def _own_keys(pod: PodRequest, live: Snapshot) -> tuple[str | None, str | None]:
    """(the key a member's required affinity to the gang's own pods reads, the key its
    anti-affinity to them or its spread over them reads), hostname aside: a gang's members are
    alike, so the first one's rules tell."""
    rules = pod.inter_pod
    if rules is None:
        return None, None
    labels = live.namespace_labels

    def own(term: PodTerm) -> bool:
        return term.topology_key != HOSTNAME and term.selects(pod, labels)

    together = next((t.topology_key for t in rules.affinity if own(t)), None)
    apart = next((t.topology_key for t in rules.anti_affinity if own(t)), None)
    if apart is None:
        apart = next(
            (
                c.topology_key
                for c in rules.spread
                if c.topology_key != HOSTNAME
                and c.selector is not None
                and c.selector.matches(pod.labels)
            ),
            None,
        )
    return together, apart
