"""Hypothesis state machine: a `Placer` decides exactly as `pick` on a snapshot that anyone changes
in any way (assume, forget, bound elsewhere, nodes added, removed and replaced, a node changed in
place then `refresh`ed), for single pods, pods limited to a domain and whole gangs, on nodes
with and without shared GPUs (GPU share pods follow only the shared nodes' changes); on its memo
path, on its plain path (a candidate limit above the node count ranks every node too), and with
the memo's heap cut to its best 1 or 2 nodes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from scheduler.placement import (
    Assignment,
    Decision,
    Effect,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    NodeState,
    Operator,
    Placer,
    PodRequest,
    Scoring,
    Snapshot,
    Taint,
    Toleration,
    TopologyConstraint,
    TopologyPolicy,
    default_scoring,
    filter_node,
    place_gang,
)
from scheduler.placement.fgd import PodShape, TypicalPod
from scheduler.placement.fragscores import FragmentationScore
from scheduler.placement.pick import pick
from scheduler.placement.scores import WeightedScore, topology_score
from scheduler.placement.verdict_memo import VerdictMemo
from tests.builders.placement import GIB, make_node, share, share_pod, shared_node

RACK = "gputopo.io/rack"
HOST = "kubernetes.io/hostname"
TAINT = Taint(key="dedicated", value="ml", effect=Effect.NO_SCHEDULE)
FIXED = (TypicalPod(PodShape(4000, 500, 1), 0.5), TypicalPod(PodShape(8000, 1000, 2), 0.5))
EVERY_NODE = 1 << 30  # a candidate limit no snapshot here reaches: every node ranked, plainly


def scorings() -> dict[str, Scoring]:
    """Fresh scorings (learning scores keep state): shipped, binpack tier, fixed fragmentation."""
    fixed = FragmentationScore(FIXED)
    fixed.scarce_idle_share = 0.5  # on a few nodes: idle ones are scarce, and paid for, often
    return {
        "shipped": default_scoring(),
        "binpack": Scoring.from_weights(
            {"binpack": 10.0, "topology": 5.0, "spread": 1.0, "gpuAvoidance": 1.0},
            candidate_limit=0,
        ),
        "fixed": Scoring(
            scores=(WeightedScore("f", 10.0, fixed), WeightedScore("t", 5.0, topology_score)),
            prefer_used_nodes=False,
            candidate_limit=0,
        ),
    }


@st.composite
def nodes(draw: st.DrawFn, name: str) -> NodeState:
    labels = {HOST: name, RACK: draw(st.sampled_from(["r0", "r1"]))}
    if draw(st.integers(0, 3)) == 0:  # GPUs shared into replicas (DESIGN §12)
        node = shared_node(
            name,
            shared=draw(st.integers(1, 2)),
            whole=draw(st.integers(0, 2)),
            slots=draw(st.sampled_from([2, 4])),
        )
        node.labels.update(labels)
        return node
    gpus = draw(st.sampled_from([0, 2, 4, 8]))
    mig = {}
    if gpus >= 4 and draw(st.integers(0, 3)) == 0:
        mig = {0: {"1g.10gb": draw(st.integers(1, 7))}, 1: {"3g.40gb": 2}}
    if draw(st.booleans()):
        labels["pool"] = draw(st.sampled_from(["a", "b"]))
    return make_node(
        name,
        gpus=gpus,
        preset=draw(st.sampled_from(["nvswitch", "pairs", "pcie"])),
        cpu_milli=draw(st.sampled_from([8_000, 32_000, 64_000])),
        max_pods=draw(st.sampled_from([3, 110])),
        labels=labels,
        taints=(TAINT,) if draw(st.integers(0, 6)) == 0 else (),
        unschedulable=draw(st.integers(0, 9)) == 0,
        policy=draw(st.sampled_from([TopologyPolicy.NONE, TopologyPolicy.SINGLE_NUMA_NODE])),
        numa_cpu=draw(st.sampled_from([None, 4_000, 16_000])),
        mig=mig,
    )


@st.composite
def pods(draw: st.DrawFn, key: str) -> PodRequest:
    kind = draw(st.sampled_from(["cpu", "whole", "whole", "share", "mig", "runtime share"]))
    if kind == "runtime share":  # a replica with gpu-memory / gpu-compute (DESIGN §12)
        memory = draw(st.sampled_from([None, 10 * GIB, 40 * GIB]))
        compute = draw(st.sampled_from([None, 50]))
        cpu = draw(st.sampled_from([100, 12_000]))
        return share_pod(key, share(memory=memory, compute=compute), cpu_milli=cpu)
    extra: dict[str, object] = {}
    if kind == "whole":
        extra["gpus"] = draw(st.sampled_from([1, 2, 4, 8]))
    elif kind == "share":
        extra["gpu_milli"] = draw(st.sampled_from([250, 500, 900]))
    elif kind == "mig":
        extra["mig"] = {draw(st.sampled_from(["1g.10gb", "3g.40gb"])): draw(st.integers(1, 2))}
    constraint = draw(
        st.sampled_from(["none", "none", "selector", "affinity", "fields", "toleration"])
    )
    if constraint == "selector":
        extra["node_selector"] = {"pool": draw(st.sampled_from(["a", "b"]))}
    elif constraint == "affinity":
        requirement = NodeSelectorRequirement(key="pool", operator=Operator.NOT_IN, values=("a",))
        extra["affinity"] = (NodeSelectorTerm(match_expressions=(requirement,)),)
    elif constraint == "fields":  # the node's name (matchFields), alone or beside a label
        names = tuple(draw(st.sets(st.sampled_from(["n0", "n1", "n2", "n9"]), max_size=2)))
        operator = draw(st.sampled_from([Operator.IN, Operator.NOT_IN]))
        named = NodeSelectorRequirement(key="metadata.name", operator=operator, values=names)
        pool = NodeSelectorRequirement(key="pool", operator=Operator.IN, values=("b",))
        labelled = draw(st.booleans())
        term = NodeSelectorTerm(
            match_expressions=(pool,) if labelled else (), match_fields=(named,)
        )
        extra["affinity"] = (term,)
    elif constraint == "toleration":
        extra["tolerations"] = (Toleration(key="dedicated", operator="Exists"),)
    return PodRequest(
        key=key,
        cpu_milli=draw(st.sampled_from([0, 1_000, 3_000, 12_000])),
        memory=draw(st.sampled_from([0, GIB, 64 * GIB])),
        guaranteed=draw(st.booleans()),
        **extra,  # type: ignore[arg-type]
    )


def same(got: Decision, expected: Decision) -> None:
    assert (got.pod, got.assignment, got.score, got.nodes_total) == (
        expected.pod,
        expected.assignment,
        expected.score,
        expected.nodes_total,
    )
    if expected.assignment is None:
        assert dict(got.reasons) == dict(expected.reasons)


class PlacerFollowsTheSnapshot(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.snap = Snapshot()
        self.scoring = Scoring(candidate_limit=0)
        self.placer = Placer(self.snap, self.scoring)
        self.plain = Placer(self.snap, replace(self.scoring, candidate_limit=EVERY_NODE))
        self.short_heap = VerdictMemo(self.snap, self.scoring, heap_top=1)
        self.counter = 0

    @initialize(
        data=st.data(), scoring=st.sampled_from(sorted(scorings())), top=st.sampled_from([1, 2])
    )
    def build(self, data: st.DataObject, scoring: str, top: int) -> None:
        """`top`: the short-heap memo's rebuilds keep the best 1 or 2 nodes (the Placer's: all
        of these)."""
        count = data.draw(st.integers(1, 6))
        self.snap = Snapshot(data.draw(nodes(f"n{i}")) for i in range(count))
        self.scoring = scorings()[scoring]
        self.placer = Placer(self.snap, self.scoring)
        self.plain = Placer(self.snap, replace(self.scoring, candidate_limit=EVERY_NODE))
        self.short_heap = VerdictMemo(self.snap, self.scoring, heap_top=top)

    def _all_decide(self, pod: PodRequest, **how: Any) -> Decision:
        """`pick`'s decision, checked against the Placer's paths and the short-heap memo."""
        expected = pick(pod, self.snap, self.scoring, **how)
        same(self.placer.decide(pod, **how), expected)
        same(self.plain.decide(pod, **how), expected)
        same(self.short_heap.decide(pod, **how), expected)
        where = {k: v for k, v in how.items() if k in ("allowed", "excluded")}
        assert self.placer.best_assignment(pod, **where) == expected.assignment
        assert self.plain.best_assignment(pod, **where) == expected.assignment
        assert self.short_heap.best(pod, **where) == expected.assignment
        return expected

    def _key(self, prefix: str) -> str:
        self.counter += 1
        return f"default/{prefix}-{self.counter}"

    @rule(data=st.data(), explain=st.booleans(), limit=st.booleans(), hold=st.booleans())
    def decide_and_assume(
        self, data: st.DataObject, explain: bool, limit: bool, hold: bool
    ) -> None:
        pod = data.draw(pods(self._key("p")))
        allowed = excluded = None
        if limit and self.snap.names():
            allowed = frozenset(data.draw(st.sets(st.sampled_from(self.snap.names()))))
        if hold and self.snap.names():
            excluded = frozenset(data.draw(st.sets(st.sampled_from(self.snap.names()))))
        expected = self._all_decide(pod, allowed=allowed, explain=explain, excluded=excluded)
        if expected.assignment is not None:
            self.snap.assume(pod, expected.assignment)

    @rule(data=st.data())
    def bound_elsewhere(self, data: st.DataObject) -> None:
        if not self.snap.names():
            return
        pod = data.draw(pods(self._key("other")))
        name = data.draw(st.sampled_from(self.snap.names()))
        if filter_node(pod, self.snap.node(name)).assignment is not None:
            self.snap.assume_on(pod, name)

    @precondition(lambda self: any(n.pods for n in self.snap.nodes.values()))
    @rule(data=st.data())
    def forget(self, data: st.DataObject) -> None:
        keys = sorted(k for n in self.snap.nodes.values() for k in n.pods)
        self.snap.forget(data.draw(st.sampled_from(keys)))

    @rule(data=st.data())
    def add_or_replace_node(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from([*self.snap.names(), f"m{self.counter}", "a0"]))
        self.counter += 1
        self.snap.add_node(data.draw(nodes(name)))

    @precondition(lambda self: len(self.snap) > 0)
    @rule(data=st.data())
    def remove_node(self, data: st.DataObject) -> None:
        self.snap.remove_node(data.draw(st.sampled_from(self.snap.names())))

    @precondition(lambda self: len(self.snap) > 0)
    @rule(data=st.data())
    def charge_in_place_then_refresh(self, data: st.DataObject) -> None:
        """A node changed directly (a pod the snapshot does not track), then `refresh`ed."""
        node = self.snap.node(data.draw(st.sampled_from(self.snap.names())))
        pod = PodRequest(key=self._key("raw"), cpu_milli=2_000, memory=GIB)
        node.add_pod(pod, Assignment(node=node.name))
        self.snap.refresh(node.name)

    @rule(data=st.data(), again=st.booleans(), forget_first=st.booleans())
    def trial_undone(self, data: st.DataObject, again: bool, forget_first: bool) -> None:
        """Pods assumed inside `Placer.trial`, each where the Placer says, and forgotten before
        it ends (a gang's trial placement): what the Placer knew before holds after, and
        nothing it learned inside (`again`: each pod offered again and without held nodes, the
        snapshot unchanged).
        `forget_first`: a pod forgotten just before, nothing decided since (what the Placer
        knew of the snapshot before that is stale when the trial begins)."""
        running = sorted(k for n in self.snap.nodes.values() for k in n.pods)
        if forget_first and running:
            self.snap.forget(data.draw(st.sampled_from(running)))
        assumed: list[PodRequest] = []
        with self.placer.trial():
            for _ in range(data.draw(st.integers(1, 3))):
                pod = data.draw(pods(self._key("t")))
                excluded = frozenset(data.draw(st.sets(st.sampled_from(["n0", "n1", "a0"]))))
                expected = pick(pod, self.snap, self.scoring, excluded=excluded).assignment
                assert self.placer.best_assignment(pod, excluded=excluded) == expected
                if again:  # the snapshot unchanged: again held off, then nowhere held
                    assert self.placer.best_assignment(pod, excluded=excluded) == expected
                    anywhere = pick(pod, self.snap, self.scoring).assignment
                    assert self.placer.best_assignment(pod) == anywhere
                if expected is not None:
                    self.snap.assume(pod, expected)
                    assumed.append(pod)
            for pod in reversed(assumed):
                self.snap.forget(pod.key)

    @precondition(lambda self: not self.scoring.learners())
    @rule(data=st.data(), topology=st.sampled_from([None, True, False]))
    def gang(self, data: st.DataObject, topology: bool | None) -> None:
        size = data.draw(st.integers(1, 4))
        members = [data.draw(pods(self._key("g"))) for _ in range(size)]
        constraint = None if topology is None else TopologyConstraint(label=RACK, required=topology)
        expected = place_gang(members, self.plain, topology=constraint)
        got = place_gang(members, self.placer, topology=constraint)
        assert (got.ok, dict(got.assignments), got.domain, got.reason) == (
            expected.ok,
            dict(expected.assignments),
            expected.domain,
            expected.reason,
        )
        for placer in (self.plain, self.placer):  # no reasons asked: the same placements
            quiet = place_gang(members, placer, topology=constraint, reasons=False)
            assert (quiet.ok, dict(quiet.assignments)) == (got.ok, dict(got.assignments))
            assert quiet.failed is None
            if constraint is not None and constraint.required:  # the domains' reason, cheap
                assert quiet.reason == got.reason
            else:  # no member's reasons counted
                assert quiet.reason == ""
        if got.ok:
            for pod in members:
                self.snap.assume(pod, got.assignments[pod.key])

    @invariant()
    def gpu_node_counts_are_current(self) -> None:
        nodes = [n for n in self.snap.nodes.values() if n.gpu_count]
        assert self.snap.gpu_nodes == len(nodes)
        assert self.snap.idle_gpu_nodes == sum(1 for n in nodes if not n.gpu_used())

    @invariant()
    def probes_agree(self) -> None:
        for probe in (
            PodRequest(key="probe/cpu", cpu_milli=1_000),
            PodRequest(key="probe/gpu", gpus=1),
            share_pod("probe/share", share(memory=10 * GIB)),
        ):
            self._all_decide(probe)
            self._all_decide(probe, explain=False)  # a refusal counts only the candidates'


PlacerFollowsTheSnapshot.TestCase.settings = settings(
    max_examples=30, stateful_step_count=20, deadline=None
)
TestPlacerFollowsTheSnapshot = PlacerFollowsTheSnapshot.TestCase
