"""Inter-pod rules: which nodes a pod's required affinity, anti-affinity and topology spread
constraints refuse, and which the anti-affinity of pods already running refuses it, with the
stock scheduler's reasons (the `InterPodAffinity` and `PodTopologySpread` filters).

`refused_nodes` reads the snapshot's pods (bound and assumed, a gang's earlier members too) and
their `namespace` and `labels`. It is None when no rule reads the pod: then nothing is refused
and the `Placer` keeps its memo. The snapshot keeps the running pods' anti-affinity terms
(`Snapshot.anti_affinity_terms`), so a pod that has no rules of its own costs a look at each
distinct term. A pod with rules costs a pass over the nodes and over the pods its selectors may
pick: the snapshot's label index (`Snapshot.pods_labelled`) names them for a selector with an
`In` or `Exists` requirement; any other selector reads every pod, as the stock scheduler's
PreFilter does.

Semantics (as kube-scheduler 1.34):
- existing anti-affinity: a running pod's term that selects the pod refuses every node in that
  pod's domain of the term's key (symmetry);
- affinity: a node must carry every term's key, and each term's domain there must hold a pod
  that matches all the terms; when no pod anywhere matches them all, a pod that matches its own
  terms goes anywhere that carries the keys (the first of a group);
- anti-affinity: a node whose domain of a term's key holds a pod the term selects is refused;
  a node without the key is not;
- spread (`DoNotSchedule` only): a node must carry every constraint's key; the pods the
  constraint selects in the pod's namespace are counted per domain over the nodes that count
  (`SpreadConstraint`); a node is refused when its domain's count, plus one if the pod matches
  the selector itself, exceeds the smallest domain count by more than `max_skew`.

The same terms weigh in scores (`preference_bonus`): the pod's preferred ones and
`ScheduleAnyway` constraints, and the running pods' preferred and required affinity terms that
select it (`Snapshot.weighed_terms`).

A node refused by several rules shows the first reason in the stock filters' order: spread,
affinity, anti-affinity, existing anti-affinity. The pod being decided is never counted (it may be
assumed already, as a gang's member placed again).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet

from .filters import affinity_accepts, untolerated_taint
from .node import NodeState
from .request import LabelSelector, Operator, PodRequest, PodTerm, SpreadConstraint
from .snapshot import Snapshot

__all__ = [
    "HOSTNAME",
    "PREFERENCE_POINTS",
    "REASON_AFFINITY",
    "REASON_ANTI_AFFINITY",
    "REASON_EXISTING_ANTI_AFFINITY",
    "REASON_SPREAD",
    "REASON_SPREAD_LABEL",
    "ReadMemo",
    "decided_per_node",
    "pods_read",
    "preference_bonus",
    "refused_nodes",
    "refused_whatever_leaves",
]

REASON_AFFINITY = "node(s) didn't match pod affinity rules"
REASON_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
REASON_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
REASON_SPREAD = "node(s) didn't match pod topology spread constraints"
REASON_SPREAD_LABEL = f"{REASON_SPREAD} (missing required label)"

_Domain = tuple[str, str]  # (topology key, value)
HOSTNAME = "kubernetes.io/hostname"
"""The node label whose domains are single nodes."""
PREFERENCE_POINTS = 1000.0
"""What the best node for a pod's preferred terms, and again for its `ScheduleAnyway`
constraints, gains over the worst: as much as the fragmentation score's whole range (weight 10
× 100), so a preference decides unless packing differs by as much."""


class ReadMemo:
    """What one pod's rules read of a snapshot that does not change meanwhile, kept by a caller
    that asks `refused_nodes` of that pod again and again with other pods gone (the victim
    search): what each selector matches (the running pods, each with its node), and each spread
    constraint's count per domain with where each pod counted is (domain, node)."""

    __slots__ = ("matches", "tallies")

    def __init__(self) -> None:
        self.matches: dict[LabelSelector, list[tuple[PodRequest, NodeState]]] = {}
        self.tallies: dict[SpreadConstraint, _Tally] = {}


