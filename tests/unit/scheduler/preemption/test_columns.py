"""NodeColumns: free capacity per node slot, caught up from the snapshot's change tracking."""

from __future__ import annotations

from scheduler.placement import Snapshot
from scheduler.preemption.columns import NodeColumns
from tests.builders.placement import make_node, pod


def test_columns_follow_assumes_removals_and_new_nodes() -> None:
    snapshot = Snapshot([make_node("a"), make_node("b")])
    columns = NodeColumns(snapshot)
    free = columns.refresh()
    a, b = columns.slot["a"], columns.slot["b"]
    assert free[0, a] == free[0, b] == 8000
    snapshot.assume_on(pod("ns/x", gpus=3), "a")
    snapshot.remove_node("b")
    snapshot.add_node(make_node("c", gpus=4))
    free = columns.refresh()
    assert free[0, a] == 5000
    assert free[0, b] < 0  # gone: never passes a bound
    assert free[0, columns.slot["c"]] == 4000
    assert [
        columns.names[i] for i in sorted(columns.slot.values(), key=lambda s: columns.rank()[s])
    ] == ["a", "b", "c"]


def test_a_snapshot_changed_beyond_its_memory_is_read_again_whole() -> None:
    snapshot = Snapshot([make_node("a"), make_node("b")])
    columns = NodeColumns(snapshot)
    columns.refresh()
    snapshot.remove_node("b")
    for i in range(5000):  # more removals than the snapshot remembers
        snapshot.add_node(make_node(f"t{i}", gpus=0))
        snapshot.remove_node(f"t{i}")
    assert snapshot.changed_since(0) is None
    free = columns.refresh()
    assert free[0, columns.slot["b"]] < 0
    assert free[0, columns.slot["a"]] == 8000
