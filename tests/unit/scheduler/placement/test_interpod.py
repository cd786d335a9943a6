"""Inter-pod rules (`interpod.refused_nodes`) and the decisions the `Placer` makes with them:
required affinity and anti-affinity (both ways), `DoNotSchedule` topology spread, with the stock
scheduler's reasons; gangs respect them member by member."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from scheduler.placement import (
    Effect,
    NodeState,
    Placer,
    PodRequest,
    Scoring,
    Snapshot,
    Taint,
    Toleration,
    default_scoring,
)
from scheduler.placement.gang import place_gang
from scheduler.placement.interpod import (
    PREFERENCE_POINTS,
    REASON_AFFINITY,
    REASON_ANTI_AFFINITY,
    REASON_EXISTING_ANTI_AFFINITY,
    REASON_SPREAD,
    REASON_SPREAD_LABEL,
    ReadMemo,
    decided_per_node,
    preference_bonus,
    refused_nodes,
    refused_whatever_leaves,
)
from scheduler.placement.pick import pick
from scheduler.placement.request import (
    InterPodPreferences,
    InterPodRules,
    LabelSelector,
    NodeSelectorRequirement,
    Operator,
    PodTerm,
    SpreadConstraint,
)
from tests.builders.interpod import HOST, ZONE, labelled, put, selector, spread, term, zoned
from tests.builders.placement import make_node, pod

PATHS = ("pick", "memo")
"""The Placer's two paths: `pick` (a candidate limit) and the verdict memo (every node ranked)."""


def scoring_for(path: str) -> Scoring:
    return Scoring() if path == "pick" else default_scoring()


@pytest.fixture(params=PATHS)
def scoring(request: pytest.FixtureRequest) -> Scoring:
    return scoring_for(request.param)


def test_no_rules_read_the_pod_nothing_refused():
    snap = zoned("a", "b")
    put(snap, "n0", labelled("web-0", app="web"))
    assert refused_nodes(labelled("web-1", app="web"), snap) is None


def test_anti_affinity_by_hostname_refuses_the_node_with_a_match(scoring):
    snap = zoned("a", "a", "b")
    put(snap, "n0", labelled("web-0", app="web"))
    rules = InterPodRules(anti_affinity=(term(app="web"),))
    incoming = labelled("web-1", rules=rules, app="web")
    assert refused_nodes(incoming, snap) == {"n0": REASON_ANTI_AFFINITY}
    decision = Placer(snap, scoring).decide(incoming)
    assert decision.node in {"n1", "n2"}


def test_anti_affinity_by_zone_refuses_the_whole_zone_and_says_so_when_nothing_is_left(scoring):
    snap = zoned("a", "a", "b")
    put(snap, "n0", labelled("web-0", app="web"))
    put(snap, "n2", labelled("web-1", app="web"))
    rules = InterPodRules(anti_affinity=(term(ZONE, app="web"),))
    decision = Placer(snap, scoring).decide(labelled("web-2", rules=rules, app="web"))
    assert decision.node is None
    assert decision.message() == (
        "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules."
    )


def test_anti_affinity_reads_only_the_terms_namespaces():
    snap = zoned("a", "b")
    put(snap, "n0", labelled("web-0", ns="other", app="web"))
    own = InterPodRules(anti_affinity=(term(app="web"),))
    assert refused_nodes(labelled("web-1", rules=own, app="web"), snap) is None
    every = InterPodRules(anti_affinity=(term(every_namespace=True, app="web"),))
    assert refused_nodes(labelled("web-1", rules=every, app="web"), snap) == {
        "n0": REASON_ANTI_AFFINITY
    }


def test_a_running_pods_anti_affinity_keeps_matching_pods_out_of_its_domain(scoring):
    snap = zoned("a", "a", "b")
    holder = labelled("db-0", rules=InterPodRules(anti_affinity=(term(ZONE, role="noisy"),)))
    put(snap, "n0", holder)
    noisy = labelled("batch", role="noisy")  # no rules of its own
    assert refused_nodes(noisy, snap) == {
        "n0": REASON_EXISTING_ANTI_AFFINITY,
        "n1": REASON_EXISTING_ANTI_AFFINITY,
    }
    placer = Placer(snap, scoring)
    assert placer.decide(noisy).node == "n2"
    assert placer.feasible(noisy) == ("n2",)
    assert placer.assignment_on(noisy, "n1") is None
    assert placer.best_assignment(labelled("quiet", role="calm")) is not None
    snap.forget(holder.key)
    assert refused_nodes(noisy, snap) is None  # the holder gone, its rule goes with it


