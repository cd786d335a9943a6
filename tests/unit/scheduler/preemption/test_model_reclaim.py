"""Reclaim per GPU model (DESIGN §10 "Per GPU model", §11): a unit reclaims only on the nodes of
the models it is within guarantee on, a victim queue's model min is a floor, and the caller's
excluded nodes are never used."""

from __future__ import annotations

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from scheduler.placement import GPU_PRODUCT_LABEL, PodRequest
from scheduler.preemption import NoChoice, Preemptor, VictimChoice, VictimReason
from scheduler.preemption.eligibility import demand_of
from scheduler.quota import ROOT, guaranteed_models
from scheduler.quota.models import model_of_product
from tests.builders.placement import pod
from tests.builders.preemption import GPU, World, preemptor, queue, world

H100, T4 = "NVIDIA-H100-80GB-HBM3", "Tesla-T4"
PRODUCTS = {"h1": H100, "h2": H100, "t1": T4}
ON_H100 = f"{GPU}@{H100}"
ON_T4 = f"{GPU}@{T4}"


def chosen(result: VictimChoice | NoChoice) -> VictimChoice:
    assert isinstance(result, VictimChoice), result
    return result


def _nodes(w: World, choice: VictimChoice) -> set[str]:
    return {w.index.places(e.unit)[0].node for e in choice.evictions}


def _mixed(*queues: object) -> World:
    return world("h1", "h2", "t1", queues=queues, products=PRODUCTS)


def test_an_h100_min_reclaims_on_h100_nodes_even_when_t4_victims_rank_first() -> None:
    w = _mixed(queue("a", min={GPU: 8, ON_H100: 8}), queue("b"))
    w.fill("h1", 8, prefix="bh1", leaf="b", priority=5)
    w.fill("h2", 8, prefix="bh2", leaf="b", priority=5)
    w.fill("t1", 8, prefix="bt", leaf="b", priority=0)  # the cheapest victims by priority
    choice = chosen(w.find(preemptor(leaf="a", gpus=2)))
    assert _nodes(w, choice) <= {"h1", "h2"}
    assert set(choice.nodes.values()) <= {"h1", "h2"}
    assert {e.reason for e in choice.evictions} == {VictimReason.RECLAIM}


def test_a_model_min_alone_makes_a_unit_within_guarantee_on_that_model_only() -> None:
    w = _mixed(queue("a", min={ON_H100: 4}), queue("b"))
    for node in PRODUCTS:
        w.fill(node, 8, prefix=f"b{node}", leaf="b")
    choice = chosen(w.find(preemptor(leaf="a")))
    assert _nodes(w, choice) <= {"h1", "h2"}


def test_a_victim_queue_keeps_its_model_min() -> None:
    """B is at its H100 min and borrows on T4: A (a plain min) reclaims only the T4 pods,
    though B's H100 pods are cheaper."""
    w = _mixed(queue("a", min={GPU: 8}), queue("b", min={GPU: 8, ON_H100: 8}))
    w.fill("h1", 8, prefix="bh", leaf="b", priority=0)
    w.fill("t1", 8, prefix="bt", leaf="b", priority=5)
    w.fill("h2", 8, prefix="c", leaf="default", priority=9)
    choice = chosen(w.find(preemptor(leaf="a", gpus=1)))
    assert _nodes(w, choice) <= {"t1", "h2"}
    assert not any(e.unit.startswith("bh") for e in choice.evictions)


def test_with_no_reclaim_on_its_model_a_unit_still_preempts_its_own_queue_elsewhere() -> None:
    w = _mixed(queue("a", min={ON_H100: 16}), queue("b", min={ON_H100: 16}))
    w.fill("h1", 8, prefix="bh1", leaf="b")
    w.fill("h2", 8, prefix="bh2", leaf="b")  # at its min: nothing to reclaim
    w.fill("t1", 8, prefix="low", leaf="a", priority=0)
    choice = chosen(w.find(preemptor(leaf="a", priority=10)))
    assert _nodes(w, choice) == {"t1"}
    assert {e.reason for e in choice.evictions} == {VictimReason.PREEMPT}


