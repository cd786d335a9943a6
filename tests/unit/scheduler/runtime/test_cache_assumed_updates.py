"""A pod this scheduler assumed on a node, updated before the API shows it bound (its status
written during the bind, as the claim made for its extended resources is named there): the
cache keeps the request it was assumed with (a claim pod's: the GPUs its claims take, which a
reading of the pod lacks), so neither the node nor the pod's queue is uncharged meanwhile,
and nothing is rebuilt; the binding seen with that request is confirmed as before."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agent.objkey import object_key
from scheduler.placement import Placer, default_scoring
from scheduler.runtime.cluster.cache import ClusterCache
from tests.builders.nodes import node_obj
from tests.builders.pods import container, pod

KEY = object_key("default", "p")


def _assumed(gpus_charged: int) -> tuple[ClusterCache, dict[str, Any]]:
    cache = ClusterCache("gputopo-scheduler")
    cache.upsert_node(node_obj("n1", gpus=8))
    obj = pod("p", containers=[container(limits={"cpu": "1", "nvidia.com/gpu": "2"})],
              schedulerName="gputopo-scheduler")  # fmt: skip
    cache.upsert_pod(obj)
    info = cache.pods[KEY]
    decision = Placer(cache.snapshot, default_scoring()).decide(info.request)
    assert decision.assignment is not None
    info.request = replace(info.request, gpus=gpus_charged)  # as `ClaimCharges._hold` does
    cache.assume(KEY, decision.assignment)
    return cache, obj


def test_an_update_while_assumed_keeps_the_request_it_was_assumed_with_and_rebuilds_nothing():
    cache, obj = _assumed(gpus_charged=3)
    charged, version = cache.pods[KEY].request, cache.snapshot.nodes_version
    status = {"phase": "Pending", "extendedResourceClaimStatus": {"resourceClaimName": "c"}}
    cache.upsert_pod({**obj, "status": status})
    now = cache.pods[KEY]
    assert (now.node, now.assumed) == ("n1", True)
    assert now.request is charged
    assert now.obj["status"] == status
    assert cache.snapshot.nodes_version == version
    assert cache.snapshot.node("n1").pods[str(KEY)][0].gpus == 3


def test_the_binding_seen_with_the_request_it_was_assumed_with_is_confirmed_unrebuilt():
    cache, obj = _assumed(gpus_charged=2)
    version = cache.snapshot.nodes_version
    bound = {**obj, "spec": {**obj["spec"], "nodeName": "n1"}}
    cache.upsert_pod(bound)
    now = cache.pods[KEY]
    assert (now.node, now.assumed) == ("n1", False)
    assert cache.snapshot.nodes_version == version
