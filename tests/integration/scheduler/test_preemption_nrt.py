"""Preemption on a node whose agent publishes its NodeResourceTopology, as on every real cluster:
once the NRT names the GPUs the running pods hold (and the pods it counts are the cache's, so
it is trusted), a victim taken out frees the GPUs it holds, and a pod or a gang of higher
priority evicts for room. Before, the search charged those pods with no GPU and found that no
victim set freed any ("evicting every eligible victim would still not fit")."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from tests.builders.nrt import make_nrt
from tests.builders.scheduler import (
    bound_pods,
    create_pod,
    create_podgroup,
    evicted_pods,
    gpu_node,
    pod_body,
    podgroup,
    running,
    wait_for,
)
from tests.builders.shares import NRT
from tests.builders.topology import dgx_h100, gpu_uuid

pytestmark = pytest.mark.timeout(60)
GANG_LABEL = "scheduling.x-k8s.io/pod-group"


@pytest.mark.parametrize(("members", "victims"), [(1, 1), (2, 2)], ids=["a pod", "a gang"])
def test_a_high_priority_unit_evicts_pods_whose_gpus_the_nrt_names(
    fake_api, core_v1, custom_objects, members, victims
):
    """Four 2-GPU pods of priority 0 fill an 8-GPU node; the NRT then names their GPUs as the
    kubelet gave them (not the scheduler's picks). A unit of priority 1000 asking 2 GPUs a
    member evicts one pod per member and binds."""
    gpu_node(fake_api, "n1", gpus=8)
    client.SchedulingV1Api(core_v1.api_client).create_priority_class(
        {"metadata": {"name": "high"}, "value": 1000}, _preload_content=False
    )
    low = [f"low-{i}" for i in range(4)]
    with running(fake_api):
        for name in low:
            create_pod(core_v1, pod_body(name, gpus=2, terminationGracePeriodSeconds=0))
        wait_for(lambda: set(low) <= set(bound_pods(fake_api)), 5, "the low pods bound")
        kubelet = {
            ("default", n): [gpu_uuid(7 - 2 * i), gpu_uuid(6 - 2 * i)] for i, n in enumerate(low)
        }
        body = make_nrt("n1", dgx_h100(), kubelet)
        custom_objects.create_cluster_custom_object(*NRT, body, _preload_content=False)
        time.sleep(0.3)  # the NRT read before the unit comes
        labels = {GANG_LABEL: "urgent"} if members > 1 else {}
        if members > 1:
            create_podgroup(custom_objects, podgroup("urgent", members))
        wanted = {f"urgent-{i}" for i in range(members)}
        for name in sorted(wanted):
            body = pod_body(name, gpus=2, labels=labels, priorityClassName="high")
            create_pod(core_v1, body)
        wait_for(lambda: wanted <= set(bound_pods(fake_api)), 10, "the unit after preempting")
    assert len(evicted_pods(fake_api) & set(low)) == victims
