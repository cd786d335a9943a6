"""The per-state index a pod class is evaluated through (`StateMembers` in `NodeSlots`), and the
search it feeds.

- After any sequence of node events (added in any name order, replaced, removed, pods assumed,
  forgotten) the index agrees with one rebuilt from the slots' state ids, keeps each state's
  slots in name order, and gives the best slots by (level, name) as a sort of every slot does.
- On many nodes in few states (most scores equal, so the lowest name decides), in any name order,
  the memo with a heap cut far below the feasible nodes picks exactly the node `pick`'s full scan
  picks, pod after pod.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from scheduler.placement import PodRequest, Snapshot, default_scoring
from scheduler.placement.node_slots import NodeSlots
from scheduler.placement.pick import pick
from scheduler.placement.verdict_memo import VerdictMemo
from tests.builders.placement import GIB, make_node

NAMES = [f"n{i:02d}" for i in range(24)]


def pod_requests(key: str) -> st.SearchStrategy[PodRequest]:
    return st.builds(
        PodRequest,
        key=st.just(key),
        cpu_milli=st.sampled_from([1000, 8000, 30_000]),
        memory=st.sampled_from([GIB, 64 * GIB]),
        gpus=st.sampled_from([0, 1, 2, 4, 8]),
    )


class IndexFollowsTheNodes(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.snap = Snapshot()
        self.slots = NodeSlots(self.snap)
        self.count = 0

    @rule(name=st.sampled_from(NAMES), gpus=st.sampled_from([0, 4, 8]))
    def add_or_replace(self, name: str, gpus: int) -> None:
        self.snap.add_node(make_node(name, gpus=gpus))

    @precondition(lambda self: len(self.snap) > 0)
    @rule(data=st.data())
    def assume(self, data: st.DataObject) -> None:
        self.count += 1
        pod = data.draw(pod_requests(f"default/p{self.count}"))
        decision = pick(pod, self.snap, default_scoring(), explain=False)
        if decision.assignment is not None:
            self.snap.assume(pod, decision.assignment)

    @precondition(lambda self: len(self.snap) > 0)
    @rule(data=st.data(), node=st.booleans())
    def remove_node_or_forget_pod(self, data: st.DataObject, node: bool) -> None:
        """A node removed, or one pod on it forgotten (the node removed when it has none)."""
        name = data.draw(st.sampled_from(self.snap.names()))
        held = sorted(self.snap.node(name).pods)
        if node or not held:
            self.snap.remove_node(name)
        else:
            self.snap.forget(data.draw(st.sampled_from(held)))

    @invariant()
    def index_equals_a_rebuild(self) -> None:
        self.slots.sync()
        states = self.slots.states.tolist()
        rows = self.slots.members.rows.tolist()
        rebuilt: dict[int, set[int]] = defaultdict(set)
        for slot, state in enumerate(states):
            if state >= 0:
                rebuilt[state].add(slot)
        live = self.slots.members.live()
        assert {state for state, _row, _slot in live} == set(rebuilt)
        for state, row, slot in live:
            assert slot in rebuilt[state]
            assert {s for s, r in enumerate(rows) if r == row} == rebuilt[state]
        assert [r < 0 for r in rows] == [s < 0 for s in states]
        assert len(self.slots.members.live()) <= self.slots.members.row_count
        assert self.slots.state_ids == states

    @invariant()
    def rows_keep_their_slots_by_name_and_give_the_best_as_a_sort_would(self) -> None:
        """Each state's first slot is its lowest name; `best_slots` are the first `count` of
        every slot sorted by (its row's level, name), for levels that tie many rows."""
        self.slots.sync()
        names = self.slots.names
        rows = self.slots.members.rows.tolist()
        for _state, row, first in self.slots.members.live():
            assert names[first] == min(str(names[s]) for s, r in enumerate(rows) if r == row)
        for spread in (1, 2, 5):
            level = np.arange(self.slots.members.row_count + 1, dtype=np.int64) % spread
            ranked = sorted((int(level[r]), str(names[s]), s) for s, r in enumerate(rows) if r >= 0)
            for count in (1, 3, len(ranked) // 2, len(ranked) - 1, len(ranked)):
                got = self.slots.members.best_slots(level, count)
                assert sorted(got) == sorted(s for _lv, _name, s in ranked[:count])

    @invariant()
    def sift_is_the_vectorised_pre_check(self) -> None:
        """`sift` (slot by slot) splits the slots as `maybe_fits` (vectorised) judges them,
        for pods asking and not asking each resource; an empty slot never passes."""
        self.slots.sync()
        every = list(range(self.slots.capacity))
        for gpus, cpu in ((0, 0), (0, 30_000), (2, 1000), (8, 8000)):
            pod = PodRequest(key="default/q", cpu_milli=cpu, memory=cpu * GIB // 1000, gpus=gpus)
            passed, failed = self.slots.sift(pod, reversed(every))
            maybe = self.slots.maybe_fits(pod, np.array(every, dtype=np.int64)).tolist()
            assert sorted(passed) == [s for s in every if maybe[s] and self.slots.state(s) >= 0]
            assert sorted(failed) == sorted(set(every) - set(passed))
            assert passed == sorted(passed, reverse=True)  # in the order given


IndexFollowsTheNodes.TestCase.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None
)
TestIndexFollowsTheNodes = IndexFollowsTheNodes.TestCase


@settings(max_examples=40, deadline=None)
@given(
    order=st.permutations(range(80)),
    top=st.integers(1, 8),
    pods=st.lists(pod_requests("default/p"), min_size=1, max_size=25),
)
def test_cut_heap_picks_the_node_the_full_scan_picks(
    order: list[int], top: int, pods: list[PodRequest]
) -> None:
    snap = Snapshot(make_node(f"n{i:02d}", gpus=0 if i % 5 == 0 else 8) for i in order)
    memo = VerdictMemo(snap, default_scoring(), heap_top=top)
    reference = default_scoring()
    for k, pod in enumerate(pods):
        pod = PodRequest(
            key=f"default/p{k}", cpu_milli=pod.cpu_milli, memory=pod.memory, gpus=pod.gpus
        )
        expected = pick(pod, snap, reference, explain=False)
        got = memo.decide(pod, explain=False)
        assert (got.node, got.score) == (expected.node, expected.score)
        if expected.assignment is not None:
            assert got.assignment == expected.assignment
            snap.assume(pod, expected.assignment)