def test_excluded_nodes_are_neither_used_nor_emptied() -> None:
    w = _mixed(queue("a"))
    for node in PRODUCTS:
        w.fill(node, 8, prefix=f"low{node}", leaf="a", priority=0)
    excluded = frozenset({"h1", "h2"})
    choice = chosen(w.find(preemptor(leaf="a", priority=10, excluded=excluded)))
    assert _nodes(w, choice) == {"t1"}
    assert set(choice.nodes.values()) == {"t1"}
    every = frozenset(PRODUCTS)
    assert isinstance(w.find(preemptor(leaf="a", priority=10, excluded=every)), NoChoice)


# -- Hypothesis ---------------------------------------------------------------------------------
def _mins(most: int) -> st.SearchStrategy[dict[str, int]]:
    """A min in GPUs: plain up to `most`, per model up to what the model has."""
    return st.fixed_dictionaries(
        {},
        optional={GPU: st.integers(0, most), ON_H100: st.integers(0, 16), ON_T4: st.integers(0, 8)},
    )


@st.composite
def worlds(draw: st.DrawFn) -> tuple[World, str, int]:
    a_min, b_min = dict(draw(_mins(24))), dict(draw(_mins(8)))  # B mostly borrows
    for spec in (a_min, b_min):  # a model min above the plain min is invalid
        if GPU in spec:
            for key in (ON_H100, ON_T4):
                spec[key] = min(spec.get(key, 0), spec[GPU])
    w = _mixed(queue("a", min=a_min), queue("b", min=b_min))
    for node in PRODUCTS:
        for i in range(draw(st.sampled_from([8, 8, 8, 7]))):  # mostly full: U must evict
            leaf = draw(st.sampled_from(["a", "b", "b", "b"]))
            w.run(
                f"{node}-{i}",
                [(node, _pod(f"ns/{node}-{i}"))],
                leaf=leaf,
                priority=draw(st.integers(0, 2)),
                started=float(i),
            )
    return w, draw(st.sampled_from([None, H100, T4])) or "", draw(st.integers(1, 4))


def _pod(key: str, product: str = "", gpus: int = 1) -> PodRequest:
    return pod(key, gpus=gpus, gpu_models=frozenset({product}) if product else frozenset())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_reclaim_victims_lie_on_models_u_is_within_guarantee_on_and_keep_model_mins(
    case: tuple[World, str, int],
) -> None:
    w, product, gpus = case
    u = Preemptor(key="u", pods=(_pod("ns/u-0", product, gpus),), leaf="a", priority=1)
    before = {q: dict(w.usage.used(q)) for q in ("a", "b", ROOT)}
    found = w.find(u)
    assert {q: dict(w.usage.used(q)) for q in ("a", "b", ROOT)} == before
    if not isinstance(found, VictimChoice):
        return
    event(f"victims: {sorted({e.reason.value for e in found.evictions})}")
    models = {model_of_product(p) for p in PRODUCTS.values()}
    if product:
        models = {product}
    within = guaranteed_models(w.tree, w.usage, "a", demand_of(u), models)
    taken: dict[str, int] = {}
    for eviction in found.evictions:
        for pod_key in eviction.pods:
            node = w.snapshot.node_of(pod_key)
            assert node is not None
            model = w.snapshot.node(node).labels[GPU_PRODUCT_LABEL]
            if eviction.reason is VictimReason.RECLAIM:
                assert model in within
                for key, qty in w.usage.charged(pod_key)[1].items():  # type: ignore[index]
                    taken[key] = taken.get(key, 0) + qty
    used_b = w.usage.used("b")
    for key, low in w.tree.specs["b"].min.items():
        if taken.get(key):
            assert used_b.get(key, 0) - taken[key] >= low