def test_affinity_needs_a_matching_pod_in_the_domain(scoring):
    snap = zoned("a", "a", "b")
    snap.add_node(make_node("bare"))  # no zone label: refused by an affinity term on zone
    put(snap, "n1", labelled("cache-0", app="cache"))
    rules = InterPodRules(affinity=(term(ZONE, app="cache"),))
    incoming = labelled("web-0", rules=rules, app="web")
    assert refused_nodes(incoming, snap) == {"n2": REASON_AFFINITY, "bare": REASON_AFFINITY}
    assert Placer(snap, scoring).decide(incoming).node in {"n0", "n1"}


def test_affinity_with_no_match_anywhere_admits_only_the_first_of_its_own_group():
    snap = zoned("a", "b")
    rules = InterPodRules(affinity=(term(ZONE, app="web"),))
    first = labelled("web-0", rules=rules, app="web")
    assert refused_nodes(first, snap) is None
    stranger = labelled("api-0", rules=rules, app="api")
    assert refused_nodes(stranger, snap) == {"n0": REASON_AFFINITY, "n1": REASON_AFFINITY}
    put(snap, "n1", first)
    assert refused_nodes(labelled("web-1", rules=rules, app="web"), snap) == {"n0": REASON_AFFINITY}


def test_spread_refuses_the_domain_that_would_exceed_the_skew(scoring):
    snap = zoned("a", "a", "b")
    put(snap, "n0", labelled("web-0", app="web"))
    incoming = labelled("web-1", rules=spread(), app="web")
    assert refused_nodes(incoming, snap) == {"n0": REASON_SPREAD, "n1": REASON_SPREAD}
    assert Placer(snap, scoring).decide(incoming).node == "n2"
    # a pod the selector does not pick adds nothing to its own domain: skew 1 allows zone a
    other = labelled("api-0", rules=spread(), app="api")
    assert refused_nodes(other, snap) is None


def test_spread_counts_only_the_pods_namespace():
    snap = zoned("a", "b")
    put(snap, "n0", labelled("web-0", ns="other", app="web"))
    assert refused_nodes(labelled("web-1", rules=spread(), app="web"), snap) is None


def test_spread_min_domains_reads_the_smallest_count_as_zero():
    snap = zoned("a", "b")
    put(snap, "n0", labelled("web-0", app="web"))
    put(snap, "n1", labelled("web-1", app="web"))
    assert refused_nodes(labelled("web-2", rules=spread(), app="web"), snap) is None
    three = spread(min_domains=3)
    assert refused_nodes(labelled("web-2", rules=three, app="web"), snap) == {
        "n0": REASON_SPREAD,
        "n1": REASON_SPREAD,
    }


def test_spread_missing_label_and_node_inclusion_policies():
    snap = zoned("a", "b")
    tainted = Taint(key="dedicated", value="x", effect=Effect.NO_SCHEDULE)
    snap.add_node(make_node("n2", labels={ZONE: "c"}, taints=(tainted,)))
    snap.add_node(make_node("bare"))
    put(snap, "n0", labelled("web-0", app="web"))
    put(snap, "n1", labelled("web-1", app="web"))
    # zone c (tainted, empty) counts by default: zones a and b are one above its 0
    default = refused_nodes(labelled("web-2", rules=spread(), app="web"), snap)
    assert default == {"bare": REASON_SPREAD_LABEL, "n0": REASON_SPREAD, "n1": REASON_SPREAD}
    honoured = refused_nodes(labelled("web-2", rules=spread(honor_taints=True), app="web"), snap)
    assert honoured == {"bare": REASON_SPREAD_LABEL}
    # the node affinity (here a selector on zone a or b) drops zone c the same way
    pinned = pod(
        "default/web-2",
        namespace="default",
        labels={"app": "web"},
        inter_pod=spread(),
        node_selector={"tier": "x"},
        tolerations=(Toleration(key="dedicated", operator="Exists"),),
    )
    ignored = pod(
        "default/web-2",
        namespace="default",
        labels={"app": "web"},
        inter_pod=spread(honor_affinity=False),
        node_selector={"tier": "x"},
    )
    assert refused_nodes(pinned, snap) == {"bare": REASON_SPREAD_LABEL}
    assert refused_nodes(ignored, snap) == {
        "bare": REASON_SPREAD_LABEL,
        "n0": REASON_SPREAD,
        "n1": REASON_SPREAD,
    }