_Tally = tuple[dict[str, int], dict[str, tuple[str, str]]]
"""A spread constraint's count per domain value, and each pod counted -> (its domain, its node)."""


def refused_nodes(
    pod: PodRequest,
    snapshot: Snapshot,
    gone: AbstractSet[str] = frozenset(),
    memo: ReadMemo | None = None,
) -> dict[str, str] | None:
    """Node name -> the reason inter-pod rules refuse `pod` there; None when no rule reads
    `pod` or none refuses a node (every node is as `filter_node` says). `gone`: keys of pods
    read as if they had left (the victim search's what-if); `memo`: what `pod`'s rules read
    before, kept (filled on the way)."""
    skip = _absent(pod.key, gone)
    return _refusals(pod, snapshot, skip, frozenset(), memo) or None


def refused_whatever_leaves(
    pod: PodRequest,
    snapshot: Snapshot,
    leaving: AbstractSet[str],
    memo: ReadMemo | None = None,
) -> set[str]:
    """The nodes where inter-pod rules refuse `pod` however many of the node's own pods among
    `leaving` (keys) leave, the pods of every other node staying (the stock scheduler's
    preemption evicts on the node it nominates). Spread and anti-affinity, the pod's and the
    running pods', are read with all of them gone (each is only lifted by a pod leaving);
    affinity as things stand (a pod leaving only takes a match away; the first of a group
    aside, when every match may leave). A node not named may still be refused for a given
    subset: affinity may need a pod that spread needs gone. `memo`: as `refused_nodes`'."""
    return set(_refusals(pod, snapshot, _absent(pod.key), leaving, memo))


def _refusals(
    pod: PodRequest,
    snapshot: Snapshot,
    skip: AbstractSet[str],
    leaving: AbstractSet[str],
    memo: ReadMemo | None,
) -> dict[str, str]:
    """Node name -> the first reason a rule refuses `pod` there, the pods `skip` aside; a node
    whose own pods among `leaving` would lift a spread or anti-affinity refusal by leaving is
    not refused by it."""
    existing = _existing_terms(pod, snapshot)
    rules = pod.inter_pod
    refused: dict[str, str] = {}
    if rules is None and not existing:
        return refused
    if rules is not None and rules.spread:
        _spread(pod, rules.spread, snapshot, refused, skip, leaving, memo)
    if rules is not None and rules.affinity:
        _affinity(pod, rules.affinity, snapshot, refused, skip, memo)
    if rules is not None and rules.anti_affinity:
        for term in rules.anti_affinity:
            found = (
                (node, other.key)
                for other, node in _matching(term.selector, snapshot, skip, memo)
                if term.in_namespaces(other, snapshot.namespace_labels)
            )
            _refuse_holding(term.topology_key, found, snapshot, refused, leaving)
    nodes = snapshot.nodes
    for term, holders in existing:
        held = ((nodes[name], key) for key, name in holders.items() if key not in skip)
        _refuse_holding(term.topology_key, held, snapshot, refused, leaving, existing=True)
    return refused


def pods_read(pod: PodRequest, snapshot: Snapshot, memo: ReadMemo | None = None) -> frozenset[str]:
    """The keys of the running pods `refused_nodes` reads for `pod`: those its terms and spread
    constraints select, and those whose anti-affinity selects it. Pods not among them leaving
    change no refusal."""
    skip = _absent(pod.key)
    read: set[str] = set()
    rules = pod.inter_pod
    if rules is not None:
        for term in (*rules.affinity, *rules.anti_affinity):
            read.update(
                o.key
                for o, _n in _matching(term.selector, snapshot, skip, memo)
                if term.in_namespaces(o, snapshot.namespace_labels)
            )
        for constraint in rules.spread:
            selector = constraint.selector
            read.update(
                other.key
                for other, _node in _matching(selector, snapshot, skip, memo)
                if other.namespace == pod.namespace
            )
    for _term, holders in _existing_terms(pod, snapshot):
        read.update(holders)
    return frozenset(read - skip)


