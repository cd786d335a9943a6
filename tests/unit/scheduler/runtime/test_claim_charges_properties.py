"""Pods with ResourceClaims placed, bound and forgotten on a live cache in any order (a Hypothesis
state machine): no device is held by two claims, every claim's devices are on its pod's node and
satisfy its count, a pod is charged exactly the whole GPUs its claims hold, a gang is placed all
or none, and forgetting a pod gives its devices and its request back; on nodes with a GPU map
(NRT) and on nodes without one (a foreign DRA driver's), where the GPUs are charged all the same
and a victim search counts them."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from scheduler.claims.model import DeviceId
from scheduler.runtime.claims.book import CLAIMS
from scheduler.runtime.claims.placing import ClaimRefusal
from tests.builders.claimruntime import claim_runtime
from tests.builders.claims import claim_obj, class_obj, island_devices, request, slice_obj
from tests.builders.claims import two_islands as islands_inventory
from tests.builders.nodes import node_obj
from tests.builders.nrt import make_nrt
from tests.builders.pods import container, pod

NODES = ("n1", "n2")
GPU = "nvidia.com/gpu"


def _claim_pod(name: str) -> dict:
    body = pod(name, containers=[container(limits={"cpu": "1"})], schedulerName="gputopo-scheduler")
    body["metadata"].update(uid=f"uid-{name}", namespace="ns")
    body["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": f"{name}-gpus"}]
    return body


def _packs(sizes: list[int], nodes: int) -> bool:
    """Do claims of `sizes` GPUs (each on one node) fit on `nodes` empty 8-GPU nodes?"""
    best = [8] * nodes
    for size in sorted(sizes, reverse=True):  # a few items: first-fit decreasing is exact here
        free = [i for i, room in enumerate(best) if room >= size]
        if not free:
            return False
        best[free[0]] -= size
    return True


class ClaimChargesMachine(RuleBasedStateMachine):
    MAPS = True  # each node has an NRT, so a GPU map (a foreign DRA driver's nodes have none)

    def __init__(self) -> None:
        super().__init__()
        rt = claim_runtime([class_obj()], [slice_obj(n, island_devices()) for n in NODES])
        self.cache, self.book, self.charges, self.placer = rt.cache, rt.book, rt.charges, rt.placer
        for name in NODES:
            self.cache.upsert_node(node_obj(name, gpus=8))
            if self.MAPS:
                self.cache.upsert_nrt(make_nrt(name, islands_inventory()))
        self.counts: dict[str, int] = {}  # pod name -> GPUs its claim asks
        self.placed: set[str] = set()
        self.made = 0

    def _new_pod(self, gpus: int) -> str:
        self.made += 1
        name = f"p{self.made}"
        self.book.apply(CLAIMS, "ADDED", claim_obj(f"{name}-gpus", request("gpus", gpus)))
        obj = _claim_pod(name)
        self.cache.upsert_pod(obj)
        self.counts[name] = gpus
        return name

    def _free(self, node: str) -> int:
        on = [p for p in self.placed if self.cache.pods[f"ns/{p}"].node == node]
        return 8 - sum(self.counts[p] for p in on)

    @rule(gpus=st.integers(1, 5))
    def place_one(self, gpus: int) -> None:
        room = max(self._free(n) for n in NODES)
        name = self._new_pod(gpus)
        placed = self.charges.place(self.placer, self.cache.pods[f"ns/{name}"], None)
        refused = isinstance(placed, ClaimRefusal)
        assert refused == (room < gpus)  # fits wherever enough devices are free
        if isinstance(placed, ClaimRefusal):
            assert f"claim ns/{name}-gpus request gpus" in placed.message
            assert placed.room  # more room would let it start: it may preempt
        else:
            self.placed.add(name)
            assert placed.request.gpus == gpus

    @rule(members=st.integers(2, 4), gpus=st.integers(1, 4))
    def place_gang(self, members: int, gpus: int) -> None:
        names = [self._new_pod(gpus) for _ in range(members)]
        infos = [self.cache.pods[f"ns/{n}"] for n in names]
        placed = self.charges.place_gang(self.placer, infos, None, None)
        held = [n for n in names if self.charges.held(self.cache.pods[f"ns/{n}"].key)]
        if isinstance(placed, ClaimRefusal):
            assert held == []  # none
            assert placed.room  # no queue here: only room keeps a gang out
        else:
            assert held == names  # or all
            self.placed.update(names)

    @rule(sizes=st.lists(st.integers(1, 8), min_size=1, max_size=3))
    def claimed_is_what_the_claims_take_on_empty_nodes(self, sizes: list[int]) -> None:
        """What a victim search charges a pod (or gang) for its claims: their whole GPUs, however
        full the nodes are now; nothing when together they fit no node even empty."""
        infos = [self.cache.pods[f"ns/{self._new_pod(gpus)}"] for gpus in sizes]
        claimed = self.charges.claimed(infos)
        fits = sum(sizes) <= 8 * len(NODES) and _packs(sizes, len(NODES))
        assert claimed.amounts == ({GPU: 1000 * sum(sizes)} if fits else {})
        on_maps = sum(sizes) if fits and self.MAPS else 0  # GPUs a node's map places
        assert sum(claimed.gpus.values()) == on_maps

    @precondition(lambda self: self.placed)
    @rule(data=st.data())
    def forget_one(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.placed)))
        key = self.cache.pods[f"ns/{name}"].key
        assert self.charges.forget(key)
        self.placed.discard(name)
        info = self.cache.pods[key]
        assert info.node is None
        assert info.request.gpus == 0

    @invariant()
    def no_device_twice_and_each_on_its_pods_node(self) -> None:
        seen: set[DeviceId] = set()
        for name in self.placed:
            key = self.cache.pods[f"ns/{name}"].key
            held = self.charges.held(key)
            assert held is not None
            info = self.cache.pods[key]
            devices = [d.id for c in held.decision.claims for d in c.allocation.devices]
            assert len(devices) == self.counts[name]
            assert not seen & set(devices)
            seen.update(devices)
            assert {d.pool for d in devices} == {info.node}
            assert info.request.gpus == self.counts[name]  # charged from the decision on
            assert len(held.assignment.gpus) == (self.counts[name] if self.MAPS else 0)
        assert self.book.usage().exclusive == seen


def test_claims_that_fit_empty_nodes_only_largest_first_are_charged():
    """Hypothesis's find: with pods holding CPU on both nodes, claims of 1, 5 and 8 GPUs placed
    in that order took a GPU of each node and left none whole for the 8 (charged nothing);
    largest first they fit (8 | 5 + 1)."""
    machine = ClaimChargesMachine()
    machine.place_one(gpus=4)
    machine.claimed_is_what_the_claims_take_on_empty_nodes(sizes=[1])
    machine.claimed_is_what_the_claims_take_on_empty_nodes(sizes=[1])
    machine.place_one(gpus=3)
    machine.place_gang(gpus=2, members=2)
    machine.placed.discard("p1")
    assert machine.charges.forget(machine.cache.pods["ns/p1"].key)
    machine.claimed_is_what_the_claims_take_on_empty_nodes(sizes=[1, 5, 8])
    machine.no_device_twice_and_each_on_its_pods_node()


TestClaimCharges = ClaimChargesMachine.TestCase
TestClaimCharges.settings = settings(max_examples=25, stateful_step_count=12, deadline=None)


class NoGpuMapMachine(ClaimChargesMachine):
    """The same on nodes without NRT: the claims' GPUs are charged though no map places them."""

    MAPS = False


TestClaimChargesWithoutGpuMaps = NoGpuMapMachine.TestCase
TestClaimChargesWithoutGpuMaps.settings = settings(
    max_examples=25, stateful_step_count=12, deadline=None
)