def test_resources_are_reported_before_inter_pod_rules(scoring):
    snap = zoned("a", "b")
    put(snap, "n0", labelled("web-0", app="web"))
    snap.assume_on(PodRequest(key="default/eat", gpus=8), "n1")
    rules = InterPodRules(anti_affinity=(term(app="web"),))
    decision = Placer(snap, scoring).decide(labelled("web-1", rules=rules, app="web"))
    assert decision.message() == (
        "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, "
        "1 node(s) didn't match pod anti-affinity rules."
    )
    snap.assume_on(PodRequest(key="default/eat-more", gpus=7), "n0")
    decision = Placer(snap, scoring).decide(labelled("web-1", rules=rules, app="web"))
    assert decision.message() == "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."


def test_a_gang_with_anti_affinity_on_itself_takes_one_node_per_member(scoring):
    snap = zoned("a", "a", "b", "b")
    rules = InterPodRules(anti_affinity=(term(job="train"),))
    members = [labelled(f"train-{i}", rules=rules, job="train") for i in range(4)]
    placed = place_gang(members, Placer(snap, scoring))
    assert placed.ok
    assert len({a.node for a in placed.assignments.values()}) == 4
    five = [*members, labelled("train-4", rules=rules, job="train")]
    assert not place_gang(five, Placer(snap, scoring)).ok


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    zones=st.lists(st.sampled_from("abc"), min_size=1, max_size=6),
    arrivals=st.lists(st.sampled_from(("web", "api")), min_size=1, max_size=14),
    skew=st.integers(1, 2),
    key=st.sampled_from((HOST, ZONE)),
    path=st.sampled_from(PATHS),
)
def test_spread_placements_never_exceed_the_skew(zones, arrivals, skew, key, path):
    """Pods that spread over `key` with `max_skew` are placed one by one: after each, the
    selected pods' counts over the domains differ by at most the skew, and a pod is refused
    only when every node would exceed it."""
    snap = zoned(*zones)
    placer = Placer(snap, scoring_for(path))
    domains = {snap.nodes[n].labels[key] for n in snap.names()}
    for i, app in enumerate(arrivals):
        rules = spread(key, skew)
        incoming = labelled(f"p{i}", rules=rules, gpus=0, app=app)
        decision = placer.decide(incoming)
        counts = _counts(snap, key, domains)
        if decision.assignment is None:
            assert all(counts[d] + (app == "web") - min(counts.values()) > skew for d in domains)
            continue
        snap.assume(incoming, decision.assignment)
        after = _counts(snap, key, domains)
        before = max(counts.values()) - min(counts.values())
        assert max(after.values()) - min(after.values()) <= max(skew, before)


def _counts(snap: Snapshot, key: str, domains: set[str]) -> Counter[str]:
    counts: Counter[str] = Counter(dict.fromkeys(domains, 0))
    for node in snap.nodes.values():
        for request, _assignment in node.pods.values():
            if request.labels.get("app") == "web":
                counts[node.labels[key]] += 1
    return counts


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.integers(1, 5),
    arrivals=st.lists(st.sampled_from(("web", "db", "batch")), min_size=1, max_size=12),
    gpus=st.integers(0, 4),
    path=st.sampled_from(PATHS),
)
def test_anti_affinity_both_ways_never_shares_a_node(nodes, arrivals, gpus, path):
    """`web` pods refuse a node with another `web`; `db` pods refuse one with `batch`, and
    nothing else: after any arrivals no node holds two `web` pods or a `db` beside a `batch`,
    and a refused pod had no node allowed by both directions that fits."""
    snap = zoned(*("a" * nodes))
    placer = Placer(snap, scoring_for(path))
    for i, app in enumerate(arrivals):
        rules = {
            "web": InterPodRules(anti_affinity=(term(app="web"),)),
            "db": InterPodRules(anti_affinity=(term(app="batch"),)),
        }.get(app)
        incoming = pod(
            f"default/p{i}", namespace="default", labels={"app": app}, inter_pod=rules, gpus=gpus
        )
        decision = placer.decide(incoming)
        if decision.assignment is not None:
            snap.assume(incoming, decision.assignment)
    for node in snap.nodes.values():
        apps = Counter(request.labels.get("app") for request, _a in node.pods.values())
        assert apps["web"] <= 1
        assert not (apps["db"] and apps["batch"])