def _absent(own: str, gone: AbstractSet[str] = frozenset()) -> frozenset[str]:
    """The pods a computation reads as absent: the pod decided (`own`), and those `gone`."""
    return frozenset((own, *gone))


def _existing_terms(pod: PodRequest, snapshot: Snapshot) -> list[tuple[PodTerm, Mapping[str, str]]]:
    """The running pods' anti-affinity terms that select `pod`, each with its holders (pod key
    -> node name)."""
    labels = snapshot.namespace_labels
    return [
        (t, holders)
        for t, holders in snapshot.anti_affinity_terms.items()
        if t.selects(pod, labels)
    ]


def _refuse_holding(
    key: str,
    found: Iterable[tuple[NodeState, str]],
    snapshot: Snapshot,
    refused: dict[str, str],
    leaving: AbstractSet[str],
    *,
    existing: bool = False,
) -> None:
    """Refuse every node of a domain of `key` that holds a pod `found` (each with its node and
    key), but a node that holds, among `leaving`, every such pod of its domain."""
    per_domain: dict[str, int] = {}
    going: dict[str, int] = {}
    for node, pod_key in found:
        value = node.labels.get(key)
        if value is not None:
            per_domain[value] = per_domain.get(value, 0) + 1
            if pod_key in leaving:
                going[node.name] = going.get(node.name, 0) + 1
    reason = REASON_EXISTING_ANTI_AFFINITY if existing else REASON_ANTI_AFFINITY
    domains = snapshot.domains(key)
    for value, count in per_domain.items():
        for name in domains[value].names:
            if going.get(name, 0) < count:
                refused.setdefault(name, reason)


def _others(node: NodeState, skip: AbstractSet[str]) -> Iterator[PodRequest]:
    for other, _assignment in node.pods.values():
        if other.key not in skip:
            yield other


def decided_per_node(pod: PodRequest, snapshot: Snapshot) -> bool:
    """Whether each node's own pods decide every inter-pod rule that reads `pod`: it has no
    rules or only anti-affinity on `HOSTNAME`, and every running pod's anti-affinity term that
    selects it is on `HOSTNAME` too. Then a snapshot of some whole nodes (the victim search's
    what-if areas) refuses `pod` on them exactly as the cluster's does."""
    rules = pod.inter_pod
    if rules is not None and (
        rules.affinity
        or rules.spread
        or any(t.topology_key != HOSTNAME for t in rules.anti_affinity)
    ):
        return False
    return all(
        term.topology_key == HOSTNAME or not term.selects(pod, snapshot.namespace_labels)
        for term in snapshot.anti_affinity_terms
    )


def _selected(
    selector: LabelSelector | None, snapshot: Snapshot, skip: AbstractSet[str]
) -> Iterator[tuple[PodRequest, NodeState]]:
    """The pods (but those `skip`ped) that may match `selector`, each with its node: those the label
    index names for its narrowest `In` or `Exists` requirement, else every pod. The caller
    still checks the whole term on each."""
    if selector is None:
        return
    narrowest: list[Mapping[str, str]] | None = None
    size = 0
    for requirement in selector.requirements:
        if requirement.operator is Operator.IN:
            values = snapshot.pods_labelled(requirement.key)
            found = [values[v] for v in requirement.values if v in values]
        elif requirement.operator is Operator.EXISTS:
            found = list(snapshot.pods_labelled(requirement.key).values())
        else:
            continue
        count = sum(len(pods) for pods in found)
        if narrowest is None or count < size:
            narrowest, size = found, count
    nodes = snapshot.nodes
    if narrowest is None:
        for node in nodes.values():
            for other in _others(node, skip):
                yield other, node
        return
    for pods in narrowest:
        for key, name in pods.items():
            if key not in skip:
                node = nodes[name]
                yield node.pods[key][0], node


