"""`scheduler.placement.fgd`: fragmentation over typical pods, the FGD gradient and scores."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.placement import Assignment, GpuShare, PodRequest
from scheduler.placement.fgd import (
    FgdScore,
    Fragmentation,
    NodeView,
    PodShape,
    TypicalPod,
    node_view,
    paper_score,
    pod_shape,
    typical_pods,
)
from scheduler.placement.filters import choose_devices
from scheduler.placement.fragscores import bestfit_score, least_allocated_score
from scheduler.sim.cluster import Cluster, NodeSpec

GIB = 1 << 30
SHARE_600 = PodShape(cpu_milli=4000, gpu_milli=600, gpus=1)
WHOLE_1 = PodShape(cpu_milli=8000, gpu_milli=1000, gpus=1)
CPU_ONLY = PodShape(cpu_milli=16000)


def frag(*typical: tuple[PodShape, float]) -> Fragmentation:
    return Fragmentation([TypicalPod(shape, weight) for shape, weight in typical])


def test_typical_pods_cover_the_most_frequent_shapes_and_renormalise():
    shapes = [WHOLE_1] * 60 + [SHARE_600] * 30 + [CPU_ONLY] * 6 + [PodShape(1000)] * 4
    typical = typical_pods(shapes, coverage=0.9)
    assert [t.shape for t in typical] == [WHOLE_1, SHARE_600]
    assert [round(t.weight, 4) for t in typical] == [round(60 / 90, 4), round(30 / 90, 4)]
    assert math.isclose(sum(t.weight for t in typical), 1.0)


def test_typical_pods_break_frequency_ties_by_the_larger_shape():
    small, big = PodShape(1000), PodShape(2000)
    assert [t.shape for t in typical_pods([small, big], coverage=1.0)] == [big, small]
    assert typical_pods([]) == ()


@pytest.mark.parametrize(
    ("view", "expected"),
    [
        pytest.param(NodeView("G2", 64_000, (1000, 500)), 500.0, id="both fit: the 500 GPU wastes"),
        pytest.param(NodeView("G2", 64_000, (500, 500)), 1000.0, id="neither fits: all wasted"),
        pytest.param(NodeView("G2", 6_000, (1000, 500)), 1000.0, id="cpu too short for 1-GPU pod"),
        pytest.param(NodeView("G2", 64_000, (0, 0)), 0.0, id="no free GPU: nothing to waste"),
    ],
)
def test_fragmentation_by_hand(view: NodeView, expected: float):
    f = frag((SHARE_600, 0.5), (WHOLE_1, 0.5))
    assert f.of(view) == pytest.approx(expected)


def test_cpu_only_and_inaccessible_typical_pods_count_every_free_gpu():
    t4_only = PodShape(cpu_milli=1000, gpu_milli=300, gpus=1, models=("T4",))
    f = frag((CPU_ONLY, 0.5), (t4_only, 0.5))
    assert f.of(NodeView("G2", 64_000, (1000, 400))) == pytest.approx(1400.0)
    assert f.of(NodeView("T4", 64_000, (1000, 400))) == pytest.approx(700.0)


def test_gradient_puts_a_share_where_fragmentation_grows_least():
    f = frag((SHARE_600, 0.5), (WHOLE_1, 0.5))
    view = NodeView("G2", 64_000, (1000, 700, 1000))
    # 300 on the 700 GPU leaves 400 (wasted by both); on a whole GPU it breaks one of two.
    delta, gpus = f.gradient(view, PodShape(cpu_milli=1000, gpu_milli=300, gpus=1)) or (0.0, ())
    assert gpus == (1,)
    assert delta == pytest.approx(f.of(view) - f.of(NodeView("G2", 63_000, (1000, 400, 1000))))


def test_gradient_takes_the_lowest_free_whole_gpus_and_refuses_what_does_not_fit():
    f = frag((WHOLE_1, 1.0))
    view = NodeView("G2", 64_000, (200, 1000, 1000, 1000))
    assert f.gradient(view, PodShape(cpu_milli=1000, gpu_milli=1000, gpus=2)) is not None
    assert f.placements(view, PodShape(1000, 1000, 2))[0][1] == (1, 2)
    assert f.gradient(view, PodShape(1000, 1000, 4)) is None
    assert f.gradient(view, PodShape(99_000)) is None
    assert f.gradient(view, PodShape(1000, 500, 1, ("T4",))) is None


def test_paper_score_is_fifty_at_no_change_and_monotone():
    assert paper_score(0.0) == 50
    assert paper_score(-1000.0) == 26
    assert paper_score(1000.0) == 73
    assert paper_score(-1e9) == 0
    assert [paper_score(d) for d in (-2000, -500, 0, 500)] == sorted(
        paper_score(d) for d in (-2000, -500, 0, 500)
    )


views = st.builds(
    NodeView,
    st.sampled_from(["G2", "T4"]),
    st.integers(0, 100_000),
    st.lists(st.integers(0, 1000), min_size=0, max_size=8).map(tuple),
)


@given(views, st.permutations(range(8)))
def test_fragmentation_is_bounded_and_ignores_gpu_order(view: NodeView, order: list[int]):
    f = frag((SHARE_600, 0.4), (WHOLE_1, 0.4), (CPU_ONLY, 0.2))
    value = f.of(view)
    assert 0.0 <= value <= sum(view.gpu_free) + 1e-9
    shuffled = tuple(view.gpu_free[i] for i in order if i < len(view.gpu_free))
    assert f.of(NodeView(view.model, view.cpu_free, shuffled)) == pytest.approx(value)


free_cpus = st.one_of(
    st.sampled_from([0, 3999, 4000, 7999, 8000, 15_999, 16_000]),  # at and beside each cpu need
    st.integers(0, 100_000),
)


@given(
    st.lists(st.integers(0, 1000), min_size=1, max_size=8),
    st.lists(free_cpus, min_size=2, max_size=10),
    st.booleans(),
)
def test_f_kept_for_one_free_cpu_and_reused_for_another_is_f_computed_afresh(
    gpu_free: list[int], cpus: list[int], cpu_aware: bool
):
    """One node's GPUs under several free cpu amounts: the memo that keeps F by the cpu needs met
    (the stranding term added per amount) gives, to the last bit, what a fresh one computes."""
    typical = [TypicalPod(SHARE_600, 0.4), TypicalPod(WHOLE_1, 0.4), TypicalPod(CPU_ONLY, 0.2)]
    kept = Fragmentation(typical, cpu_aware=cpu_aware)
    for cpu in cpus:
        view = NodeView("G2", cpu, tuple(gpu_free))
        assert kept.of(view) == Fragmentation(typical, cpu_aware=cpu_aware).of(view)


shapes = st.builds(
    PodShape,
    st.sampled_from([0, 4000, 60_000]),
    st.sampled_from([0, 250, 600, 1000]),
    st.integers(0, 8),
    st.sampled_from([(), ("G2",), ("T4",)]),
).filter(lambda s: (s.gpu_milli == 0) == (s.gpus == 0) and (s.gpus <= 1 or s.gpu_milli == 1000))


@given(views, shapes)
def test_placements_of_whole_gpus_are_the_gradient_to_the_lowest_free_gpus(
    view: NodeView, shape: PodShape
):
    """`placements` of whole GPUs (the memo key of the node after them taken without a sort):
    F(before) − F(the lowest-indexed wholly free GPUs emptied), as `of` gives them."""
    f = frag((SHARE_600, 0.4), (WHOLE_1, 0.3), (PodShape(0, 1000, 2), 0.1), (CPU_ONLY, 0.2))
    got = f.placements(view, shape)
    if shape.is_share or not shape.gpus:
        return
    free = [g for g, left in enumerate(view.gpu_free) if left >= 1000][: shape.gpus]
    fits = view.cpu_free >= shape.cpu_milli and shape.allows(view.model)
    if not fits or len(free) < shape.gpus:
        assert got == []
        return
    after = tuple(0 if g in free else left for g, left in enumerate(view.gpu_free))
    emptied = NodeView(view.model, view.cpu_free - shape.cpu_milli, after)
    assert got == [(f.of(view) - f.of(emptied), tuple(free))]


def _node(gpus: int = 2, cpu: int = 32_000, model: str = "G2"):
    cluster = Cluster.from_specs([NodeSpec(name="n", gpus=gpus, model=model, cpu_milli=cpu)])
    return cluster.snapshot.node("n")


def test_node_view_and_pod_shape_read_placement_objects():
    node = _node()
    first = PodRequest(key="a", cpu_milli=2000, gpu_milli=300)
    node.add_pod(first, Assignment(node="n", shares=(GpuShare(gpu=1, milli=300),)))
    assert node_view(node) == NodeView("G2", 30_000, (1000, 700))
    assert pod_shape(PodRequest(key="b", cpu_milli=500, gpus=2)) == PodShape(500, 1000, 2)
    assert pod_shape(PodRequest(key="c", gpu_milli=250, gpu_models=frozenset({"T4"}))) == (
        PodShape(0, 250, 1, ("T4",))
    )


def test_fgd_score_and_its_share_gpu_choice():
    node = _node(gpus=3)
    node.add_pod(
        PodRequest(key="a", gpu_milli=300),
        Assignment(node="n", shares=(GpuShare(gpu=2, milli=300),)),
    )
    score = FgdScore(frag((SHARE_600, 0.5), (WHOLE_1, 0.5)))
    pod = PodRequest(key="p", cpu_milli=1000, gpu_milli=300)
    assert score.share_gpu(pod, node) == 2
    # On GPU 2 (700 -> 400) F grows by 50 milli-GPU, on a whole GPU by 350: ⌊100·σ(-0.05)⌋ = 48.
    assert score(pod, node, Assignment(node="n", shares=(GpuShare(gpu=0, milli=300),))) == 48.0


def test_bestfit_score_matches_the_published_formula():
    node = _node(gpus=8, cpu=96_000)
    pod = PodRequest(key="p", cpu_milli=32_000, gpus=2)
    expected = int((1.0 - (64_000 / 128_000 * 0.5 + 6000 / 8000 * 0.5)) * 100)
    assert bestfit_score(pod, node, Assignment(node="n", gpus=(0, 1))) == float(expected) == 37.0


def test_least_allocated_prefers_the_emptier_node():
    empty, busy = _node(), _node()
    busy.add_pod(PodRequest(key="x", cpu_milli=16_000, gpus=1), Assignment(node="n", gpus=(0,)))
    pod = PodRequest(key="p", cpu_milli=1000, memory=GIB, gpus=1)
    a = Assignment(node="n", gpus=(1,))
    assert least_allocated_score(pod, empty, a) > least_allocated_score(pod, busy, a) > 0.0


@given(st.lists(st.sampled_from([0, 1, 2, 250, 500]), max_size=6), shapes)
def test_node_placements_read_the_node_as_its_view(loads: list[int], shape: PodShape):
    """`node_placements` (from the load the node keeps derived) are `placements` of its
    `node_view`, after any pods and after a pod leaves again."""
    node = _node(gpus=4, cpu=64_000)
    f = frag((SHARE_600, 0.5), (WHOLE_1, 0.3), (CPU_ONLY, 0.2))
    for k, ask in enumerate(loads):
        pod = PodRequest(key=f"p{k}", cpu_milli=3000, gpus=ask if ask < 10 else 0)
        if ask >= 10:
            pod = PodRequest(key=f"p{k}", cpu_milli=3000, gpu_milli=ask)
        placed = choose_devices(pod, node, None)
        if placed is not None:
            node.add_pod(pod, placed)
        assert f.node_placements(node, shape) == f.placements(node_view(node), shape)
    if loads and node.pods:
        node.remove_pod(next(iter(node.pods)))
        assert f.node_placements(node, shape) == f.placements(node_view(node), shape)
