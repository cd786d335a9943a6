"""Placement scenarios end to end: watch -> decide -> bind, against the fake API server."""

from __future__ import annotations

import pytest

from agent.model import LinkMatrix, NodeInventory
from tests.builders.nrt import make_nrt
from tests.builders.scheduler import (
    bound_pods,
    create_pod,
    events_for,
    gpu_node,
    node_of,
    pod_body,
    running,
    scheduled_condition,
    wait_for,
)
from tests.builders.topology import make_gpu, make_numa, mig_mixed, mig_uuid

NRT = ("topology.node.k8s.io", "v1alpha2", "noderesourcetopologies")


@pytest.mark.parametrize(
    ("names", "foreign_on"),
    [
        pytest.param(("gpu-zz-7", "gpu-aa-3"), "gpu-zz-7", id="foreign pod on the later name"),
        pytest.param(("node-b", "node-a"), "node-a", id="foreign pod on the earlier name"),
    ],
)
def test_fragmentation_binpacks_then_the_8_gpu_pod_fits(fake_api, core_v1, names, foreign_on):
    for name in names:
        gpu_node(fake_api, name, gpus=8)
    other = next(n for n in names if n != foreign_on)
    create_pod(core_v1, pod_body("foreign", gpus=2, scheduler="default-scheduler", node=foreign_on))
    with running(fake_api):
        for i in range(6):
            create_pod(core_v1, pod_body(f"small-{i}", gpus=1))
        wait_for(lambda: len(bound_pods(fake_api)) == 7, 5, "the six 1-GPU pods bound")
        create_pod(core_v1, pod_body("big", gpus=8))
        wait_for(lambda: node_of(fake_api, "big"), 5, "the 8-GPU pod bound")
    bound = bound_pods(fake_api)
    assert {bound[f"small-{i}"] for i in range(6)} == {foreign_on}
    assert bound["big"] == other


def test_unschedulable_message_counts_reasons_per_node(fake_api, core_v1):
    gpu_node(fake_api, "n1", gpus=8)
    gpu_node(fake_api, "n2", gpus=8)
    node = fake_api.get_object("nodes", "n2")
    node["spec"]["taints"] = [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]
    fake_api.put_object("nodes", node)
    with running(fake_api):
        create_pod(core_v1, pod_body("huge", gpus=16))
        condition = wait_for(lambda: scheduled_condition(fake_api, "huge"), 5, "condition")
        events = wait_for(lambda: events_for(fake_api, "huge"), 5, "FailedScheduling event")
    expected = (
        "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, "
        "1 node(s) had untolerated taint {dedicated: ml}."
    )
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "False",
        "Unschedulable",
        expected,
    )
    assert (events[0]["reason"], events[0]["type"], events[0]["message"]) == (
        "FailedScheduling",
        "Warning",
        expected,
    )


def test_not_ready_nodes_are_skipped(fake_api, core_v1):
    fake_api.add_node("fresh", capacity={"cpu": "8", "memory": "8Gi", "pods": "10"}, ready=False)
    with running(fake_api):
        create_pod(core_v1, pod_body("p"))
        condition = wait_for(lambda: scheduled_condition(fake_api, "p"), 5, "condition")
        assert "untolerated taint {node.kubernetes.io/not-ready: }" in condition["message"]
        fake_api.make_node_ready("fresh")
        assert wait_for(lambda: node_of(fake_api, "p"), 5, "bound once ready") == "fresh"


def _mig_nodes(fake_api, custom_objects):
    two_3g = NodeInventory(
        gpus=(make_gpu(0, 0, mig="3g.40gb@0:4,3g.40gb@4:4"),),
        links=LinkMatrix(((None,),)),
        numa_nodes=make_numa([0], ["0-31"]),
    )
    gpu_node(fake_api, "m1", gpus=0, extra={"nvidia.com/mig-3g.40gb": "2"})
    gpu_node(
        fake_api,
        "m2",
        gpus=1,
        extra={"nvidia.com/mig-3g.40gb": "1", "nvidia.com/mig-1g.10gb": "3"},
    )
    taken = {("default", "holder"): [("nvidia.com/mig-3g.40gb", str(mig_uuid(0, 0)))]}
    for body in (make_nrt("m1", two_3g), make_nrt("m2", mig_mixed(), taken)):
        custom_objects.create_cluster_custom_object(*NRT, body, _preload_content=False)


