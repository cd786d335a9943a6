from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.nrt import decode
from agent.objkey import object_key
from scheduler.placement import Assignment, Effect
from scheduler.runtime.cluster.cache import ClusterCache, parse_group
from scheduler.runtime.cluster.nodeview import (
    AllocatableMemo,
    SelectorCache,
    build_node_state,
    is_trusted,
    parse_node,
)
from scheduler.runtime.cluster.podinfo import read_pod
from tests.builders.nodes import bound_pod, node_obj
from tests.builders.nrt import make_nrt
from tests.builders.topology import dgx_h100, gpu_uuid, mig_mixed


def test_parse_node_reads_taints_and_allocatable():
    info = parse_node(
        node_obj("n1", taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}])
    )
    assert info.taints[0].effect is Effect.NO_SCHEDULE
    assert info.allocatable["cpu"] == 64000
    assert info.allocatable["nvidia.com/gpu"] == 8
    with pytest.raises(ValueError, match=r"node bad: .*status.allocatable\[cpu\]"):
        parse_node({"metadata": {"name": "bad"}, "status": {"allocatable": {"cpu": "many"}}})


def test_nodes_of_one_shape_share_one_reading_of_their_allocatable():
    memo = AllocatableMemo()
    a, b, bigger = (
        parse_node(node_obj(n, gpus=g), memo) for n, g in (("a", 8), ("b", 8), ("c", 4))
    )
    assert a.allocatable is b.allocatable
    assert (b.allocatable["nvidia.com/gpu"], bigger.allocatable["nvidia.com/gpu"]) == (8, 4)
    for _ in range(2):  # a malformed one is never kept: each reading says what is wrong
        with pytest.raises(ValueError, match=r"node bad: .*status.allocatable\[cpu\]"):
            parse_node({"metadata": {"name": "bad"}, "status": {"allocatable": {"cpu": "x"}}}, memo)
    with pytest.raises(ValueError, match=r"node odd: .*status.allocatable\[cpu\]"):
        parse_node({"metadata": {"name": "odd"}, "status": {"allocatable": {"cpu": [1]}}}, memo)


def test_foreign_pods_take_room_without_an_nrt():
    cache = ClusterCache("gputopo-scheduler")
    cache.upsert_node(node_obj("n1"))
    cache.upsert_pod(bound_pod("foreign", "n1", 3))
    state = cache.snapshot.node("n1")
    assert state.free("nvidia.com/gpu") == 5
    assert len(state.free_whole_gpus()) == 5


def test_trusted_nrt_says_which_gpus_are_free():
    inv = dgx_h100()
    # The kubelet gave GPUs 5 and 6 (not the ones the scheduler would predict) to the foreign pod.
    nrt = make_nrt("n1", inv, {("default", "foreign"): [gpu_uuid(5), gpu_uuid(6)]})
    cache = ClusterCache("gputopo-scheduler")
    cache.upsert_node(node_obj("n1"))
    assert cache.upsert_nrt(nrt) is None
    cache.upsert_pod(bound_pod("foreign", "n1", 2))
    state = cache.snapshot.node("n1")
    assert state.free_whole_gpus() == [0, 1, 2, 3, 4, 7]
    assert state.free("nvidia.com/gpu") == 6


def test_a_pod_on_a_trusted_nrt_is_charged_with_the_gpus_it_holds() -> None:
    """The NRT names GPUs 5 and 6 taken, the kubelet's pick for the one pod on the node: the pod
    is charged with them, so a clone without it (a victim search taking it out) has every GPU
    free."""
    nrt = make_nrt("n1", dgx_h100(), {("default", "foreign"): [gpu_uuid(5), gpu_uuid(6)]})
    cache = ClusterCache("gputopo-scheduler")
    cache.upsert_node(node_obj("n1"))
    cache.upsert_nrt(nrt)
    cache.upsert_pod(bound_pod("foreign", "n1", 2))
    key = object_key("default", "foreign")
    clone = cache.snapshot.node("n1").clone()
    assert clone.pods[key][1].gpus == (5, 6)
    clone.remove_pod(key)
    assert clone.free_whole_gpus() == list(range(8))


