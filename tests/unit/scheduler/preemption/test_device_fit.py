"""The victim search for a pod whose devices are decided apart from placement (its DRA claims,
`Preemptor.devices`): a node takes it only where its devices fit with the victims gone, and the
reprieve gives back every victim whose devices it does not need. A gang's devices are decided
together (`Preemptor.gang_devices`), each member on a node where the rest of it fits."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from hypothesis import assume, given
from hypothesis import strategies as st

from scheduler.placement.node import GPU_PRODUCT_LABEL
from scheduler.preemption import (
    Claimed,
    DeviceFit,
    GangDeviceFit,
    NoChoice,
    PreemptionSettings,
    Preemptor,
    VictimChoice,
)
from tests.builders.placement import pod
from tests.builders.preemption import GPU, G, World, queue, world


@dataclass
class NeedsGone:
    """U's devices fit on `node` once every pod of `needed` is gone (asked: what was tried)."""

    node: str
    needed: frozenset[str]
    asked: list[tuple[str, frozenset[str]]] = field(default_factory=list)

    def fits(self, node: str, gone: frozenset[str]) -> bool:
        self.asked.append((node, gone))
        return node == self.node and self.needed <= gone


def claim_pod(devices: DeviceFit, priority: int = 10) -> Preemptor:
    """U: one pod asking no GPU of placement (its GPUs come from its claims)."""
    return Preemptor(
        key="u", pods=(pod("ns/u-0"),), leaf="default", priority=priority, devices=devices
    )


def test_the_victims_are_those_whose_devices_the_pod_needs_on_one_node() -> None:
    w = world("a", "b")
    w.fill("a", 8, prefix="pa", priority=0)
    w.fill("b", 8, prefix="pb", priority=0)
    devices = NeedsGone("b", frozenset({"ns/pb-2", "ns/pb-5"}))
    _: DeviceFit = devices
    choice = w.find(claim_pod(devices))
    assert isinstance(choice, VictimChoice), choice
    assert sorted(choice.pods) == ["ns/pb-2", "ns/pb-5"]
    assert choice.nodes == {"ns/u-0": "b"}
    assert ("b", frozenset({"ns/pb-2", "ns/pb-5"})) in devices.asked


def test_devices_that_need_a_higher_priority_pod_gone_find_no_victims() -> None:
    w = world("a")
    w.fill("a", 4, prefix="low", priority=0)
    w.fill("a", 4, prefix="high", priority=50)
    choice = w.find(claim_pod(NeedsGone("a", frozenset({"ns/low-0", "ns/high-1"}))))
    assert isinstance(choice, NoChoice), choice
    assert "would still not fit the pod" in choice.reason


@given(
    priorities=st.lists(st.integers(0, 20), min_size=2, max_size=8),
    needed=st.sets(st.integers(0, 7), min_size=1, max_size=4),
    where=st.sampled_from(["a", "b"]),
)
def test_a_choice_takes_exactly_the_needed_pods_when_they_may_be_evicted(
    priorities: list[int], needed: set[int], where: str
) -> None:
    w = ranked_world(("a", "b"), priorities)
    wanted = frozenset(f"ns/{where}-{i}" for i in needed if i < len(priorities))
    assume(wanted)
    choice = exactly(w.find(claim_pod(NeedsGone(where, wanted))), wanted, priorities)
    assert choice is None or choice.nodes == {"ns/u-0": where}


def ranked_world(nodes: Sequence[str], priorities: Sequence[int]) -> World:
    """`nodes`, each with a 1-GPU pod `<node>-<i>` of each priority in `priorities`."""
    w = world(*nodes)
    for node in nodes:
        for i, priority in enumerate(priorities):
            w.run(f"{node}-{i}", [(node, pod(f"ns/{node}-{i}", gpus=1))], priority=priority)
    return w


def exactly(
    choice: VictimChoice | NoChoice, wanted: frozenset[str], priorities: Sequence[int]
) -> VictimChoice | None:
    """`choice` takes exactly the pods `wanted` when U (priority 10) may evict them all, else
    it is no choice (None then)."""
    eligible = all(priorities[int(k.rsplit("-", 1)[1])] < 10 for k in wanted)
    if not eligible:
        assert isinstance(choice, NoChoice)
        return None
    assert isinstance(choice, VictimChoice), choice
    assert set(choice.pods) == wanted  # nothing more: placement needs no room for U
    return choice