def _matching(
    selector: LabelSelector | None,
    snapshot: Snapshot,
    skip: AbstractSet[str],
    memo: ReadMemo | None,
) -> Iterator[tuple[PodRequest, NodeState]]:
    """The pods (but those `skip`ped) that `selector` matches, each with its node; `memo` keeps
    each selector's between calls (None: worked out afresh)."""
    if selector is None:
        return
    found = memo.matches.get(selector) if memo is not None else None
    if found is None:
        found = [
            (other, node)
            for other, node in _selected(selector, snapshot, frozenset())
            if selector.matches(other.labels)
        ]
        if memo is not None:
            memo.matches[selector] = found
    for other, node in found:
        if other.key not in skip:
            yield other, node


def _affinity(
    pod: PodRequest,
    terms: tuple[PodTerm, ...],
    snapshot: Snapshot,
    refused: dict[str, str],
    skip: AbstractSet[str],
    memo: ReadMemo | None,
) -> None:
    held: set[_Domain] = set()
    labels = snapshot.namespace_labels
    for other, node in _matching(terms[0].selector, snapshot, skip, memo):
        if terms[0].in_namespaces(other, labels) and all(
            term.selects(other, labels) for term in terms[1:]
        ):
            for term in terms:
                value = node.labels.get(term.topology_key)
                if value is not None:
                    held.add((term.topology_key, value))
    first_of_group = not held and all(term.selects(pod, labels) for term in terms)
    keys = {term.topology_key for term in terms}
    for name in _unlabelled(snapshot, keys):
        refused.setdefault(name, REASON_AFFINITY)
    if first_of_group:
        return
    for key in keys:
        for value, domain in snapshot.domains(key).items():
            if (key, value) not in held:
                for name in domain.names:
                    refused.setdefault(name, REASON_AFFINITY)


def _unlabelled(snapshot: Snapshot, keys: AbstractSet[str]) -> list[str]:
    """The nodes that lack one of the labels `keys` (none to look for when every node is in a
    domain of each)."""
    total = len(snapshot)
    if all(sum(len(d.names) for d in snapshot.domains(k).values()) == total for k in keys):
        return []
    return [name for name, node in snapshot.nodes.items() if not keys <= node.labels.keys()]


def _spread(
    pod: PodRequest,
    constraints: tuple[SpreadConstraint, ...],
    snapshot: Snapshot,
    refused: dict[str, str],
    skip: AbstractSet[str],
    leaving: AbstractSet[str],
    memo: ReadMemo | None,
) -> None:
    """A node is refused when its domain's count, less the node's own pods among `leaving`,
    plus one if the pod matches, exceeds by more than `max_skew` the smallest count of the
    domains left (of all of them when the node's falls below it)."""
    unlabelled = set(_unlabelled(snapshot, {c.topology_key for c in constraints}))
    for name in unlabelled:
        refused.setdefault(name, REASON_SPREAD_LABEL)
    for constraint in constraints:
        going: dict[str, int] = {}
        counts = _spread_counts(pod, constraint, snapshot, unlabelled, skip, memo, leaving, going)
        least = _least_of_others(counts, constraint.min_domains)
        selector = constraint.selector
        own = 1 if selector is not None and selector.matches(pod.labels) else 0
        skew = constraint.max_skew
        for value, domain in snapshot.domains(constraint.topology_key).items():
            count = counts.get(value, 0)
            low = least(count)
            if count + own - low <= skew or count <= low:
                continue
            if not going and not unlabelled:  # the whole domain, as no node's pods leave
                refused.update(dict.fromkeys(domain.names, REASON_SPREAD))
                continue
            for name in domain.names:
                left = count - going.get(name, 0)
                if name not in unlabelled and left + own - low > skew and left > low:
                    refused.setdefault(name, REASON_SPREAD)


def _least_of_others(counts: Mapping[str, int], min_domains: int) -> Callable[[int], float]:
    """A domain's count -> the smallest count of the other domains (infinite when there is
    none); 0 while fewer domains count than `min_domains`."""
    if len(counts) < max(min_domains, 1):
        return lambda _count: 0.0
    ordered = sorted(counts.values())
    low = ordered[0]
    second = ordered[1] if len(ordered) > 1 else math.inf
    at_low = ordered.count(low)
    return lambda count: second if count == low and at_low == 1 else low


