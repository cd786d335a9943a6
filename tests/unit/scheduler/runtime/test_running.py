"""The cache keeps the running units the victim search reads (`RunningIndex`) current on every pod
change: only this scheduler's pods on a node, never terminating or already chosen ones, a gang
as one unit with its members above `minMember` spare."""

from __future__ import annotations

from agent.objkey import object_key
from scheduler.runtime.cluster.cache import ClusterCache
from tests.builders.nodes import bound_pod, node_obj

NAME = "gputopo-scheduler"
GANG = "scheduling.x-k8s.io/pod-group"


def _cache() -> ClusterCache:
    cache = ClusterCache(NAME)
    cache.upsert_node(node_obj("n1"))
    return cache


def _ours(name: str, node: str = "n1", gpus: int = 1, **meta: object) -> dict:
    body = bound_pod(name, node, gpus, scheduler=NAME)
    body["metadata"].update(meta)
    return body


def test_a_bound_pod_of_ours_is_a_unit_and_leaves_when_it_terminates_or_goes():
    cache = _cache()
    cache.upsert_pod(_ours("p"))
    cache.upsert_pod(bound_pod("foreign", "n1", 1))
    index = cache.running.index
    assert [u.key for u in index] == ["pod/default/p"]
    assert index.on_node("n1")[0].pods == ("default/p",)
    cache.upsert_pod(_ours("p", deletionTimestamp="2026-01-01T00:00:00Z"))
    assert len(index) == 0
    cache.upsert_pod(_ours("q"))
    cache.delete_pod(object_key("default", "q"))
    assert len(index) == 0


def test_a_pod_seen_before_its_node_becomes_a_unit_with_its_place_when_the_node_arrives():
    cache = ClusterCache(NAME)
    cache.upsert_pod(_ours("p"))
    assert cache.running.index.places("pod/default/p") == ()
    cache.upsert_node(node_obj("n1"))
    assert [p.node for p in cache.running.index.places("pod/default/p")] == ["n1"]


def test_chosen_victims_are_never_chosen_again_until_their_eviction_failed():
    cache = _cache()
    cache.upsert_pod(_ours("p"))
    key = object_key("default", "p")
    cache.doom([key])
    assert len(cache.running.index) == 0
    cache.upsert_pod(_ours("p", resourceVersion="2"))  # the DisruptionTarget patch arrives
    assert len(cache.running.index) == 0
    cache.spare([key])
    assert [u.key for u in cache.running.index] == ["pod/default/p"]


def test_a_gang_is_one_unit_with_its_members_above_min_member_spare():
    cache = _cache()
    cache.upsert_group(
        {
            "metadata": {"name": "g", "namespace": "default", "uid": "g1"},
            "spec": {"minMember": 2},
        }
    )
    for i in range(3):
        body = _ours(f"m{i}", gpus=2)
        body["metadata"]["labels"] = {GANG: "g"}
        cache.upsert_pod(body)
    (unit,) = list(cache.running.index)
    assert (unit.key, len(unit.pods), unit.spare) == ("gang/default/g", 3, 1)
    cache.delete_pod(object_key("default", "m2"))
    (unit,) = list(cache.running.index)
    assert (len(unit.pods), unit.spare) == (2, 0)
