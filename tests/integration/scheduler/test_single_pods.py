from __future__ import annotations

from scheduler.kubeapi.informer import Sink
from tests.builders.scheduler import (
    bound_pods,
    create_pod,
    gpu_node,
    node_of,
    pod_body,
    running,
    wait_for,
)


def test_binds_a_gpu_pod(fake_api, core_v1):
    gpu_node(fake_api, "n1", gpus=8)
    with running(fake_api):
        create_pod(core_v1, pod_body("p1", gpus=2))
        node = wait_for(lambda: node_of(fake_api, "p1"), 5, "p1 bound")
    assert node == "n1"
    binds = fake_api.requests_matching("POST", r"/pods/p1/binding$")
    assert len(binds) == 1


def test_other_schedulers_pods_are_left_alone(fake_api, core_v1):
    gpu_node(fake_api, "n1")
    with running(fake_api) as rt:
        sink: Sink = rt.scheduler
        create_pod(core_v1, pod_body("theirs", gpus=1, scheduler="default-scheduler"))
        create_pod(core_v1, pod_body("ours", gpus=1))
        wait_for(lambda: node_of(fake_api, "ours"), 5, "ours bound")
        rt.reporter.flush()
    assert bound_pods(fake_api) == {"ours": "n1"}
    assert sink is rt.scheduler