def test_mig_request_lands_where_the_profile_is_free(fake_api, core_v1, custom_objects):
    _mig_nodes(fake_api, custom_objects)
    holder = pod_body("holder", scheduler="default-scheduler", node="m2")
    holder["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/mig-3g.40gb": "1"}}
    create_pod(core_v1, holder)
    with running(fake_api):
        create_pod(core_v1, pod_body("small", resources={"nvidia.com/mig-1g.10gb": "1"}))
        create_pod(core_v1, pod_body("half", resources={"nvidia.com/mig-3g.40gb": "1"}))
        wait_for(lambda: {"small", "half"} <= set(bound_pods(fake_api)), 5, "MIG pods bound")
    bound = bound_pods(fake_api)
    assert (bound["small"], bound["half"]) == ("m2", "m1")


def test_gated_pod_waits_until_ungated(fake_api, core_v1):
    gpu_node(fake_api, "n1")
    with running(fake_api) as rt:
        create_pod(core_v1, pod_body("gated", gpus=1, schedulingGates=[{"name": "example.com/q"}]))
        wait_for(lambda: rt.scheduler.pending_reasons().get("gated") == 1, 5, "gated seen")
        create_pod(core_v1, pod_body("plain", gpus=1))
        wait_for(lambda: node_of(fake_api, "plain"), 5, "plain bound")
        assert node_of(fake_api, "gated") is None
        assert fake_api.requests_matching("POST", r"/pods/gated/binding$") == []
        core_v1.patch_namespaced_pod(
            "gated",
            "default",
            [{"op": "remove", "path": "/spec/schedulingGates"}],
            _preload_content=False,
        )
        assert wait_for(lambda: node_of(fake_api, "gated"), 5, "bound once ungated") == "n1"


def test_a_pod_pinned_by_match_fields_binds_to_its_node(fake_api, core_v1):
    """The DaemonSet controller's form (`matchFields` on `metadata.name`): the pod binds to the
    node it names, though packing would put it beside the pod on n1."""
    gpu_node(fake_api, "n1")
    gpu_node(fake_api, "n2")
    field = {"key": "metadata.name", "operator": "In", "values": ["n2"]}
    required = {"nodeSelectorTerms": [{"matchFields": [field]}]}
    pinned = pod_body(
        "pinned",
        gpus=1,
        affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}},
    )
    with running(fake_api):
        create_pod(core_v1, pod_body("first", gpus=1))
        assert wait_for(lambda: node_of(fake_api, "first"), 5, "first bound") == "n1"
        create_pod(core_v1, pinned)
        assert wait_for(lambda: node_of(fake_api, "pinned"), 5, "pinned bound") == "n2"


def test_bind_conflict_requeues(fake_api, core_v1):
    gpu_node(fake_api, "n1")
    fake_api.fail_next(1, 409, path_regex=r"/pods/c1/binding$", message="already assigned")
    with running(fake_api) as rt:
        create_pod(core_v1, pod_body("c1", gpus=1))
        wait_for(lambda: node_of(fake_api, "c1"), 5, "bound after the conflict")
    assert len(fake_api.requests_matching("POST", r"/pods/c1/binding$")) == 2
    sample = rt.metrics.registry.get_sample_value
    assert sample("gputopo_scheduler_binds_total", {"result": "conflict"}) == 1
    assert sample("gputopo_scheduler_binds_total", {"result": "bound"}) == 1


def test_survives_an_api_server_outage_and_an_expired_watch(fake_api, core_v1):
    gpu_node(fake_api, "n1")
    with running(fake_api) as rt:
        create_pod(core_v1, pod_body("before", gpus=4))
        wait_for(lambda: node_of(fake_api, "before"), 5, "bound before the outage")
        fake_api.down()
        fake_api.put_object("pods", pod_body("during", gpus=4))
        fake_api.compact()  # resuming the watches from their last resourceVersion gets 410 Gone
        fake_api.up()
        assert wait_for(lambda: node_of(fake_api, "during"), 10, "bound after the outage") == "n1"
        create_pod(core_v1, pod_body("after", gpus=1))
        reason = wait_for(lambda: scheduled_condition(fake_api, "after"), 10, "after: no room")
        lists = fake_api.requests_matching("GET", r"^/api/v1/pods$")
    assert "Insufficient nvidia.com/gpu" in reason["message"]  # the relisted cache counts all 8
    assert len([r for r in lists if r.query.get("watch") != "true"]) >= 2
    assert rt.ready()
