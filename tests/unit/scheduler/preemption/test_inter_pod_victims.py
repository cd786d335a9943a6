"""The victim search for a pod whose inter-pod rules read beyond its node (zone anti-affinity,
spread, affinity, a running pod's anti-affinity over a zone): as kube-scheduler's preemption,
victims are taken on the node the pod goes to, and the rules are judged there with them gone."""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from scheduler.placement import PodRequest, Snapshot
from scheduler.placement.interpod import refused_nodes
from scheduler.placement.request import (
    InterPodRules,
    LabelSelector,
    NodeSelectorRequirement,
    Operator,
    PodTerm,
)
from scheduler.preemption import NoChoice, PreemptionSettings, Preemptor, VictimChoice
from scheduler.preemption.interpodfit import GANG_RULE_PODS
from scheduler.quota import QuotaTree
from tests.builders.interpod import ZONE, labelled, spread, term, zoned
from tests.builders.preemption import World

APART = InterPodRules(anti_affinity=(term(ZONE, app="web"),))
"""Required anti-affinity to `app=web` pods over the zone."""


def world_of(*zones: str) -> World:
    return World(zoned(*zones), QuotaTree.build(()))


def start(w: World, node: str, request: PodRequest, priority: int = 0) -> None:
    w.run(request.key, [(node, request)], priority=priority)


def fill(w: World, node: str, count: int, prefix: str, priority: int = 0) -> None:
    for i in range(count):
        start(w, node, labelled(f"{prefix}-{i}", app="batch"), priority)


def single(request: PodRequest, priority: int = 10) -> Preemptor:
    return Preemptor(key="u", pods=(request,), leaf="default", priority=priority)


def test_zone_anti_affinity_evicts_the_pod_in_the_way_on_the_node_it_goes_to() -> None:
    """n0 and n1 share zone a, where a low-priority web pod runs on n0; zone b is full of
    higher-priority work. Only evicting the web pod on n0 lets the new replica in, and it goes
    to n0 (the stock scheduler evicts on the chosen node only), with nothing else evicted."""
    w = world_of("a", "a", "b")
    start(w, "n0", labelled("web-0", app="web"))
    fill(w, "n0", 3, "batch-n0")
    fill(w, "n2", 8, "busy", priority=50)
    choice = w.find(single(labelled("web-new", rules=APART, app="web")))
    assert isinstance(choice, VictimChoice), choice
    assert choice.pods == ("default/web-0",)
    assert choice.nodes == {"default/web-new": "n0"}


def test_an_offender_on_another_node_of_the_zone_is_not_evicted_from_there() -> None:
    """The web pod runs on n1 (zone a, otherwise full of work); n0 (zone a) has room. Evicting
    on n0 cannot lift the zone's refusal, and the search does not take victims on n1 for a pod
    placed on n0: it evicts the web pod and places on n1 only if n1 then has room, else it
    goes to zone b at the cost of one batch pod there."""
    w = world_of("a", "a", "b")
    start(w, "n1", labelled("web-0", app="web", gpus=2))
    fill(w, "n1", 6, "batch-n1")
    fill(w, "n2", 8, "batch-n2")
    choice = w.find(single(labelled("web-new", rules=APART, app="web")))
    assert isinstance(choice, VictimChoice), choice
    # n1 with web-0 gone has room, but that evicts 2 GPUs; n2 costs one batch pod's GPU
    assert choice.nodes == {"default/web-new": "n2"}
    assert len(choice.pods) == 1
    assert choice.pods[0].startswith("default/batch-n2-")


def test_an_offender_of_higher_priority_leaves_no_choice() -> None:
    """Zone a holds a web pod of higher priority: evicting the low-priority pod on n1 (zone a
    too) makes room there, but the zone stays refused."""
    w = world_of("a", "a")
    start(w, "n0", labelled("web-0", app="web"), priority=50)
    fill(w, "n1", 8, "low")
    choice = w.find(single(labelled("web-new", rules=APART, app="web")))
    assert isinstance(choice, NoChoice), choice
    assert choice.reason == "preemption: evicting every eligible victim would still not fit the pod"


