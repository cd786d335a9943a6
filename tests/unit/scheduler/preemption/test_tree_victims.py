"""The victim search for a tree of pod groups with a topology below its root
(`Preemptor.tree`, CompositePodGroups): an area takes the tree only where its walk places it
group by group (`place_subtree`), each PodGroup inside one rack, as the gang tracker will."""

from __future__ import annotations

from collections import Counter

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from agent.objkey import ObjectKey
from scheduler.placement import Snapshot, TopologyConstraint, Tree
from scheduler.preemption import NoChoice, Preemptor, TreeDemand, VictimChoice
from scheduler.quota import QuotaTree
from tests.builders.placement import make_node, pod
from tests.builders.preemption import World

RACK = "gputopo.io/rack"
IN_A_RACK = TopologyConstraint(label=RACK)


def racked(layout: dict[str, str], gpus: int = 4) -> World:
    """Nodes of `gpus` GPUs, node -> its rack."""
    nodes = Snapshot(make_node(n, gpus=gpus, labels={RACK: r}) for n, r in layout.items())
    return World(nodes, QuotaTree.build(()))


def tree_of(groups: int, pods: int, gpus: int, *, need: int | None = None) -> Preemptor:
    """U: a root over `groups` PodGroups of `pods` x `gpus` GPUs, each in one rack (minCount
    `pods`); the root needs `need` of them (default: all)."""
    leaves = tuple(
        Tree(ObjectKey(f"ns/g{i}"), pods, leaf=True, topology=IN_A_RACK) for i in range(groups)
    )
    root = Tree(ObjectKey("ns/job"), groups if need is None else need, leaves)
    members = [pod(f"ns/g{i}-{j}", gpus=gpus) for i in range(groups) for j in range(pods)]
    owner = {p.key: ObjectKey(p.key.rsplit("-", 1)[0]) for p in members}
    demand = TreeDemand(tree=root, groups=owner)
    return Preemptor(key="ns/job", pods=tuple(members), leaf="default", priority=10, tree=demand)


def _racks_by_group(w: World, choice: VictimChoice) -> dict[str, set[str]]:
    racks: dict[str, set[str]] = {}
    for key, node in choice.nodes.items():
        racks.setdefault(key.rsplit("-", 1)[0], set()).add(w.snapshot.node(node).labels[RACK])
    return racks


def test_each_podgroup_gets_a_rack_of_its_own() -> None:
    """Two racks of two 4-GPU nodes, one 1-GPU pod on every node: a tree of two PodGroups of
    2 x 4 GPUs takes every pod, and each group is nominated onto a whole rack."""
    w = racked({"n1": "r1", "n2": "r1", "n3": "r2", "n4": "r2"})
    for node in ("n1", "n2", "n3", "n4"):
        w.run(f"low-{node}", [(node, pod(f"ns/low-{node}", gpus=1))])
    choice = w.find(tree_of(2, 2, 4))
    assert isinstance(choice, VictimChoice), choice
    assert len(choice.pods) == 4
    assert _racks_by_group(w, choice) == {"ns/g0": {"r1"}, "ns/g1": {"r2"}}


def test_no_eviction_when_no_two_racks_can_hold_the_tree() -> None:
    """Three racks of one 4-GPU node each: a PodGroup of 2 x 4 GPUs fits no rack, so no victim
    set lets the tree start, though the GPUs freed would cover its 16 GPUs in all."""
    w = racked({"n1": "r1", "n2": "r2", "n3": "r3", "n4": "r4"})
    for node in ("n1", "n2", "n3", "n4"):
        w.run(f"low-{node}", [(node, pod(f"ns/low-{node}", gpus=4))])
    choice = w.find(tree_of(2, 2, 4))
    assert isinstance(choice, NoChoice), choice


