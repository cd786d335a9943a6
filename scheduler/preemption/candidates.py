"""Where to look: the cheap bound that keeps the victim search from trying every node.

Victim priorities are taken as thresholds, lowest first. At threshold p, what the eligible units
of priority ≤ p would free on each node is summed from the index's per-(leaf, priority) sums
(only nodes holding such units are visited). A node passes when its free milli-GPU, cpu and
memory plus those sums cover what U asks (a necessary condition of a fit, never a sufficient
one). Passing nodes are ranked by the least milli-GPU they must evict at best, then by name, and
only the first `candidate_limit` are fully evaluated (greedy then reprieve), as kube-scheduler
evaluates a limited number of candidate nodes. A gang takes the best-ranked passing nodes (per
topology domain when it must stay in one) until their room covers its total, and that node set
is evaluated; a set that does not place the gang is widened (doubled, up to `candidate_limit`
nodes).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from scheduler.placement import NodeState, PodRequest, Snapshot
from scheduler.placement.request import CPU, MEMORY

from .index import Freed, RunningIndex

__all__ = ["Bound", "Tally", "gang_sets", "node_candidates"]

GANG_SETS = 4
"""Node sets (one per topology domain at most) fully evaluated per threshold for a gang."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Bound:
    """What U (or its smallest pod) needs on one node, and U's totals."""

    milli: int
    cpu: int
    memory: int

    @classmethod
    def of(cls, pods: Iterable[PodRequest]) -> Bound:
        pods = list(pods)
        return cls(
            milli=sum(p.gpu_milli_total for p in pods),
            cpu=sum(p.cpu_milli for p in pods),
            memory=sum(p.memory for p in pods),
        )

    def room(self, node: NodeState, freed: Freed | None) -> tuple[int, int, int]:
        """What `node` would have free with `freed` gone."""
        extra = freed or (0, 0, 0, 0)
        milli = node.gpu_capacity_milli() - node.used_milli + extra[0]
        return milli, node.free(CPU) + extra[1], node.free(MEMORY) + extra[2]

    def covered_by(self, room: tuple[int, int, int]) -> bool:
        return (
            (not self.milli or room[0] >= self.milli)
            and (not self.cpu or room[1] >= self.cpu)
            and (not self.memory or room[2] >= self.memory)
        )

    def shortfall(self, node: NodeState) -> int:
        """The least milli-GPU `node` must evict for this (the ranking of passing nodes)."""
        return max(0, self.milli - (node.gpu_capacity_milli() - node.used_milli))


class Tally:
    """Per node, what the eligible units of priority ≤ the current threshold free there."""

    def __init__(self, index: RunningIndex) -> None:
        self._index = index
        self.freed: dict[str, Freed] = {}

    def add(self, leaves: Iterable[str], priority: int) -> set[str]:
        """Count the units of `leaves` at `priority`; returns the nodes that changed."""
        touched: set[str] = set()
        for leaf in leaves:
            for node, sums in self._index.freed(leaf, priority).items():
                total = self.freed.get(node)
                if total is None:
                    self.freed[node] = list(sums)
                else:
                    for i, value in enumerate(sums):
                        total[i] += value
                touched.add(node)
        return touched


def node_candidates(
    snapshot: Snapshot, tally: Tally, nodes: Iterable[str], bound: Bound, limit: int
) -> list[str]:
    """The nodes among `nodes` that pass the bound, best first, at most `limit`."""
    passing = []
    live = snapshot.nodes
    for name in nodes:
        node = live.get(name)
        if node is not None and bound.covered_by(bound.room(node, tally.freed.get(name))):
            passing.append((bound.shortfall(node), name))
    passing.sort()
    return [name for _short, name in passing[: max(1, limit)]]


def gang_sets(
    snapshot: Snapshot,
    tally: Tally,
    extra: Iterable[str],
    pods: Sequence[PodRequest],
    label: str | None,
    limit: int,
) -> list[tuple[list[str], int]]:
    """Ranked node lists, one per domain of `label` (one in all when None), each ranked best
    first, with how many of its first nodes cover the gang (callers widen a set that fails)."""
    smallest = min(pods, key=lambda p: (p.gpu_milli_total, p.cpu_milli, p.memory))
    single, total = Bound.of([smallest]), Bound.of(pods)
    live = snapshot.nodes
    groups: dict[str, list[tuple[int, str]]] = {}
    for name in {*tally.freed, *extra}:
        node = live.get(name)
        if node is None or not single.covered_by(single.room(node, tally.freed.get(name))):
            continue
        domain = "" if label is None else node.labels.get(label)
        if domain is not None:
            groups.setdefault(domain, []).append((total.shortfall(node), name))
    ranked = []
    for members in groups.values():
        members.sort()
        names = [name for _short, name in members[: max(1, limit)]]
        cut = _covering(live, tally.freed, names, total)
        if cut:
            ranked.append((sum(s for s, _n in members[:cut]), names, cut))
    ranked.sort(key=lambda item: (item[0], item[1][: item[2]]))
    return [(names, cut) for _cost, names, cut in ranked[:GANG_SETS]]


def _covering(
    live: Mapping[str, NodeState], freed: Mapping[str, Freed], names: Sequence[str], total: Bound
) -> int:
    """How many of `names` (in order) it takes for their room to cover `total`; 0: never."""
    room = [0, 0, 0]
    for i, name in enumerate(names):
        for k, value in enumerate(total.room(live[name], freed.get(name))):
            room[k] += value
        if total.covered_by((room[0], room[1], room[2])):
            return i + 1
    return 0