def _spread_counts(
    pod: PodRequest,
    constraint: SpreadConstraint,
    snapshot: Snapshot,
    unlabelled: set[str],
    skip: AbstractSet[str],
    memo: ReadMemo | None = None,
    leaving: AbstractSet[str] = frozenset(),
    going: dict[str, int] | None = None,
) -> dict[str, int]:
    """Domain value -> the pods `constraint` counts there, over the nodes that count: those
    carrying every constraint's key (not `unlabelled`) that its node inclusion policies keep.
    `going` gets, per node, how many of the pods counted there are `leaving`. With `memo`, the
    count without the pods skipped is worked out once, and each reading takes them from it."""
    wanted = memo is not None or bool(leaving)
    if memo is None:
        counts, where = _spread_tally(pod, constraint, snapshot, unlabelled, skip, keep=wanted)
    else:
        tally = memo.tallies.get(constraint)
        if tally is None:
            own = _absent(pod.key)
            tally = _spread_tally(pod, constraint, snapshot, unlabelled, own, memo, keep=True)
            memo.tallies[constraint] = tally
        counts, where = dict(tally[0]), tally[1]
        for key in skip:
            if key in where:
                counts[where[key][0]] -= 1
    if going is not None:
        for key in leaving:
            if key in where and key not in skip:
                node = where[key][1]
                going[node] = going.get(node, 0) + 1
    return counts


def _spread_tally(
    pod: PodRequest,
    constraint: SpreadConstraint,
    snapshot: Snapshot,
    unlabelled: set[str],
    skip: AbstractSet[str],
    memo: ReadMemo | None = None,
    *,
    keep: bool,
) -> _Tally:
    """`_spread_counts`' count, and (with `keep`, else empty) where each pod counted is."""
    nodes = snapshot.nodes
    domains = snapshot.domains(constraint.topology_key)
    by_affinity = constraint.honor_affinity and bool(pod.node_selector or pod.affinity)
    counts: dict[str, int] = {}
    counted: set[str] | None = None  # None: every node of a domain
    if by_affinity or constraint.honor_taints or unlabelled:
        counted = set()
        for value, domain in domains.items():
            for name in domain.names:
                node = nodes[name]
                if name in unlabelled or (
                    by_affinity and not affinity_accepts(pod, name, node.labels)
                ):
                    continue
                if constraint.honor_taints and untolerated_taint(pod, node) is not None:
                    continue
                counts.setdefault(value, 0)
                counted.add(name)
    else:
        counts = dict.fromkeys(domains, 0)
    where: dict[str, tuple[str, str]] = {}
    for other, node in _matching(constraint.selector, snapshot, skip, memo):
        found = node.labels.get(constraint.topology_key)
        if (
            found is not None
            and (counted is None or node.name in counted)
            and other.namespace == pod.namespace
        ):
            counts[found] += 1
            if keep:
                where[other.key] = (found, node.name)
    return counts, where


