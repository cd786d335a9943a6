"""Quotas per GPU model end to end (DESIGN §10 "Per GPU model"): the real scheduler against the
fake API server, driven through the real client. Two 8-GPU H100 nodes and one 8-GPU T4 node."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.builders.queues import (
    QUEUE_LABEL,
    condition,
    create_namespace,
    create_queue,
    queue_status,
)
from tests.builders.scheduler import (
    bound_pods,
    create_gang,
    create_pod,
    gpu_node,
    pod_body,
    running,
    scheduled_condition,
    wait_for,
)

H100, T4 = "NVIDIA-H100-80GB-HBM3", "Tesla-T4"
GPU = "nvidia.com/gpu"
PRODUCT = "nvidia.com/gpu.product"
NODES = {"h100-a": H100, "h100-b": H100, "t4-a": T4}


def _queue(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.gputopo.io/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"namespaces": [namespace], **spec},
    }


@pytest.fixture
def api(fake_api) -> Iterator[tuple[client.CoreV1Api, client.CustomObjectsApi]]:
    with fake_api.api_client() as api_client:
        core = client.CoreV1Api(api_client)
        for ns in ("team-a", "team-b", "team-c"):
            create_namespace(core, ns)
        for name, product in NODES.items():
            gpu_node(fake_api, name, gpus=8, labels={PRODUCT: product})
        yield core, client.CustomObjectsApi(api_client)


def _pods(core: client.CoreV1Api, ns: str, count: int, **spec: Any) -> None:
    for i in range(count):
        create_pod(core, pod_body(f"p{i}", gpus=1, namespace=ns, **spec))


def _models(fake, ns: str) -> dict[str, int]:
    """GPUs of `ns`'s bound pods by the model of their node."""
    pods = {p["metadata"]["name"]: p for p in fake.list_objects("pods", ns)}
    out: dict[str, int] = {}
    for name in bound_pods(fake, ns):
        model = NODES[pods[name]["spec"]["nodeName"]]
        out[model] = out.get(model, 0) + 1
    return out


def _reason(fake, name: str, ns: str) -> str:
    return str((scheduled_condition(fake, name, ns) or {}).get("message") or "")


def test_a_model_max_sends_the_rest_to_another_model_and_the_17th_waits(fake_api, api) -> None:
    core, custom = api
    create_queue(custom, _queue("a", "team-a", max={f"{GPU}@{H100}": 8}))
    with running(fake_api) as runtime:
        _pods(core, "team-a", 17)
        wait_for(lambda: _models(fake_api, "team-a") == {H100: 8, T4: 8}, 20, "8 + 8 bound")
        waiting = next(f"p{i}" for i in range(17) if f"p{i}" not in bound_pods(fake_api, "team-a"))
        breach = f"queue a: {GPU}@{H100} 8 used + 1 requested > max 8"
        wait_for(lambda: breach in _reason(fake_api, waiting, "team-a"), 10, "the queue's reason")
        used = {GPU: "16", f"{GPU}@{H100}": "8"}
        wait_for(lambda: queue_status(fake_api, "a").get("used") == used, 10, "used per key")
        assert _models(fake_api, "team-a") == {H100: 8, T4: 8}  # 8 H100 GPUs are still free
        url = f"http://127.0.0.1:{runtime.server.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as reply:
            text = reply.read().decode()
        assert f'gputopo_scheduler_queue_used{{queue="a",resource="{GPU}@{H100}"}} 8.0' in text
        assert f'gputopo_scheduler_queue_max{{queue="a",resource="{GPU}@{H100}"}} 8.0' in text


def test_a_queue_capped_at_zero_t4s_never_lands_there(fake_api, api) -> None:
    core, custom = api
    create_queue(custom, _queue("b", "team-b", max={f"{GPU}@{T4}": 0}))
    with running(fake_api):
        _pods(core, "team-b", 4)
        wait_for(lambda: _models(fake_api, "team-b") == {H100: 4}, 20, "4 on H100s")
        create_pod(core, pod_body("t4", gpus=1, namespace="team-b", nodeSelector={PRODUCT: T4}))
        key = f"{GPU}@{T4}"
        reason = f"queue b: {key} 0 used + 1 requested > max 0"
        wait_for(
            lambda: _reason(fake_api, "t4", "team-b") == reason, 10, "the reason names the key"
        )
        assert "t4" not in bound_pods(fake_api, "team-b")
        pending = {GPU: "1", key: "1"}  # a pod that can run on T4s only waits under T4's key
        wait_for(
            lambda: queue_status(fake_api, "b").get("pending", {}).get("resources") == pending,
            10,
            "pending per key",
        )
        assert _models(fake_api, "team-b") == {H100: 4}


