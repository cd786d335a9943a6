"""Host ports end to end: pods asking for the same `hostPort` are created through the real
client against the fake API server; the scheduler binds one per node, tells the extra one why
it waits (kube-scheduler's `NodePorts` message), and binds it where the port is freed."""

from __future__ import annotations

from typing import Any

from tests.builders.scheduler import (
    bound_pods,
    create_pod,
    delete_pod,
    gpu_node,
    node_of,
    pod_body,
    running,
    scheduled_condition,
    wait_for,
)


def serving(name: str, port: int, protocol: str = "TCP") -> dict[str, Any]:
    body = pod_body(name, gpus=1)
    body["spec"]["containers"][0]["ports"] = [
        {"containerPort": port, "hostPort": port, "protocol": protocol}
    ]
    return body


def test_one_pod_per_node_takes_a_host_port_and_the_extra_one_waits(fake_api, core_v1):
    for name in ("n1", "n2"):
        gpu_node(fake_api, name)
    with running(fake_api):
        for i in range(3):
            create_pod(core_v1, serving(f"metrics-{i}", 9400))
        wait_for(lambda: len(bound_pods(fake_api)) == 2, 10, "two bound")
        assert sorted(bound_pods(fake_api).values()) == ["n1", "n2"]
        waiting = next(
            f"metrics-{i}" for i in range(3) if f"metrics-{i}" not in bound_pods(fake_api)
        )
        condition = wait_for(lambda: scheduled_condition(fake_api, waiting), 10, "condition")
        assert condition["message"] == (
            "0/2 nodes are available: 2 node(s) didn't have free ports for the requested pod ports."
        )
        create_pod(core_v1, serving("dns", 9400, "UDP"))  # another protocol: no conflict
        wait_for(lambda: node_of(fake_api, "dns"), 10, "the UDP pod bound")
        gone = next(p for p in bound_pods(fake_api) if p.startswith("metrics-"))
        freed = bound_pods(fake_api)[gone]
        delete_pod(core_v1, gone)
        assert wait_for(lambda: node_of(fake_api, waiting), 15, "the third after a delete") == (
            freed
        )


def test_host_network_pods_on_one_container_port_take_a_node_each(fake_api, core_v1):
    """The API server defaults a host-network pod's `hostPort` to its container port."""
    for name in ("n1", "n2"):
        gpu_node(fake_api, name)
    with running(fake_api):
        for i in range(2):
            body = pod_body(f"trainer-{i}", gpus=1, hostNetwork=True)
            body["spec"]["containers"][0]["ports"] = [{"containerPort": 29500}]
            create_pod(core_v1, body)
        wait_for(lambda: len(bound_pods(fake_api)) == 2, 10, "both bound")
    assert sorted(bound_pods(fake_api).values()) == ["n1", "n2"]  # binpacking alone: one node