@pytest.mark.parametrize("memo", [True, False])
def test_placer_paths_agree_with_refusals(memo, scoring):
    snap = zoned("a", "a", "b")
    put(snap, "n0", labelled("web-0", app="web"))
    incoming = labelled("web-1", rules=InterPodRules(anti_affinity=(term(app="web"),)), app="web")
    placer = Placer(snap, scoring, memo=memo)
    assert placer.feasible(incoming) == ("n1", "n2")
    assert placer.best_assignment(incoming) is not None
    assert placer.best_assignment(incoming).node == placer.decide(incoming).node


def test_only_hostname_anti_affinity_is_decided_per_node():
    snap = zoned("a", "b")
    host = labelled("h", rules=InterPodRules(anti_affinity=(term(app="web"),)), app="web")
    zone = labelled("z", rules=InterPodRules(anti_affinity=(term(ZONE, app="web"),)), app="web")
    near = labelled("n", rules=InterPodRules(affinity=(term(app="web"),)), app="web")
    assert decided_per_node(labelled("plain", app="web"), snap)
    assert decided_per_node(host, snap)
    assert not decided_per_node(zone, snap)
    assert not decided_per_node(near, snap)
    assert not decided_per_node(labelled("s", rules=spread(HOST), app="web"), snap)
    put(snap, "n0", zone)  # a running pod's zone term now reads every `web` pod
    assert not decided_per_node(labelled("plain", app="web"), snap)
    assert decided_per_node(labelled("other", app="db"), snap)


# -- preferences ---------------------------------------------------------------------------------


def preferring(key: str, prefs: InterPodPreferences, *, gpus: int = 1, **labels: str):
    return pod(f"default/{key}", namespace="default", labels=labels, preferences=prefs, gpus=gpus)


def test_preferred_anti_affinity_spreads_replicas_that_binpacking_would_stack():
    snap = zoned("a", "a", "b")
    prefs = InterPodPreferences(anti_affinity=((100, term(app="web")),))
    placer = Placer(snap, default_scoring())
    nodes = []
    for i in range(4):
        incoming = preferring(f"web-{i}", prefs, app="web")
        decision = placer.decide(incoming)
        assert decision.assignment is not None
        snap.assume(incoming, decision.assignment)
        nodes.append(decision.node)
    assert sorted(nodes[:3]) == ["n0", "n1", "n2"]  # one a node while nodes without one remain


def test_binpacking_alone_stacks_what_the_preference_spreads():
    snap = zoned("a", "a", "b")
    placer = Placer(snap, default_scoring())
    nodes = set()
    for i in range(3):
        incoming = labelled(f"web-{i}", app="web")
        decision = placer.decide(incoming)
        assert decision.assignment is not None
        snap.assume(incoming, decision.assignment)
        nodes.add(decision.node)
    assert len(nodes) == 1


def relative(bonus: dict[str, float] | None, snap: Snapshot) -> dict[str, float]:
    """Each node's bonus above the lowest (what ranking reads: a shift on every node is none)."""
    assert bonus is not None
    assert snap.names()
    every = {name: bonus.get(name, 0.0) for name in snap.names()}
    low = min(every.values())
    return {name: value - low for name, value in every.items()}


