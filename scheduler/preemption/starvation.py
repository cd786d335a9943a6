"""Where a starving unit gets its hold (DESIGN §11): the node (set) with the fewest GPUs in use
where U would fit once this scheduler's pods there are gone, found without evicting anyone.

Nodes are taken by GPUs in use (milli-GPU, any scheduler's pods), fewest first, then by name,
leaving out those held or nominated for another unit U must not overtake (`Nominations.blocked`:
U could not start there, and two holds on one node would each keep the other's unit off it).
For one pod, the first node where the placement code fits it with our pods taken off a clone
wins (at most `TRIES` nodes are tried: the hold is an optimisation, not a guarantee). Inter-pod
rules that read beyond a node are judged on the live snapshot with those pods gone, as the
victim search judges them (`_LiveRules`). For a gang,
the emptiest nodes (per domain of a required topology label) are taken until their capacity
covers the gang, placed with `place_gang` on clones without our pods, widened by doubling when
that fails; the set with the fewest GPUs in use among the domains tried wins.

`take_hold` is the guard's one code path, the runtime's and the simulator's: a unit whose last
hold ran out (`Nominations.previous`) while its nodes drained (fewer GPUs in use than when it
began; for a renewal, than when the hold it renewed began: pods that run longer than a hold end
in lumps, and one window without an end is no sign the nodes stopped draining) keeps those nodes
while it would still fit them with our pods gone, and renews the hold at once unless another
unit was refused one meanwhile. The pods on held nodes rarely all end
within one hold; re-targeting each hold to the emptiest set then, after a cooldown in which the
units queued behind took what the last one drained, never finished a drain (issue 27: a 2 ×
8-GPU gang held four pairs of nodes in turn). A hold on nodes that did not drain is not renewed:
the cooldown gives the room back to the others.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace

from scheduler.placement import Assignment, NodeState, Placer, PodRequest, Snapshot, place_gang
from scheduler.placement.interpod import decided_per_node, refused_whatever_leaves
from scheduler.placement.request import CPU, MEMORY

from .candidates import GANG_SETS, Bound
from .index import RunningIndex
from .interpodfit import GANG_RULE_PODS, GangInterPodFit, InterPodFit
from .model import PreemptionSettings, Preemptor
from .nominations import LastHold, Nominations

__all__ = ["TRIES", "starvation_nodes", "take_hold", "with_claimed_gpus"]

TRIES = 64
"""Nodes (or node-set widenings) tried at most per call."""


def take_hold(
    book: Nominations,
    preemptor: Preemptor,
    placer: Placer,
    index: RunningIndex | None,
    now: float,
    settings: PreemptionSettings,
) -> Mapping[str, str] | None:
    """Hold nodes for starving U in `book` (its last hold's nodes if they drained and still
    serve it, else the emptiest); returns them (pod key -> node), or None when refused. U's
    pods are judged with the whole GPUs their devices decided apart take (`Preemptor.claimed`)
    as GPUs they ask: the nodes must have that room once our pods are gone."""
    preemptor = with_claimed_gpus(preemptor)
    live, last = placer.snapshot, book.previous(preemptor.key)
    drained = last is not None and _drained(live, last)
    kept = book.blocked(preemptor.priority, preemptor.key) or frozenset()
    previous = last.nodes if drained and last else None
    nodes = starvation_nodes(preemptor, placer, index, previous, kept)
    if not nodes:
        return None
    names = set(nodes.values())
    gpus = -(-sum(p.gpu_milli_total for p in preemptor.pods) // 1000)
    renew = drained and last is not None and names <= set(last.nodes.values())
    used = _used(live, sorted(names))
    mark = last.used if renew and last is not None else used
    held = book.hold(
        preemptor.key,
        preemptor.priority,
        nodes,
        gpus,
        now,
        settings,
        used=used,
        renew=renew,
        mark=mark,
    )
    return nodes if held else None


def with_claimed_gpus(preemptor: Preemptor) -> Preemptor:
    """U with each pod asking, besides its request, the whole GPUs its claims take."""
    claimed = preemptor.claimed.gpus
    if not claimed:
        return preemptor
    pods = tuple(replace(p, gpus=p.gpus + claimed.get(p.key, 0)) for p in preemptor.pods)
    return replace(preemptor, pods=pods)


def _drained(live: Snapshot, last: LastHold) -> bool:
    """Are fewer GPUs in use on the nodes of `last` than its `mark` (all still there): than
    when it began, or, for a renewal, when the hold it renewed began?"""
    names = sorted(set(last.nodes.values()))
    return all(n in live for n in names) and _used(live, names) < last.mark


def starvation_nodes(
    preemptor: Preemptor,
    placer: Placer,
    index: RunningIndex | None = None,
    previous: Mapping[str, str] | None = None,
    blocked: AbstractSet[str] = frozenset(),
) -> Mapping[str, str] | None:
    """Pod key -> node for U on the emptiest node (set) that would take it without this
    scheduler's pods (those in `index`; every pod when None), or on the nodes of its `previous`
    hold while they would; never on `blocked` nodes (held for others U must not overtake).
    None when there is none."""
    live = placer.snapshot
    if not preemptor.pods:
        return None
    rules = _LiveRules.of(preemptor, placer, index)
    if rules is None:
        return None
    kept = sorted(set((previous or {}).values()))
    if kept and all(n in live and n not in blocked for n in kept):  # sticky: the last hold's
        found = _place(preemptor, placer, kept, index, rules)
        if found is not None:
            return found
    ranked = sorted(
        (n.used_milli, n.name)
        for n in live.nodes.values()
        if n.name not in blocked and n.name not in rules.refused and _big_enough(n, preemptor.pods)
    )
    if len(preemptor.pods) == 1:
        for _used, name in ranked[:TRIES]:
            found = _place(preemptor, placer, [name], index, rules)
            if found is not None:
                return found
        return None
    return _gang_nodes(preemptor, placer, [name for _u, name in ranked], index, rules)


class _LiveRules:
    """U's inter-pod rules where the held nodes' clones cannot decide them (they read beyond
    the hostname: `interpod.decided_per_node`), judged as the victim search judges them: on
    the live snapshot, with our pods on the held nodes read as gone (`InterPodFit` for one pod,
    `GangInterPodFit` for a gang's placement). `refused`: the nodes where they refuse U however
    many of our pods leave (the first member's, for a gang: members are alike), left out of the
    nodes tried. A rule-less unit (the common case) has none of it."""

    __slots__ = ("gang", "pod", "refused")

    def __init__(
        self,
        pod: InterPodFit | None = None,
        gang: GangInterPodFit | None = None,
        refused: AbstractSet[str] = frozenset(),
    ) -> None:
        self.pod, self.gang, self.refused = pod, gang, refused

    @classmethod
    def of(
        cls, preemptor: Preemptor, placer: Placer, index: RunningIndex | None
    ) -> _LiveRules | None:
        """None: a gang whose rules read more than `GANG_RULE_PODS` running pods (no hold,
        as it does not preempt either)."""
        live, pods = placer.snapshot, preemptor.pods
        if all(decided_per_node(p, live) for p in pods):
            return _DECIDED
        first = pods[0]
        if len(pods) == 1:
            pod = InterPodFit(first, live, placer.read_memo(first))
            ours = _ours(pod.read, index)
            return cls(pod=pod, refused=refused_whatever_leaves(first, live, ours, pod.memo))
        gang = GangInterPodFit(pods, live)
        if len(gang.read) > GANG_RULE_PODS:
            return None
        return cls(gang=gang, refused=refused_whatever_leaves(first, live, _ours(gang.read, index)))

    def let(self, placed: Sequence[tuple[PodRequest, Assignment]], gone: frozenset[str]) -> bool:
        """Do the rules let U go as `placed`, the pods `gone` read as gone?"""
        if self.pod is not None:
            return all(self.pod.fits(a.node, gone) for _pod, a in placed)
        return self.gang is None or self.gang.fits(placed, gone)


_DECIDED = _LiveRules()
"""A unit whose rules (if any) the clones decide."""


def _ours(keys: AbstractSet[str], index: RunningIndex | None) -> frozenset[str]:
    """Those of `keys` that are this scheduler's pods (every one when `index` is None)."""
    if index is None:
        return frozenset(keys)
    return frozenset(k for k in keys if index.unit_of_pod(k) is not None)


def _gang_nodes(
    preemptor: Preemptor,
    placer: Placer,
    ranked: Sequence[str],
    index: RunningIndex | None,
    rules: _LiveRules,
) -> Mapping[str, str] | None:
    live = placer.snapshot
    topology = preemptor.topology
    groups: dict[str, list[str]] = {}
    for name in ranked:
        value = (
            ""
            if topology is None or not topology.required
            else live.node(name).labels.get(topology.label)
        )
        if value is not None:
            groups.setdefault(value, []).append(name)
    total = Bound.of(preemptor.pods)
    best: tuple[int, Mapping[str, str]] | None = None
    tried = 0
    for names in sorted(groups.values(), key=lambda g: _used(live, g[:1]))[:GANG_SETS]:
        cut = _capacity_cut(live, names, total)
        while cut and tried < TRIES:
            tried += 1
            found = _place(preemptor, placer, names[:cut], index, rules)
            if found is not None:
                used = _used(live, names[:cut])
                if best is None or used < best[0]:
                    best = (used, found)
                break
            if cut >= len(names):
                break
            cut = min(2 * cut, len(names))
    return None if best is None else best[1]


def _place(
    preemptor: Preemptor,
    placer: Placer,
    names: Sequence[str],
    index: RunningIndex | None,
    rules: _LiveRules,
) -> Mapping[str, str] | None:
    """Place U on clones of `names` with our pods taken off; `rules` then judge the placement
    on the live snapshot. A single pod's rules are not read on the clones at all; a gang's are
    read there first, so that members that repel or attract each other are placed as their
    rules ask among the clones (as the victim search places them)."""
    live = placer.snapshot
    small = Snapshot(_emptied(live.node(n), index) for n in names)
    small.namespace_labels = live.namespace_labels
    placed = place_gang(
        preemptor.pods,
        Placer(small, placer.scoring, memo=False, inter_pod=rules.pod is None),
        topology=preemptor.topology,
        prefer_clique=preemptor.prefer_clique,
        reasons=False,
    )
    if not placed.ok:
        return None
    if rules is not _DECIDED:
        gone = frozenset(k for n in names for k in live.node(n).pods if k not in small.node(n).pods)
        ordered = [(pod, placed.assignments[pod.key]) for pod in preemptor.pods]
        if not rules.let(ordered, gone):
            return None
    return {key: a.node for key, a in placed.assignments.items()}


def _emptied(node: NodeState, index: RunningIndex | None) -> NodeState:
    clone = node.clone()
    if index is None:
        ours = list(clone.pods)
    else:
        ours = [p for unit in index.on_node(node.name) for p in unit.pods if p in clone.pods]
    for key in ours:
        clone.remove_pod(key)
    return clone


def _big_enough(node: NodeState, pods: Sequence[PodRequest]) -> bool:
    """Could the node hold the largest pod at all (GPU count)?"""
    return node.gpu_count >= max(p.gpus for p in pods)


def _capacity_cut(live: Snapshot, names: Sequence[str], total: Bound) -> int:
    """How many of `names` it takes for their whole capacity to cover `total`; 0: never."""
    room = [0, 0, 0]
    for i, name in enumerate(names):
        node = live.node(name)
        room[0] += node.gpu_capacity_milli()
        room[1] += node.allocatable.get(CPU, 0)
        room[2] += node.allocatable.get(MEMORY, 0)
        need = (total.milli, total.cpu, total.memory)
        if all(have >= want for have, want in zip(room, need, strict=True)):
            return i + 1
    return 0


def _used(live: Snapshot, names: Sequence[str]) -> int:
    return sum(live.node(n).used_milli for n in names)
