"""Preemption with GPU shares (DESIGN §11, §12): evicting shares frees their memory on their GPU,
and the search takes only as many as the preemptor needs there."""

from __future__ import annotations

from scheduler.placement import Snapshot
from scheduler.preemption import Preemptor, VictimChoice
from scheduler.quota import QuotaTree
from tests.builders.placement import GIB, share, share_pod, shared_node
from tests.builders.preemption import World


def test_a_share_evicts_just_enough_shares_on_one_gpu():
    w = World(Snapshot([shared_node("s", shared=2, slots=4)]), QuotaTree.build(()))
    for i in range(6):
        w.run(f"low-{i}", [("s", share_pod(f"ns/low-{i}", share(memory=25 * GIB)))], started=i)
    node = w.snapshot.node("s")
    assert max(node.memory_free) < 40 * GIB  # the 40Gi share fits on neither GPU as it is
    big = share_pod("ns/big-0", share(memory=40 * GIB))
    choice = w.find(Preemptor(key="big", pods=(big,), leaf="default", priority=10))
    assert isinstance(choice, VictimChoice), choice
    evicted = {e.unit for e in choice.evictions}
    gpus = {node.pods[f"ns/{unit}"][1].shares[0].gpu for unit in evicted}
    assert len(evicted) == 2  # two 25Gi shares of one GPU free 55Gi there (one frees 30Gi)
    assert len(gpus) == 1
    assert choice.nodes == {"ns/big-0": "s"}


def test_the_index_counts_what_evicting_a_share_frees_on_its_node():
    w = World(Snapshot([shared_node("s", shared=2, slots=4)]), QuotaTree.build(()))
    w.run("low-0", [("s", share_pod("ns/low-0", share(memory=20 * GIB)))], started=0)
    w.run("low-1", [("s", share_pod("ns/low-1", share(memory=20 * GIB, compute=50)))], started=1)
    placed = [w.snapshot.node("s").pods[f"ns/low-{i}"][1].shares[0] for i in (0, 1)]
    milli = sum(s.milli for s in placed)
    assert milli == 250 + 500  # 20Gi of an 80Gi GPU; then half its compute
    freed = w.index.freed("default", 0)["s"]
    assert freed[0] == milli
    slot = w.index.columns.slot_of("s")
    assert w.index.freed_columns(0)[0, slot] == milli
    w.index.remove("low-1")
    assert w.index.freed("default", 0)["s"][0] == placed[0].milli
    assert w.index.freed_columns(0)[0, slot] == placed[0].milli