def test_a_group_goes_to_the_rack_its_placed_sibling_holds() -> None:
    """A replica (a CompositePodGroup in one rack) over PodGroups g0 and g1, g0 already placed
    on n1 (rack r1): g1 is nominated in r1, evicting the pod on n2, though r2 is empty."""
    w = racked({"n1": "r1", "n2": "r1", "n3": "r2", "n4": "r2"})
    w.run("g0", [("n1", pod("ns/g0-0", gpus=4))], priority=10)
    w.run("low-n2", [("n2", pod("ns/low-n2", gpus=4))])
    leaves = tuple(Tree(ObjectKey(f"ns/g{i}"), 1, leaf=True) for i in range(2))
    replica = Tree(ObjectKey("ns/replica"), 2, leaves, topology=IN_A_RACK)
    demand = TreeDemand(
        tree=Tree(ObjectKey("ns/job"), 1, (replica,)),
        groups={"ns/g1-0": ObjectKey("ns/g1")},
        held={ObjectKey("ns/g0"): ("n1",)},
    )
    u = Preemptor(
        key="ns/job", pods=(pod("ns/g1-0", gpus=4),), leaf="default", priority=10, tree=demand
    )
    choice = w.find(u)
    assert isinstance(choice, VictimChoice), choice
    assert choice.nodes == {"ns/g1-0": "n2"}
    assert choice.pods == ("ns/low-n2",)


def test_a_rack_only_partly_among_the_nodes_that_fit_now_is_searched_whole() -> None:
    """Racks r0 (n0-0, n1-0), r1 (n0-1), r2 (n0-2), r3 (n0-3, n1-3), a 1-GPU pod on n0-0: a
    tree of two PodGroups of 2 x 4 GPUs needs r0 and r3. The nodes that fit now, cut to U's
    four pods in name order, leave n1-3 out; the area still takes r3 whole, and the tree
    evicts the one pod (before, the search found no choice)."""
    layout = {"n0-0": "r0", "n1-0": "r0", "n0-1": "r1", "n0-2": "r2", "n0-3": "r3", "n1-3": "r3"}
    w = racked(layout)
    w.run("low-0", [("n0-0", pod("ns/low-0", gpus=1))])
    choice = w.find(tree_of(2, 2, 4))
    assert isinstance(choice, VictimChoice), choice
    assert choice.pods == ("ns/low-0",)
    assert sorted(_racks_by_group(w, choice).values()) == [{"r0"}, {"r3"}]


@settings(max_examples=60, deadline=None)
@given(
    racks=st.lists(st.integers(1, 3), min_size=2, max_size=4),
    low=st.lists(st.tuples(st.integers(0, 11), st.sampled_from([1, 2, 4])), max_size=10),
    pods=st.integers(1, 2),
    gpus=st.sampled_from([2, 4]),
)
def test_a_choice_puts_each_group_in_one_rack_and_none_is_missed(
    racks: list[int], low: list[tuple[int, int]], pods: int, gpus: int
) -> None:
    """Random racks (1-3 nodes of 4 GPUs each) and low-priority pods: when the search chooses,
    each PodGroup of U is nominated inside one rack on nodes with room once the victims are
    gone; when it finds nothing, not even every low pod gone lets the racks hold the tree."""
    layout = {f"n{i}-{r}": f"r{r}" for r, count in enumerate(racks) for i in range(count)}
    w = racked(layout)
    names = sorted(layout)
    used: Counter[str] = Counter()
    for i, (at, size) in enumerate(low):
        node = names[at % len(names)]
        if used[node] + size <= 4:
            used[node] += size
            w.run(f"low-{i}", [(node, pod(f"ns/low-{i}", gpus=size))], started=float(i))
    free = [
        sum((4 - used[n]) // gpus for n in names if layout[n] == f"r{r}") for r in range(len(racks))
    ]
    assume(not _slots_hold(free, pods))  # the tree fits now: nothing to search for
    choice = w.find(tree_of(2, pods, gpus))
    if isinstance(choice, NoChoice):
        assert not _slots_hold([count * (4 // gpus) for count in racks], pods)
        return
    assert all(len(r) == 1 for r in _racks_by_group(w, choice).values())
    gone = set(choice.pods)
    for node in names:
        asked = sum(gpus for n in choice.nodes.values() if n == node)
        kept = sum(p.gpus for p, _a in w.snapshot.node(node).pods.values() if p.key not in gone)
        assert asked + kept <= 4


def _slots_hold(slots: list[int], pods: int) -> bool:
    """Whether racks with room for `slots` more pods each hold two groups of `pods` pods, each
    group inside one rack (two racks, or one holding both)."""
    return max(slots) >= 2 * pods or sum(1 for s in slots if s >= pods) >= 2
