"""Pods asking `nvidia.com/gpu`, which a DeviceClass maps, on a cluster half moved to DRA (node
`plugin` offers 4 in its allocatable, node `dra` publishes 8 DRA GPUs), placed as the scheduler's
cycle places them (the form to try first, as it is on the device plugin's node, then with its
made claim on the other; `ClaimCharges.first_form`, `place_dra_form`) and forgotten, in any
order (a Hypothesis state machine): a pod is placed whenever either node has room for it, the
device plugin's GPUs are never over-given, no claim's device is held twice, a pod on `dra` is
the form with its claim and one on `plugin` the form without, and a forgotten pod waits again,
charged nothing."""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from scheduler.claims.model import DeviceId
from scheduler.runtime.claims.extended import with_extended_claim
from scheduler.runtime.claims.placing import ClaimRefusal
from scheduler.runtime.claims.podrefs import has_claims
from scheduler.runtime.cluster.podinfo import PodInfo
from tests.builders.claimruntime import claim_runtime
from tests.builders.claims import class_obj, island_devices, slice_obj
from tests.builders.nodes import node_obj
from tests.builders.pods import container, pod

GPU = "nvidia.com/gpu"
PLUGIN_GPUS, DRA_GPUS = 4, 8


def _gpu_pod(name: str, gpus: int) -> dict[str, Any]:
    limits = {"cpu": "1", GPU: str(gpus)}
    body = pod(name, containers=[container(limits=limits)], schedulerName="gputopo-scheduler")
    body["metadata"].update(uid=f"uid-{name}", namespace="ns")
    return body


class ExtendedFormsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        mapping = class_obj()
        mapping["spec"]["extendedResourceName"] = GPU
        self.rt = claim_runtime([mapping], [slice_obj("dra", island_devices())])
        self.cache, self.book = self.rt.cache, self.rt.book
        self.charges, self.placer = self.rt.charges, self.rt.placer
        self.cache.upsert_node(node_obj("plugin", gpus=PLUGIN_GPUS))
        self.cache.upsert_node(node_obj("dra", gpus=0))
        self.counts: dict[str, int] = {}
        self.placed: set[str] = set()
        self.made = 0

    def _used(self, node: str) -> int:
        return sum(self.counts[p] for p in self.placed if self._info(p).node == node)

    def _info(self, name: str) -> PodInfo:
        return self.rt.pod(name)

    @rule(gpus=st.integers(1, 5))
    def place_one(self, gpus: int) -> None:
        self.made += 1
        name = f"p{self.made}"
        read = self.cache.read_pod(_gpu_pod(name, gpus))
        info = with_extended_claim(read, self.book, self.cache)
        self.cache.upsert_pod(info.obj, info)
        self.counts[name] = gpus
        room = {
            n: total - self._used(n) for n, total in (("plugin", PLUGIN_GPUS), ("dra", DRA_GPUS))
        }
        info = self.charges.first_form(self._info(name))
        assert not has_claims(info.obj)  # a node offers the resource: as it is first
        decision = self.placer.decide(info.request)
        if decision.assignment is not None:
            assert decision.assignment.node == "plugin"
            self.cache.assume(info.key, decision.assignment)
            self.placed.add(name)
            return
        assert room["plugin"] < gpus
        placed = self.charges.place_dra_form(self.placer, info, None)
        if isinstance(placed, ClaimRefusal):
            assert room["dra"] < gpus
            assert self._info(name) is info  # the form as it is, waiting again
            assert "with a claim for nvidia.com/gpu" in placed.message
        else:
            assert placed is not None
            form, where = placed
            assert where.assignment.node == "dra"
            assert self._info(name) is form
            self.placed.add(name)

    @precondition(lambda self: self.placed)
    @rule(data=st.data())
    def forget_one(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.placed)))
        assert self.charges.forget(self._info(name).key)
        self.placed.discard(name)
        info = self._info(name)
        assert info.node is None
        again = self.charges.first_form(info)  # the next try: as it is first
        assert not has_claims(again.obj)
        assert again.request.gpus == self.counts[name]

    @invariant()
    def each_node_gives_its_gpus_one_way_and_never_twice(self) -> None:
        seen: set[DeviceId] = set()
        for name in self.placed:
            info = self._info(name)
            held = self.charges.held(info.key)
            if info.node == "plugin":
                assert held is None
                assert not has_claims(info.obj)
            else:
                assert info.node == "dra"
                assert held is not None
                devices = {d.id for c in held.decision.claims for d in c.allocation.devices}
                assert len(devices) == self.counts[name]
                assert not seen & devices
                seen |= devices
        assert self._used("plugin") <= PLUGIN_GPUS
        assert self.book.usage().exclusive == seen
        waiting = [i for i in self.cache.pods.values() if i.node is None]
        assert all(not i.claim_shares for i in waiting)


TestExtendedForms = ExtendedFormsMachine.TestCase
TestExtendedForms.settings = settings(max_examples=30, stateful_step_count=14, deadline=None)