def test_spread_evicts_as_many_of_its_own_as_the_skew_needs_and_no_more() -> None:
    """Zone a holds two low-priority web pods, zone b none and no room (higher priority). With
    maxSkew 1 the new replica fits in zone a only once both web pods there are gone: 0 + 1 − 0."""
    w = world_of("a", "b")
    start(w, "n0", labelled("web-0", app="web"))
    start(w, "n0", labelled("web-1", app="web"))
    fill(w, "n0", 2, "batch-n0")
    fill(w, "n1", 8, "busy", priority=50)
    choice = w.find(single(labelled("web-new", rules=spread(), app="web")))
    assert isinstance(choice, VictimChoice), choice
    assert sorted(choice.pods) == ["default/web-0", "default/web-1"]
    assert choice.nodes == {"default/web-new": "n0"}


def test_the_pod_an_affinity_needs_is_given_back_and_others_evicted() -> None:
    """The api pod must share a zone with a db pod. The only db pod is the lowest-priority pod
    on n0, and zone a is full: the search must not evict it (the affinity would fail), so it
    evicts a batch pod of zone a instead, at the next priority."""
    w = world_of("a", "a", "b")
    start(w, "n0", labelled("db-0", app="db"))
    fill(w, "n0", 7, "batch-n0", priority=5)
    fill(w, "n1", 8, "batch-n1", priority=5)
    near_db = InterPodRules(affinity=(term(ZONE, app="db"),))
    choice = w.find(single(labelled("api-0", rules=near_db, app="api")))
    assert isinstance(choice, VictimChoice), choice
    assert "default/db-0" not in choice.pods
    assert len(choice.pods) == 1
    assert choice.pods[0].startswith("default/batch-n")
    assert choice.nodes["default/api-0"] in ("n0", "n1")


def test_a_running_pods_zone_anti_affinity_is_lifted_by_evicting_it() -> None:
    """A low-priority guard pod on n0 keeps web pods out of zone a (symmetry); n2 (zone b) is
    full of higher-priority work. A plain web pod evicts the guard and goes to n0."""
    w = world_of("a", "a", "b")
    guard = labelled("guard-0", rules=APART, app="guard")
    start(w, "n0", guard)
    fill(w, "n2", 8, "busy", priority=50)
    choice = w.find(single(labelled("web-new", app="web")))
    assert isinstance(choice, VictimChoice), choice
    assert choice.pods == ("default/guard-0",)
    assert choice.nodes == {"default/web-new": "n0"}


def test_a_gang_anti_affine_to_itself_over_zones_takes_one_victim_in_each_zone() -> None:
    """Two web members, each anti-affine to web over the zone: one per zone, each evicting one
    low pod there."""
    w = world_of("a", "b")
    fill(w, "n0", 8, "low")
    fill(w, "n1", 8, "low-b")
    members = tuple(labelled(f"g-{i}", rules=APART, app="web") for i in range(2))
    choice = w.find(Preemptor(key="g", pods=members, leaf="default", priority=10))
    assert isinstance(choice, VictimChoice), choice
    assert sorted(choice.nodes.values()) == ["n0", "n1"]
    assert len(choice.pods) == 2
    assert {w.snapshot.node_of(key) for key in choice.pods} == {"n0", "n1"}


def test_a_gang_evicts_the_other_jobs_pods_in_the_rack_it_takes() -> None:
    """JobSet's exclusive placement: each member is affine to its own job and anti-affine to
    other jobs over the zone. Zone a runs a low-priority job on n0 (2 pods) and nothing on n1;
    zone b is full of higher-priority work. The gang (2 × 4 GPUs) goes to zone a, and the other
    job's pods go, both of them, though n1 alone has room for one member."""
    w = world_of("a", "a", "b")
    start(w, "n0", labelled("old-0", app="train", job="old", gpus=4))
    start(w, "n0", labelled("old-1", app="train", job="old", gpus=4))
    fill(w, "n2", 8, "busy", priority=50)
    mine = term(ZONE, job="new")
    others = PodTerm(
        selector=LabelSelector(
            requirements=(
                NodeSelectorRequirement(key="job", operator=Operator.EXISTS),
                NodeSelectorRequirement(key="job", operator=Operator.NOT_IN, values=("new",)),
            )
        ),
        namespaces=frozenset({"default"}),
        topology_key=ZONE,
    )
    rules = InterPodRules(affinity=(mine,), anti_affinity=(others,))
    members = tuple(
        labelled(f"new-{i}", rules=rules, app="train", job="new", gpus=4) for i in range(2)
    )
    choice = w.find(Preemptor(key="new", pods=members, leaf="default", priority=10))
    assert isinstance(choice, VictimChoice), choice
    assert sorted(choice.pods) == ["default/old-0", "default/old-1"]
    assert set(choice.nodes.values()) <= {"n0", "n1"}