def test_preference_bonus_scales_weights_and_spread_counts():
    snap = zoned("a", "a", "b")
    put(snap, "n0", labelled("cache-0", app="cache"))
    put(snap, "n0", labelled("cache-1", app="cache"))
    put(snap, "n2", labelled("cache-2", app="cache"))
    near = InterPodPreferences(affinity=((10, term(ZONE, app="cache")),))
    # zone a holds two cache pods (20), zone b one (10): the best gains the whole range
    bonus = preference_bonus(preferring("web", near, app="web"), snap)
    assert relative(bonus, snap) == {"n0": PREFERENCE_POINTS, "n1": PREFERENCE_POINTS, "n2": 0}
    snap.add_node(make_node("n3", labels={HOST: "n3", ZONE: "c"}))  # zone c: none, the lowest
    bonus = preference_bonus(preferring("web", near, app="web"), snap)
    assert relative(bonus, snap) == {
        "n0": PREFERENCE_POINTS,
        "n1": PREFERENCE_POINTS,
        "n2": PREFERENCE_POINTS / 2,
        "n3": 0,
    }
    away = InterPodPreferences(anti_affinity=((10, term(ZONE, app="cache")),))
    bonus = preference_bonus(preferring("web", away, app="web"), snap)
    assert relative(bonus, snap) == {
        "n0": 0,
        "n1": 0,
        "n2": PREFERENCE_POINTS / 2,
        "n3": PREFERENCE_POINTS,
    }
    assert bonus is not None
    assert "n3" not in bonus  # only nodes near a selected pod are named
    soft = InterPodPreferences(
        spread=(SpreadConstraint(max_skew=1, topology_key=ZONE, selector=selector(app="cache")),)
    )
    snap.add_node(make_node("bare"))
    bonus = preference_bonus(preferring("c", soft, app="cache"), snap)
    assert relative(bonus, snap) == {
        "n0": 0.0,
        "n1": 0.0,
        "n2": PREFERENCE_POINTS / 2,
        "n3": PREFERENCE_POINTS,
        "bare": 0.0,
    }  # the fewest in the domain gain the most; the node without the zone label nothing
    assert preference_bonus(labelled("plain", app="x"), snap) is None


def test_running_pods_terms_weigh_on_the_pods_they_select():
    """A running pod that prefers to keep `batch` pods away keeps a plain `batch` pod off its
    node, where the shipped scoring alone would put it beside it (its GPUs already in use). (A
    scoring with the used-node tier ranks that tier first, preferences or not.)"""
    scoring = default_scoring()
    snap = zoned("a", "a")
    quiet = InterPodPreferences(anti_affinity=((100, term(app="batch")),))
    holder = pod("default/quiet", namespace="default", labels={"app": "quiet"}, preferences=quiet)
    put(snap, "n0", replace(holder, gpus=4))
    batch = labelled("batch-0", app="batch")
    assert relative(preference_bonus(batch, snap), snap) == {"n0": 0, "n1": PREFERENCE_POINTS}
    assert Placer(snap, scoring).decide(batch).node == "n1"
    assert Placer(snap, scoring).decide(labelled("other", app="web")).node == "n0"
    snap.forget(holder.key)
    assert preference_bonus(batch, snap) is None  # gone with the pod


# -- against a plain reading of the stock semantics, on random clusters and rules ---------------

_KEYS = ("app", "tier")
_VALUES = ("x", "y", "z")


@st.composite
def selectors(draw: st.DrawFn) -> LabelSelector | None:
    if draw(st.booleans()) and draw(st.booleans()):
        return None
    requirements = []
    for _ in range(draw(st.integers(0, 2))):
        key = draw(st.sampled_from(_KEYS))
        op = draw(st.sampled_from(list(Operator)[:4]))  # In, NotIn, Exists, DoesNotExist
        values = (
            tuple(draw(st.sets(st.sampled_from(_VALUES), min_size=1)))
            if op in (Operator.IN, Operator.NOT_IN)
            else ()
        )
        requirements.append(NodeSelectorRequirement(key=key, operator=op, values=values))
    return LabelSelector(requirements=tuple(requirements))


NS_LABELS = {"default": {"team": "x"}, "b": {"team": "y"}}
"""The namespaces' labels of the property tests' snapshots (what a `namespaceSelector` reads)."""


@st.composite
def terms(draw: st.DrawFn) -> PodTerm:
    namespaces = draw(
        st.sampled_from((None, frozenset({"default"}), frozenset({"b"}), frozenset()))
    )
    chosen = None
    if namespaces is not None and draw(st.booleans()):
        team = draw(st.sampled_from("xyz"))
        requirement = NodeSelectorRequirement(key="team", operator=Operator.IN, values=(team,))
        chosen = LabelSelector(requirements=(requirement,))
    elif namespaces == frozenset():
        namespaces = frozenset({"default"})
    key = draw(st.sampled_from((HOST, ZONE)))
    return PodTerm(
        selector=draw(selectors()),
        namespaces=namespaces,
        topology_key=key,
        namespace_selector=chosen,
    )


