"""Hypothesis: share pods (init containers too) and whole-GPU pods arrive (placed by the
Placer on the cache's snapshot, assumed, then bound with the `gputopo.io/gpus` annotation the
binder writes) and leave; the scheduler's per-GPU share view always equals the one a fresh
cache (a restart) rebuilds from the same pod objects, and no shared GPU is overbooked or serves
a whole-GPU pod."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from scheduler.placement import Placer, default_scoring
from scheduler.runtime.cluster.cache import ClusterCache
from tests.builders.nodes import node_obj
from tests.builders.nrt import make_shared_nrt
from tests.builders.pods import container, pod, share_pod
from tests.builders.topology import dgx_h100, gpu_uuid

SCHEDULER = "gputopo-scheduler"
NODES = ("n1", "n2")


def fresh_cache(objects: dict[str, dict[str, Any]]) -> ClusterCache:
    cache = ClusterCache(SCHEDULER)
    for name in NODES:
        cache.upsert_node(node_obj(name, gpus=4, **{"nvidia.com/gpu.shared": "12"}))
        cache.upsert_nrt(make_shared_nrt(name, dgx_h100(), shared=(0, 1, 2), slots=4))
    for obj in objects.values():
        cache.upsert_pod(obj)
    return cache


def share_view(cache: ClusterCache) -> dict[str, tuple[list[int], ...]]:
    out = {}
    for name in NODES:
        node = cache.snapshot.node(name)
        shared = list(node.shared_gpus)
        out[name] = (
            [node.slots_free[g] for g in shared],
            [node.memory_free[g] for g in shared],
            [node.compute_free[g] for g in shared],
            [node.gpu_free[g] for g in shared],
        )
    return out


class SharedNodes(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.objects: dict[str, dict[str, Any]] = {}
        self.cache = fresh_cache({})
        self.count = 0

    def _arrive(self, body: dict[str, Any]) -> None:
        body["metadata"]["uid"] = f"uid-{body['metadata']['name']}"
        body["spec"]["schedulerName"] = SCHEDULER
        _old, info = self.cache.upsert_pod(body)
        decision = Placer(self.cache.snapshot, default_scoring()).decide(info.request)
        if decision.assignment is None:
            self.cache.delete_pod(info.key)
            return
        self.cache.assume(info.key, decision.assignment)
        bound = copy.deepcopy(body)
        bound["spec"]["nodeName"] = decision.assignment.node
        if decision.assignment.shares:
            chosen = {s.container: str(gpu_uuid(s.gpu)) for s in decision.assignment.shares}
            bound["metadata"]["annotations"] = {"gputopo.io/gpus": json.dumps(chosen)}
        self.cache.upsert_pod(bound)
        self.objects[info.key] = bound

    @rule(
        memory=st.sampled_from([None, "8Gi", "20Gi", "40Gi", "79Gi"]),
        compute=st.sampled_from([None, 10, 40, 100]),
        containers=st.integers(1, 2),
        inits=st.integers(0, 2),
    )
    def share_arrives(self, memory, compute, containers, inits):
        self.count += 1
        names = tuple(f"c{i}" for i in range(containers))
        init = tuple(f"i{i}" for i in range(inits))
        body = share_pod(
            f"s{self.count}", memory=memory, compute=compute, containers=names, init=init
        )
        self._arrive(body)

    @rule(gpus=st.integers(1, 2))
    def whole_arrives(self, gpus):
        self.count += 1
        limits = {"nvidia.com/gpu": gpus}
        self._arrive(pod(f"w{self.count}", containers=[container(limits=limits)]))

    @rule(data=st.data())
    def one_leaves(self, data):
        if self.objects:
            key = data.draw(st.sampled_from(sorted(self.objects)))
            del self.objects[key]
            self.cache.delete_pod(key)

    @invariant()
    def a_restart_rebuilds_the_same_view(self):
        assert share_view(self.cache) == share_view(fresh_cache(self.objects))

    @invariant()
    def no_shared_gpu_is_overbooked_or_serves_a_whole_pod(self):
        for name in NODES:
            node = self.cache.snapshot.node(name)
            for g in node.shared_gpus:
                assert node.slots_free[g] >= 0
                assert node.memory_free[g] >= 0
                assert node.compute_free[g] >= 0
                assert not any(g in a.gpus for _p, a in node.pods.values())


SharedNodes.TestCase.settings = settings(max_examples=25, stateful_step_count=25, deadline=None)
TestSharedNodes = SharedNodes.TestCase
