"""Hypothesis: placement invariants over random clusters and workloads, and an assume/forget
state machine that checks every incremental index against a recomputation."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from agent.model import MILLI_PER_GPU
from scheduler.placement import (
    Effect,
    NodeState,
    Placer,
    PodRequest,
    Scoring,
    Snapshot,
    Taint,
    TopologyConstraint,
    TopologyPolicy,
    default_scoring,
    filter_node,
    place_gang,
    place_most_in_one_domain,
)
from scheduler.placement.pick import pick
from tests.builders.placement import GIB, make_node

RACK = "gputopo.io/rack"
UNLIMITED = Scoring.from_weights(
    {"binpack": 10.0, "topology": 5.0, "spread": 1.0, "gpuAvoidance": 1.0}, candidate_limit=0
)


@st.composite
def nodes(draw: st.DrawFn, index: int) -> NodeState:
    gpus = draw(st.sampled_from([0, 4, 8]))
    mig = {}
    if gpus and draw(st.booleans()):
        mig = {0: {"1g.10gb": draw(st.integers(1, 7))}, 1: {"3g.40gb": 2}}
    taints = (Taint(key="node.kubernetes.io/not-ready", effect=Effect.NO_SCHEDULE),)
    return make_node(
        f"n{index}",
        gpus=gpus,
        preset=draw(st.sampled_from(["nvswitch", "pairs", "pcie"])),
        cpu_milli=draw(st.sampled_from([8_000, 64_000])),
        labels={RACK: f"r{index % 2}"},
        taints=taints if draw(st.integers(0, 9)) == 0 else (),
        policy=draw(st.sampled_from([TopologyPolicy.NONE, TopologyPolicy.SINGLE_NUMA_NODE])),
        numa_cpu=draw(st.sampled_from([None, 4_000])),
        mig=mig,
    )


@st.composite
def clusters(draw: st.DrawFn) -> list[NodeState]:
    count = draw(st.integers(1, 5))
    return [draw(nodes(i)) for i in range(count)]


@st.composite
def pods(draw: st.DrawFn, key: str) -> PodRequest:
    kind = draw(st.sampled_from(["cpu", "whole", "share", "mig"]))
    extra: dict[str, object] = {}
    if kind == "whole":
        extra["gpus"] = draw(st.sampled_from([1, 1, 2, 3, 4, 8]))
    elif kind == "share":
        extra["gpu_milli"] = draw(st.sampled_from([100, 250, 500, 900]))
    elif kind == "mig":
        extra["mig"] = {draw(st.sampled_from(["1g.10gb", "3g.40gb"])): draw(st.integers(1, 2))}
    return PodRequest(
        key=key,
        cpu_milli=draw(st.sampled_from([0, 500, 3_000])),
        memory=draw(st.sampled_from([0, GIB])),
        guaranteed=draw(st.booleans()),
        **extra,  # type: ignore[arg-type]
    )


def workload(size: int) -> st.SearchStrategy[list[PodRequest]]:
    return st.integers(1, size).flatmap(
        lambda n: st.tuples(*(pods(f"default/p{i}") for i in range(n))).map(list)
    )


def check_capacity(snap: Snapshot) -> None:
    """No GPU, share or MIG device double-booked; no resource over allocatable."""
    for node in snap.nodes.values():
        assert all(0 <= free <= MILLI_PER_GPU for free in node.gpu_free), node.name
        assert all(n >= 0 for free in node.mig_free for n in free.values()), node.name
        for resource, qty in node.requested.items():
            assert qty <= node.allocatable.get(resource, 0), (node.name, resource)
        whole = [g for _p, a in node.pods.values() for g in a.gpus]
        assert len(whole) == len(set(whole))
        shared = {s.gpu for _p, a in node.pods.values() for s in a.shares}
        assert not set(whole) & shared


def check_counters(snap: Snapshot) -> None:
    """Every incremental counter equals a recomputation from the pods."""
    for node in snap.nodes.values():
        fresh = NodeState(
            name=node.name,
            allocatable=node.allocatable,
            gpu_numa=node.gpu_numa,
            gpu_free=list(node.gpu_free),
            gpu_mig=node.gpu_mig,
            mig_free=[dict(m) for m in node.mig_free],
            pods=dict(node.pods),
        )
        assert (fresh.idle_mask, fresh.used_milli, fresh.mig_in_use) == (
            node.idle_mask,
            node.used_milli,
            node.mig_in_use,
        )
        summed: dict[str, int] = {}
        for p, _a in node.pods.values():
            for resource, qty in p.vector:
                summed[resource] = summed.get(resource, 0) + qty
        assert summed == node.requested


def place_sequence(cluster: list[NodeState], work: list[PodRequest]) -> list[object]:
    snap = Snapshot(n.clone() for n in cluster)
    out: list[object] = []
    for p in work:
        decision = pick(p, snap, default_scoring())
        if decision.assignment is not None:
            snap.assume(p, decision.assignment)
        out.append((decision.assignment, dict(decision.reasons)))
    check_capacity(snap)
    check_counters(snap)
    return out


@settings(max_examples=60, deadline=None)
@given(cluster=clusters(), work=workload(12))
def test_capacity_is_never_exceeded_and_output_is_deterministic(cluster, work):
    assert place_sequence(cluster, work) == place_sequence(cluster, work)


@settings(max_examples=60, deadline=None)
@given(cluster=clusters(), work=workload(10))
def test_binpack_opens_no_new_node_while_a_used_one_fits(cluster, work):
    snap = Snapshot(n.clone() for n in cluster)
    for p in work:
        decision = pick(p, snap, UNLIMITED)
        if decision.assignment is None:
            continue
        chosen = snap.node(decision.assignment.node)
        if p.wants_gpu and not chosen.gpu_used():
            used_fits = [
                n.name
                for n in snap.nodes.values()
                if n.gpu_used() and filter_node(p, n).assignment is not None
            ]
            assert used_fits == []
        snap.assume(p, decision.assignment)


@settings(max_examples=50, deadline=None)
@given(
    cluster=clusters(),
    gang=workload(5),
    topology=st.sampled_from([None, True, False]),
)
def test_gang_is_all_or_nothing(cluster, gang, topology):
    snap = Snapshot(n.clone() for n in cluster)
    before = {n.name: (dict(n.requested), list(n.gpu_free)) for n in snap.nodes.values()}
    constraint = None if topology is None else TopologyConstraint(label=RACK, required=topology)
    result = place_gang(gang, Placer(snap, default_scoring()), topology=constraint)
    assert {n.name: (dict(n.requested), list(n.gpu_free)) for n in snap.nodes.values()} == before
    if not result.ok:
        assert result.assignments == {}
        return
    assert set(result.assignments) == {p.key for p in gang}
    if constraint is not None and result.domain is not None:
        assert {snap.node(a.node).labels[RACK] for a in result.assignments.values()} == {
            result.domain
        }
    for p in gang:
        snap.assume(p, result.assignments[p.key])
    check_capacity(snap)


@settings(max_examples=50, deadline=None)
@given(cluster=clusters(), group=workload(6))
def test_most_in_one_domain_is_a_longest_prefix_in_one_domain(cluster, group):
    snap = Snapshot(n.clone() for n in cluster)
    before = {n.name: (dict(n.requested), list(n.gpu_free)) for n in snap.nodes.values()}
    required = TopologyConstraint(label=RACK, required=True)
    placer = Placer(snap, default_scoring())
    result = place_most_in_one_domain(group, placer, required)
    assert {n.name: (dict(n.requested), list(n.gpu_free)) for n in snap.nodes.values()} == before
    if not result.ok:
        assert result.assignments == {}
        assert not place_gang(group[:1], placer, topology=required).ok
        return
    count = len(result.assignments)
    assert set(result.assignments) == {p.key for p in group[:count]}  # a prefix
    assert {snap.node(a.node).labels[RACK] for a in result.assignments.values()} == {result.domain}
    if count < len(group):  # one pod more is one too many for any domain
        assert not place_gang(group[: count + 1], placer, topology=required).ok
    for p in group[:count]:
        snap.assume(p, result.assignments[p.key])
    check_capacity(snap)


PROBES = [
    PodRequest(key="probe/1", gpus=1),
    PodRequest(key="probe/4", gpus=4),
    PodRequest(key="probe/s", gpu_milli=300),
    PodRequest(key="probe/m", mig={"1g.10gb": 1}),
    PodRequest(key="probe/c", cpu_milli=1000),
]


class AssumeForget(RuleBasedStateMachine):
    """Assume and forget in any order; indexes, counters and totals always match a recount."""

    def __init__(self) -> None:
        super().__init__()
        self.snap = Snapshot()
        self.counter = 0

    @initialize(cluster=clusters())
    def build(self, cluster: list[NodeState]) -> None:
        self.snap = Snapshot(cluster)
        self.snap.domains(RACK)  # track the label so its free milli-GPU is maintained

    @rule(data=st.data())
    def place(self, data: st.DataObject) -> None:
        self.counter += 1
        p = data.draw(pods(f"default/sm-{self.counter}"))
        decision = pick(p, self.snap, default_scoring())
        if decision.assignment is not None:
            self.snap.assume(p, decision.assignment)

    @rule(data=st.data())
    def bound_elsewhere(self, data: st.DataObject) -> None:
        self.counter += 1
        p = data.draw(pods(f"default/other-{self.counter}"))
        name = data.draw(st.sampled_from(self.snap.names()))
        if filter_node(p, self.snap.node(name)).assignment is not None:
            self.snap.assume_on(p, name)

    @precondition(lambda self: any(n.pods for n in self.snap.nodes.values()))
    @rule(data=st.data())
    def forget(self, data: st.DataObject) -> None:
        keys = sorted(k for n in self.snap.nodes.values() for k in n.pods)
        key = data.draw(st.sampled_from(keys))
        assert self.snap.forget(key) is not None
        assert self.snap.node_of(key) is None

    @invariant()
    def consistent(self) -> None:
        check_capacity(self.snap)
        check_counters(self.snap)
        for probe in PROBES:
            feasible = {
                n.name for n in self.snap.nodes.values() if filter_node(probe, n).assignment
            }
            assert feasible <= {n.name for n in self.snap.candidates(probe)}

    @invariant()
    def totals_and_domains(self) -> None:
        totals: dict[str, int] = {}
        for node in self.snap.nodes.values():
            for resource, alloc in node.allocatable.items():
                free = alloc - node.requested.get(resource, 0)
                totals[resource] = totals.get(resource, 0) + free
        assert self.snap.free_totals() == totals
        for value, domain in self.snap.domains(RACK).items():
            expected = sum(
                sum(f for g, f in enumerate(n.gpu_free) if not n.gpu_mig[g])
                for n in self.snap.nodes.values()
                if n.labels.get(RACK) == value
            )
            assert domain.free_milli == expected


AssumeForget.TestCase.settings = settings(max_examples=25, stateful_step_count=15, deadline=None)
TestAssumeForget = AssumeForget.TestCase


@settings(max_examples=40, deadline=None)
@given(
    cluster=clusters(),
    shape=pods("default/shape"),
    count=st.integers(1, 8),
    limit=st.integers(1, 3),
)
def test_a_placer_with_a_candidate_limit_decides_as_pick(cluster, shape, count, limit):
    """Its plain path keeps each node's verdict for pods of one shape in a row (a gang's members)
    until the node changes: the same decisions and reasons as `pick` without it."""
    scoring = replace(UNLIMITED, candidate_limit=limit)
    plain = Snapshot(n.clone() for n in cluster)
    placed = Snapshot(n.clone() for n in cluster)
    placer = Placer(placed, scoring)
    for i in range(count):
        p = replace(shape, key=f"default/m{i}")
        expected = pick(p, plain, scoring)
        got = placer.decide(p)
        assert (got.assignment, got.score, dict(got.reasons)) == (
            expected.assignment,
            expected.score,
            dict(expected.reasons),
        )
        if expected.assignment is None:
            break
        plain.assume(p, expected.assignment)
        placed.assume(p, expected.assignment)