@st.composite
def rules(draw: st.DrawFn) -> InterPodRules | None:
    if draw(st.booleans()):
        return None
    spread = tuple(
        SpreadConstraint(
            max_skew=draw(st.integers(1, 2)),
            topology_key=draw(st.sampled_from((HOST, ZONE))),
            selector=draw(selectors()),
            min_domains=draw(st.integers(1, 4)),
            honor_taints=draw(st.booleans()),
        )
        for _ in range(draw(st.integers(0, 1)))
    )
    return InterPodRules(
        affinity=tuple(draw(st.lists(terms(), max_size=2))),
        anti_affinity=tuple(draw(st.lists(terms(), max_size=2))),
        spread=spread,
    )


@st.composite
def pods(draw: st.DrawFn, key: str) -> PodRequest:
    labels = draw(st.dictionaries(st.sampled_from(_KEYS), st.sampled_from(_VALUES), max_size=2))
    namespace = draw(st.sampled_from(("default", "b")))
    preferences = None
    if draw(st.booleans()):
        weighted = st.tuples(st.integers(1, 100), terms())
        preferences = InterPodPreferences(
            affinity=tuple(draw(st.lists(weighted, max_size=2))),
            anti_affinity=tuple(draw(st.lists(weighted, max_size=2))),
            spread=tuple(
                SpreadConstraint(
                    max_skew=1,
                    topology_key=draw(st.sampled_from((HOST, ZONE))),
                    selector=draw(selectors()),
                    honor_taints=draw(st.booleans()),
                )
                for _ in range(draw(st.integers(0, 2)))
            ),
        )
    return pod(
        f"{namespace}/{key}",
        namespace=namespace,
        labels=labels,
        inter_pod=draw(rules()),
        preferences=preferences,
        gpus=0,
    )


def _picks(term: PodTerm, pod: PodRequest) -> bool:
    """The stock reading of a term: its selector picks the pod's labels, in a namespace it lists,
    or (none listed: `None` is every one) whose labels its namespace selector matches."""
    if term.selector is None or not term.selector.matches(pod.labels):
        return False
    if term.namespaces is None or pod.namespace in term.namespaces:
        return True
    chosen = term.namespace_selector
    return chosen is not None and chosen.matches(NS_LABELS.get(pod.namespace, {}))


def _reference(
    incoming: PodRequest, snap: Snapshot, gone: frozenset[str] = frozenset()
) -> dict[str, str]:
    """The stock filters' verdicts read straight off the documentation, node by node, the pods
    `gone` aside."""
    placed = [
        (other, node)
        for node in snap.nodes.values()
        for other, _a in node.pods.values()
        if other.key != incoming.key and other.key not in gone
    ]
    out: dict[str, str] = {}
    for name, node in snap.nodes.items():
        reason = (
            _spread_reason(incoming, node, snap, placed)
            or _affinity_reason(incoming, node, placed)
            or _anti_reason(incoming, node, placed)
        )
        if reason is not None:
            out[name] = reason
    return out


def _same(node: NodeState, other: NodeState, key: str) -> bool:
    return key in node.labels and other.labels.get(key) == node.labels[key]


def _spread_reason(incoming, node, snap, placed) -> str | None:
    constraints = (incoming.inter_pod or InterPodRules()).spread
    keys = {c.topology_key for c in constraints}
    if not keys <= node.labels.keys():
        return REASON_SPREAD_LABEL
    for c in constraints:
        counting = [
            n
            for n in snap.nodes.values()
            if keys <= n.labels.keys()
            and not (
                c.honor_taints and any(t.effect is not Effect.PREFER_NO_SCHEDULE for t in n.taints)
            )
        ]
        counts = {n.labels[c.topology_key]: 0 for n in counting}
        for other, other_node in placed:
            if (
                other_node in counting
                and c.selector is not None
                and other.namespace == incoming.namespace
                and c.selector.matches(other.labels)
            ):
                counts[other_node.labels[c.topology_key]] += 1
        low = min(counts.values()) if len(counts) >= c.min_domains else 0
        own = int(c.selector is not None and c.selector.matches(incoming.labels))
        if counts.get(node.labels[c.topology_key], 0) + own - low > c.max_skew:
            return REASON_SPREAD
    return None