def test_gpus_a_trusted_nrt_has_taken_by_no_known_pod_stay_taken() -> None:
    """The NRT has three GPUs taken by the pod, which the cache reads as asking two: two are
    charged to it, and the third stays taken with the pod gone."""
    taken = [gpu_uuid(1), gpu_uuid(2), gpu_uuid(3)]
    nrt = make_nrt("n1", dgx_h100(), {("default", "a"): taken})
    cache = ClusterCache("gputopo-scheduler")
    cache.upsert_node(node_obj("n1"))
    cache.upsert_nrt(nrt)
    cache.upsert_pod(bound_pod("a", "n1", 2))
    clone = cache.snapshot.node("n1").clone()
    assert clone.free_whole_gpus() == [0, 4, 5, 6, 7]
    held = clone.pods[object_key("default", "a")][1].gpus
    assert len(held) == 2
    assert set(held) < {1, 2, 3}
    clone.remove_pod(object_key("default", "a"))
    assert len(clone.free_whole_gpus()) == 7


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 3), max_size=4), st.randoms(use_true_random=False))
def test_a_trusted_nodes_free_gpus_are_the_nrts_and_each_pod_frees_its_own(
    sizes: list[int], rng: Any
) -> None:
    """Pods holding random GPUs, as the kubelet gave them: the node's free GPUs are exactly
    the NRT's, each pod is charged with GPUs the NRT has taken, and taking any one out frees
    as many GPUs as it asks."""
    order = list(range(8))
    rng.shuffle(order)
    held, at = {}, 0
    for i, size in enumerate(sizes):
        if at + size <= 8:
            held[f"p{i}"] = order[at : at + size]
            at += size
    grants = {("default", name): [gpu_uuid(g) for g in gpus] for name, gpus in held.items()}
    cache = ClusterCache("gputopo-scheduler")
    cache.upsert_node(node_obj("n1"))
    cache.upsert_nrt(make_nrt("n1", dgx_h100(), grants))
    for name, gpus in held.items():
        cache.upsert_pod(bound_pod(name, "n1", len(gpus)))
    state = cache.snapshot.node("n1")
    taken = {g for gpus in held.values() for g in gpus}
    assert set(state.free_whole_gpus()) == set(range(8)) - taken
    for name, gpus in held.items():
        key = object_key("default", name)
        charged = state.pods[key][1].gpus
        assert set(charged) <= taken
        assert len(charged) == len(gpus)
        clone = state.clone()
        clone.remove_pod(key)
        assert len(clone.free_whole_gpus()) == 8 - len(taken) + len(gpus)


def test_stale_nrt_is_not_trusted():
    inv = dgx_h100()
    nrt = make_nrt("n1", inv, {("default", "foreign"): [gpu_uuid(5), gpu_uuid(6)]})
    cache = ClusterCache("gputopo-scheduler")
    cache.upsert_node(node_obj("n1"))
    cache.upsert_nrt(nrt)
    cache.upsert_pod(bound_pod("foreign", "n1", 2))
    cache.upsert_pod(bound_pod("newer", "n1", 1))  # bound after the NRT was published
    state = cache.snapshot.node("n1")
    assert state.free("nvidia.com/gpu") == 5
    assert len(state.free_whole_gpus()) == 5  # devices predicted, NRT's picture not used


def test_is_trusted_compares_fingerprints():
    nrt = decode(make_nrt("n1", dgx_h100(), {("ml", "a"): [gpu_uuid(0)]}))
    a = read_pod(bound_pod("a", "n1", 1, namespace="ml"), "gputopo-scheduler")
    b = read_pod(bound_pod("b", "n1", 1, namespace="ml"), "gputopo-scheduler")
    assert is_trusted(nrt, [a])
    assert not is_trusted(nrt, [a, b])
    no_kubelet = decode(make_nrt("n1", dgx_h100(), podresources=False))
    assert not is_trusted(no_kubelet, [])


def test_mig_layout_from_the_nrt():
    inv = mig_mixed()
    info = parse_node(
        node_obj("m1", gpus=1, **{"nvidia.com/mig-1g.10gb": "3", "nvidia.com/mig-3g.40gb": "1"})
    )
    state = build_node_state(info, decode(make_nrt("m1", inv)), [], SelectorCache())
    assert state.gpu_mig == (True, False)
    assert state.mig_free[0] == {"3g.40gb": 1, "1g.10gb": 3}