def test_a_gang_whose_zone_holds_a_higher_priority_job_evicts_nobody() -> None:
    """The members shun `app=old` over the zone. Zone a holds an old pod of higher priority on
    n0 and low pods on n1; zone b is full of higher-priority work. Evicting on n1 makes room,
    and clones of n1 alone see no old pod, but the zone stays refused: nobody is evicted."""
    w = world_of("a", "a", "b")
    start(w, "n0", labelled("old-0", app="old"), priority=50)
    fill(w, "n1", 8, "low")
    fill(w, "n2", 8, "busy", priority=50)
    shun = InterPodRules(anti_affinity=(term(ZONE, app="old"),))
    members = tuple(labelled(f"g-{i}", rules=shun, app="new") for i in range(2))
    choice = w.find(Preemptor(key="g", pods=members, leaf="default", priority=10))
    assert isinstance(choice, NoChoice), choice
    assert "would still not fit the pod group" in choice.reason


def test_a_gang_repelling_itself_takes_its_nodes_from_the_zones_in_turn() -> None:
    """Zone a's four nodes rank first by name, zone b's one last; with two candidates a search,
    sets by rank alone would hold zone a's nodes only, where the members cannot both go."""
    w = world_of("a", "a", "a", "a", "b")
    for node in ("n0", "n1", "n2", "n3", "n4"):
        fill(w, node, 8, f"low-{node}")
    members = tuple(labelled(f"g-{i}", rules=APART, app="web") for i in range(2))
    gang = Preemptor(key="g", pods=members, leaf="default", priority=10)
    choice = w.find(gang, PreemptionSettings(candidate_limit=2))
    assert isinstance(choice, VictimChoice), choice
    zones = {w.snapshot.node(node).labels[ZONE] for node in choice.nodes.values()}
    assert zones == {"a", "b"}
    assert len(choice.pods) == 2


def test_a_gang_whose_rules_read_too_many_pods_evicts_nobody_and_says_how_many() -> None:
    w = world_of("a", "b")
    for i in range(GANG_RULE_PODS + 1):  # cpu-only web pods: what counts is how many
        start(w, f"n{i % 2}", labelled(f"web-{i}", app="web", gpus=0), priority=0)
    members = tuple(labelled(f"g-{i}", rules=APART, app="web") for i in range(2))
    choice = w.find(Preemptor(key="g", pods=members, leaf="default", priority=10))
    assert isinstance(choice, NoChoice), choice
    assert choice.reason == (
        "preemption: not for a pod group whose inter-pod rules beyond kubernetes.io/hostname "
        f"read {GANG_RULE_PODS + 1} running pods (at most {GANG_RULE_PODS})"
    )


def test_the_live_snapshot_is_as_it_was_after_a_gangs_search() -> None:
    w = world_of("a", "b")
    fill(w, "n0", 8, "low")
    fill(w, "n1", 8, "low-b")
    before = {name: dict(w.snapshot.node(name).pods) for name in w.snapshot.names()}
    members = tuple(labelled(f"g-{i}", rules=APART, app="web") for i in range(2))
    w.find(Preemptor(key="g", pods=members, leaf="default", priority=10))
    after = {name: dict(w.snapshot.node(name).pods) for name in w.snapshot.names()}
    assert after == before