@dataclass
class GangNeedsGone:
    """Each pod of U has its devices on the first of its options (node, pods that must be gone
    there) whose node is offered and whose pods are gone (asked: the nodes offered)."""

    options: Mapping[str, Sequence[tuple[str, frozenset[str]]]]
    asked: list[tuple[tuple[str, ...], frozenset[str]]] = field(default_factory=list)

    def place(self, nodes: Sequence[str], gone: frozenset[str]) -> Mapping[str, str] | None:
        self.asked.append((tuple(nodes), gone))
        where = {}
        for key, options in self.options.items():
            usable = [node for node, needed in options if node in nodes and needed <= gone]
            if not usable:
                return None
            where[key] = usable[0]
        return where


def claim_gang(
    devices: GangDeviceFit, members: int = 2, priority: int = 10, **kw: int
) -> Preemptor:
    """U: a gang of pods asking no GPU of placement (their GPUs come from their claims)."""
    pods = tuple(pod(f"ns/u-{i}", **kw) for i in range(members))
    return Preemptor(key="u", pods=pods, leaf="default", priority=priority, gang_devices=devices)


def _needs(node: str, *keys: str) -> tuple[str, frozenset[str]]:
    return node, frozenset(f"ns/{k}" for k in keys)


def test_a_gangs_victims_are_those_its_members_devices_need_on_their_nodes() -> None:
    w = world("a", "b", "c")
    for node in ("a", "b", "c"):
        w.fill(node, 8, prefix=f"p{node}", priority=0)
    devices = GangNeedsGone(
        {"ns/u-0": [_needs("a", "pa-1", "pa-2")], "ns/u-1": [_needs("c", "pc-7")]}
    )
    choice = w.find(claim_gang(devices))
    assert isinstance(choice, VictimChoice), choice
    assert sorted(choice.pods) == ["ns/pa-1", "ns/pa-2", "ns/pc-7"]
    assert choice.nodes == {"ns/u-0": "a", "ns/u-1": "c"}
    assert choice.gpus == 3


def test_members_go_only_where_the_rest_of_them_fits() -> None:
    """The devices would go on a first, but the members select b's GPU model: both go to b, as
    the scheduler places them (on the nodes where every member fits the rest of it)."""
    w = world("a", "b", products={"a": "NVIDIA-H100-80GB-HBM3", "b": "NVIDIA-H200"})
    w.fill("a", 8, prefix="pa", priority=0)
    w.fill("b", 8, prefix="pb", priority=0)
    devices = GangNeedsGone(
        {
            "ns/u-0": [_needs("a", "pa-0"), _needs("b", "pb-0")],
            "ns/u-1": [_needs("a", "pa-3"), _needs("b", "pb-4", "pb-5")],
        }
    )
    choice = w.find(claim_gang(devices, node_selector={GPU_PRODUCT_LABEL: "NVIDIA-H200"}))
    assert isinstance(choice, VictimChoice), choice
    assert choice.nodes == {"ns/u-0": "b", "ns/u-1": "b"}
    assert sorted(choice.pods) == ["ns/pb-0", "ns/pb-4", "ns/pb-5"]
    assert any("a" in nodes for nodes, _gone in devices.asked)  # a was in an area


def test_a_gang_whose_devices_need_a_higher_priority_pod_gone_finds_no_victims() -> None:
    w = world("a", "b")
    w.fill("a", 8, prefix="low", priority=0)
    w.fill("b", 4, prefix="high", priority=50)
    devices = GangNeedsGone({"ns/u-0": [_needs("a", "low-0")], "ns/u-1": [_needs("b", "high-1")]})
    choice = w.find(claim_gang(devices))
    assert isinstance(choice, NoChoice), choice
    assert "would still not fit the pod group" in choice.reason