def test_mig_without_an_nrt_is_one_pseudo_gpu():
    info = parse_node(node_obj("m1", gpus=0, **{"nvidia.com/mig-1g.10gb": "7"}))
    state = build_node_state(info, None, [], SelectorCache())
    assert state.gpu_mig == (True,)
    assert state.mig_free == [{"1g.10gb": 7}]


def test_our_assumption_is_kept_and_forgotten():
    cache = ClusterCache("gputopo-scheduler")
    cache.upsert_node(node_obj("n1"))
    mine = bound_pod("mine", "n1", 2, scheduler="gputopo-scheduler")
    del mine["spec"]["nodeName"]
    _, info = cache.upsert_pod(mine)
    assert info.pending
    key = object_key("default", "mine")
    assert info.key == key

    cache.assume(key, Assignment(node="n1", gpus=(6, 7)))
    assert cache.snapshot.node("n1").free_whole_gpus() == [0, 1, 2, 3, 4, 5]
    cache.upsert_pod(mine)  # a status update while the bind is in flight keeps the assumption
    assert cache.pods[key].node == "n1"
    assert cache.pods[key].assignment == Assignment(node="n1", gpus=(6, 7))
    assert cache.forget(key)
    assert cache.snapshot.node("n1").free("nvidia.com/gpu") == 8
    assert cache.pods[key].pending


def test_terminal_pods_free_their_room():
    cache = ClusterCache("gputopo-scheduler")
    cache.upsert_node(node_obj("n1"))
    done = bound_pod("done", "n1", 4)
    cache.upsert_pod(done)
    assert cache.snapshot.node("n1").free("nvidia.com/gpu") == 4
    done["status"] = {"phase": "Succeeded"}
    cache.upsert_pod(done)
    assert cache.snapshot.node("n1").free("nvidia.com/gpu") == 8


@pytest.mark.parametrize(
    ("spec", "annotations", "problem"),
    [
        pytest.param({"minMember": "eight"}, {}, "spec.minMember", id="minMember not a number"),
        pytest.param(
            {"minMember": 2, "scheduleTimeoutSeconds": 0},
            {},
            "scheduleTimeoutSeconds",
            id="timeout",
        ),
        pytest.param(
            {"minMember": 2, "minResources": {"cpu": "x"}}, {}, "minResources", id="quantity"
        ),
        pytest.param(
            {"minMember": 2},
            {"gputopo.io/topology-required": "example.com/row"},
            "not a configured topology level",
            id="unknown level",
        ),
    ],
)
def test_malformed_podgroups_are_named(spec, annotations, problem):
    obj = {"metadata": {"name": "g", "namespace": "ml", "annotations": annotations}, "spec": spec}
    group = parse_group(obj, levels=("gputopo.io/rack",))
    assert group.error is not None
    assert "invalid PodGroup ml/g" in group.error
    assert problem in group.error


def test_podgroup_fields():
    obj = {
        "metadata": {
            "name": "g",
            "namespace": "ml",
            "uid": "u1",
            "annotations": {"gputopo.io/topology-preferred": "gputopo.io/rack"},
        },
        "spec": {
            "minMember": 4,
            "minResources": {"nvidia.com/gpu": "8"},
            "scheduleTimeoutSeconds": 30,
        },
    }
    group = parse_group(obj, levels=("gputopo.io/rack",))
    assert group.error is None
    assert (group.min_member, group.timeout) == (4, 30.0)
    assert dict(group.min_resources or {}) == {"nvidia.com/gpu": 8}
    assert group.topology is not None
    assert (group.topology.label, group.topology.required) == ("gputopo.io/rack", False)


def test_nodes_of_one_shape_start_from_one_state_and_keep_their_own_load():
    cache = ClusterCache("gputopo-scheduler")
    cache.upsert_node(node_obj("n1"))
    cache.upsert_node(node_obj("n2"))
    cache.upsert_pod(bound_pod("foreign", "n1", 3))
    cache.upsert_node(node_obj("n3"))  # after n1 was charged: starts free all the same
    first, second, third = (cache.snapshot.node(n) for n in ("n1", "n2", "n3"))
    assert second.derived is third.derived  # what one derives from the start serves both
    assert first.derived is not second.derived
    assert [len(n.free_whole_gpus()) for n in (first, second, third)] == [5, 8, 8]
    assert (second.requested, third.requested) == ({}, {})
    assert [n.labels["kubernetes.io/hostname"] for n in (first, second, third)] == [
        "n1",
        "n2",
        "n3",
    ]
