"""Starvation holds for units whose inter-pod rules read beyond the held nodes (zone affinity,
anti-affinity, spread): the hold is judged as the victim search judges a placement, on the live
snapshot with our pods on the held nodes gone, not on clones of those nodes alone (where a rule
over a zone sees only part of the zone, and may refuse or accept a node the cluster would not).
"""

from __future__ import annotations

from scheduler.placement.request import InterPodRules
from scheduler.preemption import Preemptor, starvation_nodes
from scheduler.preemption.interpodfit import GANG_RULE_PODS
from scheduler.quota import QuotaTree
from tests.builders.interpod import ZONE, labelled, spread, term, zoned
from tests.builders.preemption import World

APART = InterPodRules(anti_affinity=(term(ZONE, app="web"),))
"""Required anti-affinity to `app=web` pods over the zone."""
NEAR_DB = InterPodRules(affinity=(term(ZONE, app="db"),))
"""Required affinity to an `app=db` pod in the zone."""


def world_of(*zones: str) -> World:
    return World(zoned(*zones), QuotaTree.build(()))


def fill(w: World, node: str, count: int, prefix: str, app: str = "batch") -> None:
    for i in range(count):
        request = labelled(f"{prefix}-{i}", app=app)
        w.run(request.key, [(node, request)])


def unit(*pods: object) -> Preemptor:
    return Preemptor(key="u", pods=tuple(pods), leaf="default", priority=10)  # type: ignore[arg-type]


def zone_of(w: World, node: str) -> str:
    return w.snapshot.node(node).labels[ZONE]


def test_a_pod_shunning_web_pods_over_the_zone_is_not_held_on_the_empty_node_of_their_zone() -> (
    None
):
    """n0 is empty, but a web pod on n1 shares its zone: held there, the pod could never
    start while that pod runs (it would not leave: it is not on the held node). The hold goes
    to n2, in zone b, the emptiest node the rule lets the pod onto; with the web pod gone, to
    n0."""
    w = world_of("a", "a", "b")
    fill(w, "n1", 1, "web", app="web")
    fill(w, "n1", 6, "batch-n1")
    fill(w, "n2", 4, "batch-n2")
    found = starvation_nodes(
        unit(labelled("new", rules=APART, app="web", gpus=8)), w.placer, w.index
    )
    assert found == {"default/new": "n2"}
    w.snapshot.forget("default/web-0")
    w.index.remove("default/web-0")
    found = starvation_nodes(
        unit(labelled("new", rules=APART, app="web", gpus=8)), w.placer, w.index
    )
    assert found == {"default/new": "n0"}  # with the web pod gone, the emptiest node serves


def test_a_pod_near_a_db_pod_of_its_zone_is_held_beside_it_not_where_it_would_go_with_it() -> None:
    """The only db pod runs on n0, the emptiest node. Held on n0, the pod would need the db
    pod gone (our pods on held nodes are read as gone), and then nothing draws it to zone a;
    n1 (zone a, fuller) keeps the db pod running beside. Judged on a clone of one node, no
    node would do: no clone but n0's holds a db pod, and n0's clone has lost it."""
    w = world_of("a", "a", "b")
    fill(w, "n0", 1, "db", app="db")
    fill(w, "n1", 3, "batch-n1")
    fill(w, "n2", 2, "batch-n2")
    want = unit(labelled("new", rules=NEAR_DB, app="web", gpus=8))
    assert starvation_nodes(want, w.placer, w.index) == {"default/new": "n1"}


def test_a_gang_spread_over_zones_is_held_across_them() -> None:
    """Two 8-GPU members spread over the zones with skew 1: the two emptiest nodes, both of
    zone a, would take them on their clones (which see zone a alone), but the cluster would
    refuse the second member there. The hold widens to both zones."""
    w = world_of("a", "a", "b", "b")
    fill(w, "n2", 1, "batch-n2")
    fill(w, "n3", 2, "batch-n3")
    members = [labelled(f"g-{i}", rules=spread(), app="web", gpus=8) for i in range(2)]
    found = starvation_nodes(unit(*members), w.placer, w.index)
    assert found is not None
    assert sorted(zone_of(w, node) for node in found.values()) == ["a", "b"]


def test_a_gang_whose_rules_read_too_many_running_pods_is_not_held() -> None:
    w = world_of("a", "b")
    for i in range(GANG_RULE_PODS + 1):  # cpu-only web pods: what counts is how many
        request = labelled(f"web-{i}", app="web", gpus=0)
        w.run(request.key, [(f"n{i % 2}", request)])
    members = [labelled(f"g-{i}", rules=APART, app="new") for i in range(2)]
    assert starvation_nodes(unit(*members), w.placer, w.index) is None
    fewer = [labelled(f"g-{i}", rules=InterPodRules(), app="new") for i in range(2)]
    assert starvation_nodes(unit(*fewer), w.placer, w.index) is not None