def preference_bonus(pod: PodRequest, snapshot: Snapshot) -> dict[str, float] | None:
    """Node name -> what `pod`'s preferences, and the running pods' that select it, add to its
    score there, less an amount the same on every node (a node not named: 0).

    Preferred terms, as kube-scheduler's `InterPodAffinity` score: each pod a term selects adds
    the term's weight (affinity) or takes it away (anti-affinity) on every node of its domain;
    the best node gains `PREFERENCE_POINTS` over the worst, the rest in proportion.
    `ScheduleAnyway` constraints, as `PodTopologySpread`'s: the selected pods of the pod's
    namespace in the node's domains, summed over the constraints; the fewest gain
    `PREFERENCE_POINTS` over the most, and a node without a constraint's key gains nothing
    (it ranks with the most). The running pods' terms that select `pod` weigh too, as in the
    stock score: their preferred affinity and anti-affinity by weight, their required affinity
    by `HARD_AFFINITY_WEIGHT`. Only the nodes whose domains hold such a pod are named, so the
    cost follows those pods. None when nothing weighs."""
    preferences = pod.preferences
    weighed = _held_weights(pod, snapshot)
    if preferences is None and not weighed:
        return None
    bonus: dict[str, float] = {}
    if preferences is not None:
        for sign, terms in ((1, preferences.affinity), (-1, preferences.anti_affinity)):
            for weight, term in terms:
                for name, count in _domain_counts(pod, term, snapshot).items():
                    weighed[name] = weighed.get(name, 0.0) + sign * weight * count
    if weighed:
        values = list(weighed.values())
        if len(weighed) < len(snapshot):
            values.append(0.0)  # a node no selected pod is near
        span = max(values) - min(values)
        for name, value in weighed.items():
            if span and value:
                bonus[name] = PREFERENCE_POINTS * value / span
    if preferences is not None and preferences.spread:
        _crowding_into(bonus, pod, preferences.spread, snapshot)
    return bonus


def _held_weights(pod: PodRequest, snapshot: Snapshot) -> dict[str, float]:
    """Node name -> what the running pods' terms that select `pod` weigh there: each such pod
    adds its term's signed weight on every node of its domain (`Snapshot.weighed_terms`)."""
    weighed: dict[str, float] = {}
    nodes = snapshot.nodes
    for (weight, term), holders in snapshot.weighed_terms.items():
        if not term.selects(pod, snapshot.namespace_labels):
            continue
        per_domain: dict[str, int] = {}
        for key, name in holders.items():
            value = nodes[name].labels.get(term.topology_key)
            if value is not None and key != pod.key:
                per_domain[value] = per_domain.get(value, 0) + 1
        domains = snapshot.domains(term.topology_key)
        for value, count in per_domain.items():
            for name in domains[value].names:
                weighed[name] = weighed.get(name, 0.0) + weight * count
    return weighed


def _crowding_into(
    bonus: dict[str, float],
    pod: PodRequest,
    constraints: tuple[SpreadConstraint, ...],
    snapshot: Snapshot,
) -> None:
    """Take from `bonus` what the selected pods in a node's domains cost it (the most crowded,
    and nodes without a key, `PREFERENCE_POINTS` below the least)."""
    unlabelled = set(_unlabelled(snapshot, {c.topology_key for c in constraints}))
    crowded: dict[str, float] = {}
    for constraint in constraints:
        counts = _spread_counts(pod, constraint, snapshot, unlabelled, _absent(pod.key))
        domains = snapshot.domains(constraint.topology_key)
        for where, count in counts.items():
            for name in domains[where].names if count else ():
                crowded[name] = crowded.get(name, 0.0) + count
    for name in unlabelled:
        crowded.pop(name, None)
    labelled = len(snapshot) - len(unlabelled)
    values = list(crowded.values())
    low = 0.0 if len(crowded) < labelled else min(values, default=0.0)
    span = max(values, default=0.0) - low
    for name, value in crowded.items():
        if span and value > low:
            bonus[name] = bonus.get(name, 0.0) - PREFERENCE_POINTS * (value - low) / span
    for name in unlabelled:
        bonus[name] = bonus.get(name, 0.0) - PREFERENCE_POINTS


def _domain_counts(pod: PodRequest, term: PodTerm, snapshot: Snapshot) -> dict[str, int]:
    """Node name -> the pods `term` selects in its domain (nodes with none left out)."""
    per_domain: dict[str, int] = {}
    for other, node in _selected(term.selector, snapshot, _absent(pod.key)):
        value = node.labels.get(term.topology_key)
        if value is not None and term.selects(other, snapshot.namespace_labels):
            per_domain[value] = per_domain.get(value, 0) + 1
    domains = snapshot.domains(term.topology_key)
    return {name: count for value, count in per_domain.items() for name in domains[value].names}
