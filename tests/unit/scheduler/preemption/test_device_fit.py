"""The victim search for a pod whose devices are decided apart from placement (its DRA claims,
`Preemptor.devices`): a node takes it only where its devices fit with the victims gone, and the
reprieve gives back every victim whose devices it does not need."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import assume, given
from hypothesis import strategies as st

from scheduler.preemption import DeviceFit, NoChoice, Preemptor, VictimChoice
from tests.builders.placement import pod
from tests.builders.preemption import world


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
    w = world("a", "b")
    for node in ("a", "b"):
        for i, priority in enumerate(priorities):
            w.run(f"{node}-{i}", [(node, pod(f"ns/{node}-{i}", gpus=1))], priority=priority)
    wanted = frozenset(f"ns/{where}-{i}" for i in needed if i < len(priorities))
    assume(wanted)
    choice = w.find(claim_pod(NeedsGone(where, wanted)))
    eligible = all(priorities[int(k.rsplit("-", 1)[1])] < 10 for k in wanted)
    if not eligible:
        assert isinstance(choice, NoChoice)
        return
    assert isinstance(choice, VictimChoice), choice
    assert set(choice.pods) == wanted  # nothing more: placement needs no room for U
    assert choice.nodes == {"ns/u-0": where}
