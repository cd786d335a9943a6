"""The runtime's `Placer` follows the `ClusterCache` by itself: nodes, NRTs and foreign pods coming
and going, our own assume / forget, each decision the same as `pick` on the live snapshot."""

from __future__ import annotations

import random

from agent.objkey import ObjectKey, object_key
from scheduler.placement import Decision, Placer, PodRequest, default_scoring
from scheduler.placement.pick import pick
from scheduler.runtime.cluster.cache import ClusterCache
from tests.builders.nodes import bound_pod, node_obj
from tests.builders.nrt import make_nrt
from tests.builders.pods import container, pod
from tests.builders.topology import dgx_h100, gpu_uuid

GIB = 1 << 30


def ours(name: str, gpus: int) -> dict:
    body = pod(
        name,
        containers=[container(limits={"nvidia.com/gpu": gpus, "cpu": "2"})],
        schedulerName="gputopo-scheduler",
    )
    body["metadata"]["uid"] = f"uid-{name}"
    return body


def same(got: Decision, expected: Decision) -> None:
    assert (got.assignment, got.score) == (expected.assignment, expected.score)
    if expected.assignment is None:
        assert got.message() == expected.message()


def test_placer_follows_every_kind_of_cache_change():
    cache = ClusterCache("gputopo-scheduler")
    scoring = default_scoring()
    placer = Placer(cache.snapshot, scoring)
    rng = random.Random(5)
    for i in range(6):
        cache.upsert_node(node_obj(f"n{i}", gpus=rng.choice((4, 8))))
    cache.upsert_nrt(make_nrt("n1", dgx_h100(), {("default", "f-n1"): [gpu_uuid(5)]}))
    assumed: list[ObjectKey] = []
    for step in range(60):
        roll = rng.random()
        if roll < 0.1:
            name = f"n{rng.randrange(8)}"
            cordon = [{"key": "maintenance", "effect": "NoSchedule"}] if rng.random() < 0.5 else []
            cache.upsert_node(node_obj(name, gpus=rng.choice((4, 8)), taints=cordon))
        elif roll < 0.15:
            cache.delete_node(f"n{rng.randrange(8)}")
        elif roll < 0.3:
            cache.upsert_pod(bound_pod(f"f{step}", f"n{rng.randrange(8)}", rng.choice((1, 2))))
        elif roll < 0.4 and assumed:
            cache.forget(assumed.pop(rng.randrange(len(assumed))))
        else:
            obj = ours(f"p{step}", rng.choice((1, 2, 4)))
            cache.upsert_pod(obj)
            key = object_key("default", f"p{step}")
            request: PodRequest = cache.pods[key].request
            expected = pick(request, cache.snapshot, scoring)
            same(placer.decide(request), expected)
            if expected.assignment is not None:
                cache.assume(key, expected.assignment)
                assumed.append(key)
    assert assumed