def _affinity_reason(incoming, node, placed) -> str | None:
    affinity = (incoming.inter_pod or InterPodRules()).affinity
    if not affinity:
        return None
    if not all(t.topology_key in node.labels for t in affinity):
        return REASON_AFFINITY
    matching = [n for o, n in placed if all(_picks(t, o) for t in affinity)]
    if any(t.topology_key in n.labels for n in matching for t in affinity):  # a pair counted
        near = all(any(_same(node, n, t.topology_key) for n in matching) for t in affinity)
        return None if near else REASON_AFFINITY
    return None if all(_picks(t, incoming) for t in affinity) else REASON_AFFINITY


def _anti_reason(incoming, node, placed) -> str | None:
    own = (incoming.inter_pod or InterPodRules()).anti_affinity
    if any(_picks(t, o) and _same(node, n, t.topology_key) for t in own for o, n in placed):
        return REASON_ANTI_AFFINITY
    if any(
        _picks(t, incoming) and _same(node, n, t.topology_key)
        for o, n in placed
        if o.inter_pod is not None
        for t in o.inter_pod.anti_affinity
    ):
        return REASON_EXISTING_ANTI_AFFINITY
    return None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), zones=st.lists(st.sampled_from("ab"), min_size=1, max_size=4))
def test_refusals_match_a_plain_reading_of_the_rules(data, zones):
    snap = zoned(*zones)
    if data.draw(st.booleans()):
        snap.add_node(make_node("bare"))  # no hostname or zone label
    if data.draw(st.booleans()):
        tainted = Taint(key="dedicated", value="x", effect=Effect.NO_SCHEDULE)
        snap.add_node(make_node("tainted", labels={HOST: "tainted", ZONE: "a"}, taints=(tainted,)))
    snap.namespace_labels.update(NS_LABELS)
    names = snap.names()
    for i in range(data.draw(st.integers(0, 8))):
        snap.assume_on(data.draw(pods(f"run-{i}")), data.draw(st.sampled_from(names)))
    if data.draw(st.booleans()):  # the label index built, then kept through changes
        snap.pods_labelled("app")
        snap.assume_on(data.draw(pods("late")), data.draw(st.sampled_from(names)))
        if data.draw(st.booleans()):
            snap.forget("default/late")
            snap.forget("b/late")
    incoming = data.draw(pods("incoming"))
    assert (refused_nodes(incoming, snap) or {}) == _reference(incoming, snap)
    found = relative(preference_bonus(incoming, snap) or {}, snap)
    expected = relative(_reference_bonus(incoming, snap), snap)
    assert found == pytest.approx(expected)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), zones=st.lists(st.sampled_from("ab"), min_size=1, max_size=4))
def test_what_if_pods_leave_reads_as_if_they_had_never_run(data, zones):
    """The victim search's two readings: `gone` pods are read as absent; and a node is refused
    whatever its own pods among the leaving ones do exactly when spread or anti-affinity
    refuse it with all of them gone, or affinity as things stand (the pod never the first of
    its group here)."""
    snap = zoned(*zones)
    snap.namespace_labels.update(NS_LABELS)
    names = snap.names()
    for i in range(data.draw(st.integers(0, 8))):
        snap.assume_on(data.draw(pods(f"run-{i}")), data.draw(st.sampled_from(names)))
    running = sorted(k for node in snap.nodes.values() for k in node.pods)
    gone = frozenset(data.draw(st.sets(st.sampled_from(running))) if running else ())
    incoming = data.draw(pods("incoming"))
    assert (refused_nodes(incoming, snap, gone) or {}) == _reference(incoming, snap, gone)
    matches = ReadMemo()  # what the rules read, kept between two readings
    assert (refused_nodes(incoming, snap, frozenset(), matches) or {}) == _reference(incoming, snap)
    assert (refused_nodes(incoming, snap, gone, matches) or {}) == _reference(incoming, snap, gone)
    rules_ = incoming.inter_pod or InterPodRules()
    assume(not rules_.affinity or not all(_picks(t, incoming) for t in rules_.affinity))
    named = refused_whatever_leaves(incoming, snap, gone)
    assert refused_whatever_leaves(incoming, snap, gone, matches) == named  # the memo's reading
    everyone = [(o, n) for n in snap.nodes.values() for o, _a in n.pods.values()]
    for name, node in snap.nodes.items():
        stay = [(o, n) for o, n in everyone if n is not node or o.key not in gone]
        refused = (
            _spread_reason(incoming, node, snap, stay)
            or _affinity_reason(incoming, node, everyone)
            or _anti_reason(incoming, node, stay)
        )
        assert (name in named) == (refused is not None), name