@given(
    priorities=st.lists(st.integers(0, 20), min_size=2, max_size=8),
    needed=st.lists(st.sets(st.integers(0, 7), min_size=1, max_size=3), min_size=2, max_size=3),
    nodes=st.lists(st.sampled_from(["a", "b", "c"]), min_size=3, max_size=3),
)
def test_a_gangs_choice_takes_exactly_what_its_members_devices_need(
    priorities: list[int], needed: list[set[int]], nodes: list[str]
) -> None:
    w = ranked_world(("a", "b", "c"), priorities)
    wants = {
        f"ns/u-{m}": frozenset(f"ns/{nodes[m]}-{i}" for i in want if i < len(priorities))
        for m, want in enumerate(needed)
    }
    options = {key: [(nodes[m], want)] for m, (key, want) in enumerate(wants.items())}
    wanted = frozenset().union(*wants.values())
    assume(wanted)
    found = w.find(claim_gang(GangNeedsGone(options), members=len(needed)))
    choice = exactly(found, wanted, priorities)
    assert choice is None or choice.nodes == {key: nodes[m] for m, key in enumerate(wants)}


class FitsAnywhere:
    def fits(self, node: str, gone: frozenset[str]) -> bool:
        return True


def test_what_the_claims_will_be_charged_counts_against_the_queues_max() -> None:
    """Queue a (max 8 GPUs) runs 8 one-GPU pods on n1, n2 is free, and U's devices fit
    anywhere. As U asks (no GPU of placement) it fits now; once what its claims will be charged
    (2 GPUs) counts, the search evicts exactly two of a's pods to bring a under its max."""
    w = world("n1", "n2", queues=[queue("a", max={GPU: 8})])
    w.fill("n1", 8, prefix="a-low", leaf="a", priority=0)
    base = replace(claim_pod(FitsAnywhere()), leaf="a")
    unclaimed = w.find(base)
    assert isinstance(unclaimed, VictimChoice), unclaimed
    assert unclaimed.pods == ()
    choice = w.find(replace(base, claimed=Claimed(amounts={GPU: 2 * G}, gpus={"ns/u-0": 2})))
    assert isinstance(choice, VictimChoice), choice
    assert len(choice.pods) == 2
    assert all(key.startswith("ns/a-low") for key in choice.pods)


def cpu_victims_first(limit: int = 4) -> tuple[World, PreemptionSettings]:
    """n00-n07: a higher-priority 8-GPU pod and a low cpu pod each; n08, n09: eight low 1-GPU
    pods each; `limit` candidates a search."""
    names = [f"n{i:02}" for i in range(10)]
    w = world(*names)
    for name in names[:8]:
        w.run(f"{name}-big", [(name, pod(f"ns/{name}-big", gpus=8))], priority=100)
        w.run(f"{name}-cpu", [(name, pod(f"ns/{name}-cpu", cpu_milli=1000))], priority=0)
    for name in names[8:]:
        w.fill(name, 8, prefix=name, priority=0)
    return w, PreemptionSettings(candidate_limit=limit)


def test_candidates_need_room_for_the_gpus_the_claims_take() -> None:
    """The first nodes by name free cpu only: a pod whose claims take 2 GPUs is looked for
    where 2 GPUs can come free, and found on n09."""
    w, settings = cpu_victims_first()
    devices = NeedsGone("n09", frozenset({"ns/n09-0", "ns/n09-1"}))
    blind = w.find(claim_pod(devices), settings)
    assert isinstance(blind, NoChoice), blind  # n00-n03 tried: their room is cpu only
    found = w.find(replace(claim_pod(devices), claimed=Claimed(gpus={"ns/u-0": 2})), settings)
    assert isinstance(found, VictimChoice), found
    assert sorted(found.pods) == ["ns/n09-0", "ns/n09-1"]


def test_a_gangs_candidates_need_room_for_each_members_claimed_gpus() -> None:
    w, settings = cpu_victims_first()
    devices = GangNeedsGone(
        {"ns/u-0": [_needs("n08", "n08-0", "n08-1")], "ns/u-1": [_needs("n09", "n09-0")]}
    )
    blind = w.find(claim_gang(devices), settings)
    assert isinstance(blind, NoChoice), blind
    claimed = Claimed(gpus={"ns/u-0": 2, "ns/u-1": 1})
    found = w.find(replace(claim_gang(devices), claimed=claimed), settings)
    assert isinstance(found, VictimChoice), found
    assert sorted(found.pods) == ["ns/n08-0", "ns/n08-1", "ns/n09-0"]
    assert found.nodes == {"ns/u-0": "n08", "ns/u-1": "n09"}