# -- properties ------------------------------------------------------------------------------------
def _fits_after(snapshot: Snapshot, request: PodRequest, node: str, gone: frozenset[str]) -> bool:
    """Reference: `request` fits on `node` by GPUs and inter-pod rules once `gone` have left."""
    state = snapshot.node(node)
    used = sum(p.gpus for key, (p, _a) in state.pods.items() if key not in gone)
    refused = refused_nodes(request, snapshot, gone) or {}
    return used + request.gpus <= 8 and node not in refused


@st.composite
def scenes(draw: st.DrawFn) -> tuple[World, Preemptor, frozenset[str]]:
    """Four nodes over two or three zones; pods of apps web, db, guard (a guard is anti-affine
    to web over the zone) of 1-4 GPUs at priority 0 or 50; a 1- or 2-GPU web pod at priority
    10 under zone anti-affinity to web, or spread, or affinity to db, or none; and the keys of
    the pods of priority 0."""
    zones = draw(st.lists(st.sampled_from("abc"), min_size=4, max_size=4))
    w = world_of(*zones)
    lower: set[str] = set()
    for i in range(draw(st.integers(0, 12))):
        node = f"n{draw(st.integers(0, 3))}"
        app = draw(st.sampled_from(["web", "db", "guard", "batch"]))
        rules = APART if app == "guard" else None
        request = labelled(f"{app}-{i}", rules=rules, app=app, gpus=draw(st.integers(1, 4)))
        used = sum(p.gpus for p, _a in w.snapshot.node(node).pods.values())
        priority = draw(st.sampled_from([0, 50]))
        if used + request.gpus <= 8:
            start(w, node, request, priority=priority)
            if priority == 0:
                lower.add(request.key)
    rules = draw(
        st.sampled_from([None, APART, spread(), InterPodRules(affinity=(term(ZONE, app="db"),))])
    )
    incoming = labelled("web-new", rules=rules, app="web", gpus=draw(st.integers(1, 2)))
    return w, single(incoming), frozenset(lower)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scene=scenes())
def test_a_choice_is_sound_and_one_exists_when_a_node_allows_it(
    scene: tuple[World, Preemptor, frozenset[str]],
) -> None:
    """Sound: the victims are eligible and on the node chosen, and with them gone the pod fits
    there by GPUs and by every inter-pod rule. Complete: when evicting every eligible pod on
    some node would let the pod in there, the search finds a choice."""
    w, u, lower = scene
    incoming = u.pods[0]
    snapshot = w.snapshot
    assume(not any(_fits_after(snapshot, incoming, n, frozenset()) for n in snapshot.nodes))
    choice = w.find(u)
    if isinstance(choice, VictimChoice):
        node = choice.nodes[incoming.key]
        assert set(choice.pods) <= lower
        assert all(snapshot.node_of(key) == node for key in choice.pods)
        assert _fits_after(snapshot, incoming, node, frozenset(choice.pods))
        return
    possible = [
        name
        for name, state in snapshot.nodes.items()
        if _fits_after(snapshot, incoming, name, frozenset(k for k in state.pods if k in lower))
    ]
    assert not possible, (choice, possible)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scene=scenes(), size=st.integers(2, 3))
def test_a_gangs_choice_is_sound_member_by_member(
    scene: tuple[World, Preemptor, frozenset[str]], size: int
) -> None:
    """A gang of the scene's incoming pod's shape: when the search chooses, the victims are
    eligible, and with them gone each member fits its node by GPUs and by every inter-pod rule,
    the members before it placed (read on a copy of the cluster, by the reference)."""
    w, u, lower = scene
    base = u.pods[0]
    members = tuple(
        labelled(f"g-{i}", rules=base.inter_pod, app="web", gpus=base.gpus) for i in range(size)
    )
    choice = w.find(Preemptor(key="g", pods=members, leaf="default", priority=10))
    if not isinstance(choice, VictimChoice):
        return
    assert set(choice.pods) <= lower
    copy = Snapshot(state.clone() for state in w.snapshot.nodes.values())
    for key in choice.pods:
        copy.forget(key)
    for member in members:
        node = choice.nodes[member.key]
        assert _fits_after(copy, member, node, frozenset()), (member.key, node, choice)
        copy.assume_on(member, node)