def test_a_malformed_model_key_invalidates_its_queue_others_keep_scheduling_unseen_models_are_shown(
    fake_api, api
) -> None:
    core, custom = api
    create_queue(custom, _queue("bad", "team-a", max={"cpu@H100": 4}))
    create_queue(custom, _queue("good", "team-c", max={f"{GPU}@{T4}": 2, f"{GPU}@B200": 4}))
    with running(fake_api):
        cond = wait_for(lambda: condition(fake_api, "bad", "Valid"), 10, "bad's condition")
        assert cond["status"] == "False"
        assert "cpu@H100" in cond["message"]
        create_pod(core, pod_body("p0", gpus=1, namespace="team-a", labels={QUEUE_LABEL: "bad"}))
        _pods(core, "team-c", 2)
        wait_for(lambda: len(bound_pods(fake_api, "team-c")) == 2, 20, "good schedules")
        wait_for(lambda: "cpu@H100" in _reason(fake_api, "p0", "team-a"), 10, "bad's pod waits")
        assert not bound_pods(fake_api, "team-a")
        note = condition(fake_api, "good", "ModelWithoutNodes")  # allowed, and shown
        assert note is not None
        assert f"{GPU}@B200" in note["message"]
        assert condition(fake_api, "good", "Valid")["status"] == "True"


def test_a_gang_whose_members_together_exceed_a_model_max_waits_whole(fake_api, api) -> None:
    core, custom = api
    create_queue(custom, _queue("a", "team-a", max={f"{GPU}@{H100}": 8}))
    for name, members in (("wide", 3), ("fits", 2)):
        create_gang(core, custom, name, members, gpus=8, namespace="team-a")
    with running(fake_api):
        # 3 × 8 GPUs need both H100 nodes (16 > 8); 2 × 8 fit on one H100 node and the T4 one.
        wait_for(lambda: len(bound_pods(fake_api, "team-a")) == 2, 20, "the fitting gang")
        assert set(bound_pods(fake_api, "team-a")) == {"fits-0", "fits-1"}
        assert _models(fake_api, "team-a") == {H100: 1, T4: 1}
        key = f"{GPU}@{H100}"
        wait_for(lambda: key in _reason(fake_api, "wide-0", "team-a"), 10, "the gang's reason")


def test_an_h100_min_reclaims_h100_gpus_and_evicts_nothing_on_t4_nodes(fake_api, api) -> None:
    """Team-b borrows every GPU; its T4 pods are the cheapest victims by priority. Team-a, owed
    8 GPUs of which 8 on H100s, reclaims on H100 nodes only."""
    core, custom = api
    client.SchedulingV1Api(core.api_client).create_priority_class(
        {"metadata": {"name": "mid"}, "value": 10}
    )
    create_queue(custom, _queue("a", "team-a", min={GPU: 8, f"{GPU}@{H100}": 8}))
    create_queue(custom, _queue("b", "team-b"))
    quick: dict[str, Any] = {"terminationGracePeriodSeconds": 0}
    with running(fake_api):
        for i in range(16):
            body = pod_body(f"h{i}", gpus=1, namespace="team-b", priorityClassName="mid", **quick)
            create_pod(core, {**body, "spec": {**body["spec"], "nodeSelector": {PRODUCT: H100}}})
        _pods(core, "team-b", 8, nodeSelector={PRODUCT: T4}, **quick)
        wait_for(lambda: _models(fake_api, "team-b") == {H100: 16, T4: 8}, 20, "b fills all")
        _pods(core, "team-a", 2, **quick)
        wait_for(lambda: _models(fake_api, "team-a") == {H100: 2}, 20, "a reclaims 2 H100s")
    deleted = [
        r.path.rsplit("/", 1)[-1]
        for r in fake_api.requests_matching("DELETE", r"/namespaces/team-b/pods/[^/]+$")
    ]
    assert len(deleted) == 2
    assert all(name.startswith("h") for name in deleted)  # H100 pods only
    assert _models(fake_api, "team-b") == {H100: 14, T4: 8}


def test_a_unit_naming_no_model_prefers_the_models_it_is_within_guarantee_on(fake_api, api) -> None:
    """Team-a is owed 4 T4 GPUs and nothing on H100s: its first 4 unconstrained pods go to the
    T4 node, the next ones wherever there is room; none evicts anything (room is free)."""
    core, custom = api
    create_queue(custom, _queue("a", "team-a", min={f"{GPU}@{T4}": 4}))
    with running(fake_api):
        for i in range(4):
            create_pod(core, pod_body(f"p{i}", gpus=1, namespace="team-a"))
            wait_for(lambda i=i: f"p{i}" in bound_pods(fake_api, "team-a"), 10, f"p{i} bound")
        assert _models(fake_api, "team-a") == {T4: 4}
        for i in range(4, 16):
            create_pod(core, pod_body(f"p{i}", gpus=1, namespace="team-a"))
        wait_for(lambda: len(bound_pods(fake_api, "team-a")) == 16, 20, "all 16 bound")
    assert not fake_api.requests_matching("DELETE", r"/pods/[^/]+$")


def test_a_gang_naming_no_model_prefers_the_model_it_is_within_guarantee_on(fake_api, api) -> None:
    core, custom = api
    create_queue(custom, _queue("a", "team-a", min={f"{GPU}@{T4}": 8}))
    create_gang(core, custom, "g", 2, gpus=4, namespace="team-a")
    with running(fake_api):
        wait_for(lambda: len(bound_pods(fake_api, "team-a")) == 2, 20, "the gang")
        assert _models(fake_api, "team-a") == {T4: 2}
        create_gang(core, custom, "h", 2, gpus=4, namespace="team-a")  # beyond: anywhere
        wait_for(lambda: len(bound_pods(fake_api, "team-a")) == 4, 20, "the second gang")
        assert _models(fake_api, "team-a") == {T4: 2, H100: 2}
