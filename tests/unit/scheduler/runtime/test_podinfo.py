"""`scheduler/runtime/cluster/podinfo.py`: a pod read once at intake, under one key."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from agent.objkey import object_key
from scheduler.runtime.cluster.podinfo import RequestMemo, parse_time, read_pod
from tests.builders.pods import container, pod, share_pod

SCHEDULER = "gputopo-scheduler"


def test_the_key_is_built_once_and_shared_with_the_request():
    body = pod(
        "train-0",
        "ml",
        containers=[container(limits={"nvidia.com/gpu": 2})],
        labels={"scheduling.x-k8s.io/pod-group": "train"},
        schedulerName=SCHEDULER,
    )
    info = read_pod(body, SCHEDULER)
    assert info.key == object_key("ml", "train-0")
    assert info.request.key is info.key
    assert (info.namespace, info.name, info.group) == ("ml", "train-0", "train")
    assert info.group_key == object_key("ml", "train")
    assert (info.pending, info.ours, info.assumed) == (True, True, False)
    assert info.request.gpus == 2


def test_a_pod_without_a_namespace_is_keyed_in_default_everywhere():
    body = pod("p")
    body["metadata"]["namespace"] = None
    info = read_pod(body, SCHEDULER)
    assert info.key == info.request.key == "default/p"


def test_a_malformed_pod_keeps_its_key_and_says_what_is_wrong():
    info = read_pod(pod("bad", containers=[container(requests={"cpu": "x"})]), SCHEDULER)
    assert info.error is not None
    assert "pod default/bad" in info.error
    assert info.request.key == info.key == "default/bad"
    assert info.group_key is None


def test_bound_foreign_and_finished_pods():
    body = pod("f", nodeName="n1", schedulerName="default-scheduler")
    body["status"] = {"phase": "Succeeded"}
    body["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z"
    info = read_pod(body, SCHEDULER)
    assert (info.node, info.ours, info.terminal, info.counted) == ("n1", False, True, False)
    assert info.created == parse_time("2024-01-01T00:00:00Z") > 0
    assert parse_time("not a time") == parse_time(None) == 0.0


def test_a_pod_with_a_deletion_timestamp_is_terminating_and_still_takes_room():
    body = pod("p", nodeName="n1")
    assert read_pod(body, "s").terminating is False
    body["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:30Z"
    info = read_pod(body, "s")
    assert info.terminating is True
    assert info.counted is True


def test_pods_of_one_template_share_a_reading_under_their_own_keys():
    """A Job's pods (one template) get equal requests, each under its own key; a pod whose
    labels or spec differ gets its own reading."""
    limits = {"nvidia.com/gpu": 2}
    labels = {"scheduling.x-k8s.io/pod-group": "train"}
    memo = RequestMemo()
    first, second = (
        read_pod(
            pod(f"w-{i}", "ml", containers=[container(limits=limits)], labels=labels),
            "s",
            memo=memo,
        )
        for i in range(2)
    )
    assert len(memo.requests) == 1  # the second pod's reading came from the memo
    other_group = read_pod(
        pod("x", "ml", containers=[container(limits=limits)], labels={**labels, "v": "1"}),
        "s",
        memo=memo,
    )
    bigger = read_pod(
        pod("y", "ml", containers=[container(limits={"nvidia.com/gpu": 4})]), "s", memo=memo
    )
    assert len(memo.requests) == 3
    assert (first.request.key, second.request.key) == ("ml/w-0", "ml/w-1")
    assert dataclasses.replace(second.request, key="ml/w-0") == first.request
    assert other_group.request.key == "ml/x"
    assert other_group.request.pod_group == "train"
    assert (first.request.gpus, bigger.request.gpus) == (2, 4)


TEMPLATES = [
    pytest.param(pod(containers=[container(limits={"nvidia.com/gpu": 2})]), id="whole GPUs"),
    pytest.param(share_pod(memory="10Gi", compute=30, containers=("a", "b")), id="shares"),
    pytest.param(
        pod(containers=[container(limits={"nvidia.com/mig-1g.10gb": 2, "cpu": "1"})]), id="MIG"
    ),
    pytest.param(pod(containers=[container(requests={"cpu": "500m"})]), id="no GPU"),
]


@pytest.mark.parametrize("template", TEMPLATES)
def test_a_request_from_the_memo_is_the_one_a_reading_makes(template):
    """Every field, those derived from the others included, as reading the pod afresh makes
    it; only the key is the pod's own."""
    memo = RequestMemo()
    read_pod(template, SCHEDULER, memo=memo)  # the template's reading
    body = copy.deepcopy(template)
    body["metadata"]["name"] = "other"
    shared, fresh = read_pod(body, SCHEDULER, memo=memo).request, read_pod(body, SCHEDULER).request
    assert len(memo.requests) == 1
    names = [f.name for f in dataclasses.fields(fresh)]
    assert [getattr(shared, n) for n in names] == [getattr(fresh, n) for n in names]
    assert shared.key == "default/other"


def test_templates_interleaved_in_a_list_each_keep_their_reading():
    """A list that alternates templates (more than the few compared by value) still reads each
    pod as its own template says."""
    memo = RequestMemo(recent=2)
    sizes = [1, 2, 4, 8, 1, 4, 2, 8, 8, 1]
    reads = [
        read_pod(pod(f"p{i}", containers=[container(limits={"nvidia.com/gpu": n})]), "s", memo=memo)
        for i, n in enumerate(sizes)
    ]
    assert [r.request.gpus for r in reads] == sizes
    assert len(memo.requests) == 4


def _with_token_volume(body: dict, suffix: str) -> dict:
    """`body` as a real API server admits it: a projected token volume with a random name,
    mounted in every container."""
    body = copy.deepcopy(body)
    name = f"kube-api-access-{suffix}"
    body["spec"]["volumes"] = [{"name": name, "projected": {"sources": []}}]
    for c in body["spec"]["containers"]:
        c["volumeMounts"] = [{"name": name, "mountPath": "/var/run/secrets", "readOnly": True}]
    return body


@pytest.mark.parametrize("template", TEMPLATES)
def test_pods_with_their_own_token_volumes_share_a_reading(template):
    """Volumes and mounts are not read for placement: one template's pods, each with its own
    token volume, read the template once and get the request a fresh reading makes."""
    memo = RequestMemo(recent=1)
    first = _with_token_volume(template, "abcde")
    first["metadata"]["name"] = "first"
    second = _with_token_volume(template, "fghij")
    second["metadata"]["name"] = "second"
    read_pod(first, SCHEDULER, memo=memo)
    read_pod(pod("between", containers=[container(limits={"nvidia.com/gpu": 7})]), "s", memo=memo)
    shared = read_pod(second, SCHEDULER, memo=memo).request
    assert len(memo.requests) == 2  # the second pod found the first's reading by its text
    fresh = read_pod(second, SCHEDULER).request
    names = [f.name for f in dataclasses.fields(fresh)]
    assert [getattr(shared, n) for n in names] == [getattr(fresh, n) for n in names]
    assert shared.key == "default/second"


def test_a_pods_other_fields_still_tell_templates_apart_beside_its_volumes():
    memo = RequestMemo()
    one = _with_token_volume(pod("a", containers=[container(limits={"nvidia.com/gpu": 1})]), "x")
    two = _with_token_volume(pod("b", containers=[container(limits={"nvidia.com/gpu": 2})]), "y")
    assert [read_pod(b, "s", memo=memo).request.gpus for b in (one, two)] == [1, 2]
    assert len(memo.requests) == 2