def _weighing_terms(other: PodRequest) -> list[tuple[int, PodTerm]]:
    """A running pod's terms that weigh on the pods they select, with their signed weights."""
    found = [(1, t) for t in (other.inter_pod or InterPodRules()).affinity]
    prefs = other.preferences or InterPodPreferences()
    found += [(w, t) for w, t in prefs.affinity]
    found += [(-w, t) for w, t in prefs.anti_affinity]
    return found


def _reference_bonus(incoming: PodRequest, snap: Snapshot) -> dict[str, float]:
    """The stock scores, node by node: each component scaled to 0..PREFERENCE_POINTS."""
    prefs = incoming.preferences or InterPodPreferences()
    placed = [
        (o, n) for n in snap.nodes.values() for o, _a in n.pods.values() if o.key != incoming.key
    ]
    total = dict.fromkeys(snap.names(), 0.0)
    raw = {
        name: sum(
            sign * w * sum(1 for o, n in placed if _picks(t, o) and _same(node, n, t.topology_key))
            for sign, weighted in ((1, prefs.affinity), (-1, prefs.anti_affinity))
            for w, t in weighted
        )
        + sum(
            w
            for o, n in placed
            for w, t in _weighing_terms(o)
            if _picks(t, incoming) and _same(node, n, t.topology_key)
        )
        for name, node in snap.nodes.items()
    }
    low, high = min(raw.values()), max(raw.values())
    for name in total:
        total[name] += PREFERENCE_POINTS * (raw[name] - low) / (high - low) if high > low else 0
    if prefs.spread:
        keys = {c.topology_key for c in prefs.spread}
        labelled = {name for name, node in snap.nodes.items() if keys <= node.labels.keys()}
        raw = {}
        for name in labelled:
            node = snap.nodes[name]
            raw[name] = 0.0
            for c in prefs.spread:
                for o, n in placed:
                    counted = n.name in labelled and not (
                        c.honor_taints
                        and any(t.effect is not Effect.PREFER_NO_SCHEDULE for t in n.taints)
                    )
                    if (
                        counted
                        and _same(node, n, c.topology_key)
                        and c.selector is not None
                        and o.namespace == incoming.namespace
                        and c.selector.matches(o.labels)
                    ):
                        raw[name] += 1
        low, high = min(raw.values(), default=0), max(raw.values(), default=0)
        for name in labelled:
            total[name] += PREFERENCE_POINTS * (
                (high - raw[name]) / (high - low) if high > low else 1
            )
    return total


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), size=st.integers(8, 24))
def test_the_placer_decides_preferences_as_pick_does(data, size):
    """The Placer scores the few nodes a preference names one by one beside its memo's best of
    the rest: the same node and score as `pick` ranking every node with the bonus."""
    zones = "ab"
    snap = Snapshot(
        make_node(
            f"n{i:02d}",
            gpus=data.draw(st.sampled_from((0, 4, 8))),
            labels={HOST: f"n{i:02d}", ZONE: zones[i % 2]},
        )
        for i in range(size)
    )
    snap.namespace_labels.update(NS_LABELS)
    names = snap.names()
    for i in range(data.draw(st.integers(0, 10))):
        snap.assume_on(data.draw(pods(f"run-{i}")), data.draw(st.sampled_from(names)))
    incoming = replace(data.draw(pods("incoming")), gpus=data.draw(st.integers(0, 2)))
    scoring = Scoring.from_weights(
        {"binpack": 1.0, "topology": 1.0}, prefer_used_nodes=False, candidate_limit=0
    )
    decided = Placer(snap, scoring).decide(incoming)  # the memo's path
    expected = pick(
        incoming,
        snap,
        scoring,
        refused=refused_nodes(incoming, snap),
        bonus=preference_bonus(incoming, snap),
    )
    assert decided.node == expected.node
    assert decided.score == pytest.approx(expected.score)
    assert (decided.assignment is None) == (expected.assignment is None)
