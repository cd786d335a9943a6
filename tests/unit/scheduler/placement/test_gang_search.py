"""Hypothesis: `place_gang`'s domain search (domains in one frozen set each, the allowed nodes'
slots ranked on their own, the search ended by a placement on as few nodes as any can use)
chooses what the exhaustive search chooses: every domain tried, tightest first, up to four
equally tight ones placed and the fewest nodes touched kept, each on a snapshot of that
domain's nodes alone."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.resource_names import GPU_RESOURCE
from scheduler.placement import (
    Assignment,
    NodeState,
    Placer,
    PodRequest,
    Scoring,
    Snapshot,
    TopologyConstraint,
    place_gang,
)
from tests.builders.placement import GIB, make_node, shared_node

RACK = "gputopo.io/rack"
TIES = 4  # equally tight domains the search places before it keeps the fewest nodes touched
SCORING = Scoring.from_weights(
    {"binpack": 10.0, "topology": 5.0, "spread": 1.0, "gpuAvoidance": 1.0}, candidate_limit=0
)
PLAIN = replace(SCORING, candidate_limit=1 << 30)  # every node ranked by `pick` itself


@st.composite
def racked_node(draw: st.DrawFn, index: int) -> NodeState:
    """A node in one of three racks (or none): 4 or 8 whole GPUs, or shared replicas."""
    kind = draw(st.sampled_from(["8", "8", "4", "shared"]))
    if kind == "shared":
        node = shared_node(f"n{index:02d}", shared=2, whole=2, slots=2, resource=GPU_RESOURCE)
    else:
        node = make_node(
            f"n{index:02d}", gpus=int(kind), cpu_milli=draw(st.sampled_from([16_000, 64_000]))
        )
    rack = draw(st.sampled_from(["r0", "r1", "r2", None]))
    node.labels = {**node.labels, **({RACK: rack} if rack else {})}
    return node


@st.composite
def loaded_cluster(draw: st.DrawFn) -> Snapshot:
    """3 to 12 nodes, some GPUs already taken by pods of 1, 2 or 4 GPUs."""
    count = draw(st.integers(3, 12))
    snap = Snapshot(draw(racked_node(i)) for i in range(count))
    placer = Placer(snap, SCORING)
    for i in range(draw(st.integers(0, 10))):
        load = PodRequest(key=f"load/{i}", cpu_milli=1000, gpus=draw(st.sampled_from([1, 2, 4])))
        assignment = placer.best_assignment(load)
        if assignment is not None:
            snap.assume(load, assignment)
    return snap


@st.composite
def gangs(draw: st.DrawFn) -> list[PodRequest]:
    size = draw(st.integers(1, 6))
    return [
        PodRequest(
            key=f"default/g-{m}",
            pod_group="g",
            cpu_milli=draw(st.sampled_from([1000, 8000])),
            memory=draw(st.sampled_from([GIB, 64 * GIB])),
            gpus=draw(st.sampled_from([0, 1, 2, 4, 8])),
        )
        for m in range(size)
    ]


def exhaustive(
    snap: Snapshot, gang: Sequence[PodRequest], required: bool
) -> tuple[bool, dict[str, Assignment], str | None]:
    """The search without its shortcuts: every domain with enough free milli-GPU, tightest
    first (then by value), each placed on a snapshot of its own nodes; among up to `TIES`
    equally tight ones that hold the gang, the fewest nodes touched, the first on ties."""
    demand = sum(p.gpu_milli_total for p in gang)
    domains = sorted(
        (d.free_milli, value, sorted(d.names))
        for value, d in snap.domains(RACK).items()
        if d.free_milli >= demand
    )
    best: tuple[int, int, str, dict[str, Assignment]] | None = None
    tries = 0
    for free, value, names in domains:
        if best is not None and (free != best[0] or tries >= TIES):
            break
        alone = Snapshot(snap.node(name).clone() for name in names)
        result = place_gang(gang, Placer(alone, PLAIN))
        if not result.ok:
            continue
        tries += 1
        touched = len({a.node for a in result.assignments.values()})
        if best is None or touched < best[1]:
            best = (free, touched, value, dict(result.assignments))
    if best is not None:
        return True, best[3], best[2]
    if required:
        return False, {}, None
    result = place_gang(gang, Placer(snap, PLAIN))
    return result.ok, dict(result.assignments), None


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snap=loaded_cluster(), gang=gangs(), required=st.booleans(), memo=st.booleans())
def test_the_domain_search_chooses_what_the_exhaustive_search_chooses(snap, gang, required, memo):
    before = {name: (dict(n.requested), list(n.gpu_free)) for name, n in snap.nodes.items()}
    expected = exhaustive(snap, gang, required)
    topology = TopologyConstraint(label=RACK, required=required)
    result = place_gang(gang, Placer(snap, SCORING if memo else PLAIN), topology=topology)
    assert (result.ok, dict(result.assignments), result.domain) == expected
    assert {name: (dict(n.requested), list(n.gpu_free)) for name, n in snap.nodes.items()} == before
