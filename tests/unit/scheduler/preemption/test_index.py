"""RunningIndex: units by key, pod, node and leaf, and the sums the cheap bound reads, kept
incrementally; a Hypothesis state machine compares them with a recount."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from scheduler.placement import Snapshot
from scheduler.preemption import Running, RunningIndex
from tests.builders.placement import make_node, pod


def test_add_get_remove_and_views() -> None:
    snapshot = Snapshot([make_node("a"), make_node("b")])
    index = RunningIndex(snapshot)
    snapshot.assume_on(pod("ns/g-0", gpus=2), "a")
    snapshot.assume_on(pod("ns/g-1", gpus=2), "b")
    unit = Running(key="g", pods=("ns/g-0", "ns/g-1"), leaf="q", priority=3, started=1.0)
    index.add(unit)
    assert len(index) == 1
    assert list(index) == [unit]
    assert index.get("g") == unit
    assert index.unit_of_pod("ns/g-1") == "g"
    assert list(index.on_node("a")) == [unit]
    assert list(index.in_leaf("q")) == [unit]
    assert index.freed("q", 3) == {"a": [2000, 100, 1 << 30, 1], "b": [2000, 100, 1 << 30, 1]}
    snapshot.forget("ns/g-0")  # the index keeps what it read at add time
    assert index.remove("g") == unit
    assert index.remove("g") is None
    assert len(index) == 0
    assert index.unit_of_pod("ns/g-1") is None
    assert list(index.on_node("a")) == []
    assert index.freed("q", 3) == {}
    assert index.leaves() == []


class IndexMachine(RuleBasedStateMachine):
    """Units come and go in any order; every view equals a recount from the live units."""

    def __init__(self) -> None:
        super().__init__()
        self.snapshot = Snapshot(make_node(f"n{i}", gpus=8) for i in range(3))
        self.index = RunningIndex(self.snapshot)
        self.units: dict[str, Running] = {}
        self.count = 0

    @rule(
        nodes=st.lists(st.integers(0, 2), min_size=1, max_size=3),
        leaf=st.sampled_from(["a", "b"]),
        priority=st.integers(0, 2),
    )
    def add(self, nodes: list[int], leaf: str, priority: int) -> None:
        self.count += 1
        key = f"u{self.count}"
        pods = []
        for i, n in enumerate(nodes):
            request = pod(f"ns/{key}-{i}", gpus=1)
            if self.snapshot.node(f"n{n}").idle_mask:
                self.snapshot.assume_on(request, f"n{n}")
                pods.append(request.key)
        unit = Running(key=key, pods=tuple(pods), leaf=leaf, priority=priority, started=0.0)
        self.index.add(unit)
        self.units[key] = unit

    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        if not self.units:
            return
        key = data.draw(st.sampled_from(sorted(self.units)))
        places = self.index.places(key)
        assert self.index.remove(key) == self.units.pop(key)
        for p in places:
            self.snapshot.forget(p.key)

    @invariant()
    def views_match_a_recount(self) -> None:
        assert len(self.index) == len(self.units)
        sums: dict[tuple[str, int], dict[str, list[int]]] = {}
        columns: dict[int, dict[str, int]] = {}
        for unit in self.units.values():
            for p in unit.pods:
                node = self.snapshot.node_of(p)
                assert node is not None
                assert self.index.unit_of_pod(p) == unit.key
                assert unit in self.index.on_node(node)
                cell = sums.setdefault((unit.leaf, unit.priority), {}).setdefault(node, [0] * 4)
                cell[0] += 1000
                cell[3] += 1
                col = columns.setdefault(unit.priority, {})
                col[node] = col.get(node, 0) + 1000
        for (leaf, priority), table in sums.items():
            got = {n: [v[0], v[3]] for n, v in self.index.freed(leaf, priority).items()}
            assert got == {n: [v[0], v[3]] for n, v in table.items()}
        slot = self.index.columns.slot
        for priority in range(3):
            array = self.index.freed_columns(priority)
            want = np.zeros(array.shape[1], dtype=np.int64)
            for node, milli in columns.get(priority, {}).items():
                want[slot[node]] = milli
            assert (array[0] == want).all()


TestIndexMachine = IndexMachine.TestCase
