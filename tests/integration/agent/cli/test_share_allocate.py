"""Share Allocate end to end (DESIGN §12): the real agent process, the kubelet emulator's pod
admission and PodResources, the fake API server, and the scheduler's part of the contract played
through the real client (lock, `gputopo.io/gpus`, bind). Each container must get exactly the GPU
the scheduler chose, whatever GPU the kubelet's replica is on, in every fault of issue 26."""

from __future__ import annotations

import io
import json
from collections import Counter
from dataclasses import replace

import pytest

from agent.cli import kubectl as kubectl_plugin
from agent.inventory import load_inventory
from agent.share_usage import MIB
from agent.shares import ALLOCATED_ANNOTATION, GPU_COMPUTE, GPU_MEMORY, decode_allocated
from deviceplugin.allocation import VISIBLE_DEVICES
from deviceplugin.share_target import NOT_PLACED_REASON
from tests.builders.scheduler import events_for, wait_for
from tests.builders.sharenode import (
    FIXTURE,
    GPU,
    NODE,
    REPLICAS,
    ShareNode,
    share_container,
    share_node,
    share_pod,
)


@pytest.fixture(scope="module")
def node():
    with share_node() as made:
        made.start_agent()
        yield made


def visible(admission, container: str) -> str:
    return admission.env(container, GPU)[VISIBLE_DEVICES]


def replica_gpu(node: ShareNode, replica: str) -> str:
    return replica.split("::")[0]


def allocated(node: ShareNode, name: str) -> dict[str, tuple[str, ...]]:
    pod = node.scheduler.get(name)
    return decode_allocated(pod["metadata"]["annotations"][ALLOCATED_ANNOTATION])


def test_two_share_pods_in_quick_succession_each_get_their_chosen_gpu(node):
    """quick-a's GPU has no free replica (held by pods the kubelet counts): the kubelet hands a
    replica of another GPU, and Allocate still answers the chosen GPU; quick-b's GPU has free
    replicas, which GetPreferredAllocation offers first."""
    full = {f"{node.uuid(3)}::{n}" for n in range(REPLICAS)}
    node.kubelet.in_use.setdefault(GPU, set()).update(full)
    first = node.scheduler.place(share_pod("quick-a"), {"main": node.uuid(3)})
    (a,) = node.admitter.admit(first)
    node.scheduler.wait_released()
    node.kubelet.release(GPU, sorted(full))
    second = node.scheduler.place(share_pod("quick-b"), {"main": node.uuid(5)})
    (b,) = node.admitter.admit(second)
    node.scheduler.wait_released()
    assert (a.error, b.error) == (None, None)
    assert (visible(a, "main"), visible(b, "main")) == (node.uuid(3), node.uuid(5))
    assert replica_gpu(node, a.devices["main"][GPU][0]) != node.uuid(3)
    assert replica_gpu(node, b.devices["main"][GPU][0]) == node.uuid(5)
    assert allocated(node, "quick-a") == {"main": a.devices["main"][GPU]}
    assert allocated(node, "quick-b") == {"main": b.devices["main"][GPU]}
    for admitted in (first, second):
        node.admitter.remove(admitted)


def test_a_pod_another_scheduler_placed_admitted_first_does_not_take_the_lock_holders_gpu(node):
    """The kubelet admits an unplaced pod (older, same batch) while the lock names another pod:
    the holder's GPU goes to the holder, the other pod gets its replica's own GPU."""
    other = node.scheduler.bind_unplaced(share_pod("other", share_container("main", None)))
    held = node.scheduler.place(share_pod("held"), {"main": node.uuid(6)})
    other = replace(other, created=held.created - 1.0)  # one second older
    first, second = node.admitter.admit(held, other)
    assert [first.pod.name, second.pod.name] == ["other", "held"]
    assert (first.error, second.error) == (None, None)
    assert visible(first, "main") == replica_gpu(node, first.devices["main"][GPU][0])
    assert visible(second, "main") == node.uuid(6)
    node.scheduler.wait_released()
    assert [e["reason"] for e in events_for(node.fake, "other")] == [NOT_PLACED_REASON]
    for admitted in (held, other):
        node.admitter.remove(admitted)


def test_an_init_container_and_two_app_containers_each_get_their_gpu(node):
    body = share_pod(
        "with-init",
        share_container("app-1"),
        share_container("app-2"),
        init=(share_container("setup"),),
    )
    chosen = {"setup": node.uuid(1), "app-1": node.uuid(1), "app-2": node.uuid(2)}
    pod = node.scheduler.place(body, chosen)
    (done,) = node.admitter.admit(pod)
    assert done.error is None
    assert done.devices["app-1"][GPU] == done.devices["setup"][GPU]  # the kubelet reused it
    assert {c: visible(done, c) for c in chosen} == chosen
    node.scheduler.wait_released()
    assert allocated(node, "with-init") == {c: done.devices[c][GPU] for c in chosen}
    node.admitter.remove(pod)


def test_a_lock_whose_pod_was_deleted_is_released_and_the_next_pod_is_served(node):
    gone = node.scheduler.place(share_pod("deleted"), {"main": node.uuid(4)})
    node.scheduler.core.delete_namespaced_pod("deleted", "default", grace_period_seconds=0)
    node.fake.complete_pod_deletions()
    assert node.scheduler.holder() == gone.uid
    other = node.scheduler.bind_unplaced(share_pod("after-delete", share_container("main", None)))
    (done,) = node.admitter.admit(other)
    assert done.error is None
    assert visible(done, "main") == replica_gpu(node, done.devices["main"][GPU][0])
    assert node.scheduler.holder() is None
    node.admitter.remove(other)


def test_a_re_allocation_after_a_kubelet_restart_gets_the_same_gpu(node):
    pod = node.scheduler.place(share_pod("running"), {"main": node.uuid(7)})
    (done,) = node.admitter.admit(pod)
    node.scheduler.wait_released()
    node.kubelet.restart()
    assert node.kubelet.wait_for(lambda k: k.connected(GPU) and k.healthy(GPU), 20.0)
    again = node.admitter.reallocate(pod)
    assert visible(again, "main") == node.uuid(7) == visible(done, "main")
    node.admitter.remove(pod)


def test_two_pods_waiting_without_a_lock_fail_naming_both(node):
    one = node.scheduler.bind_unplaced(share_pod("amb-1", share_container("main", None)))
    two = node.scheduler.bind_unplaced(share_pod("amb-2", share_container("main", None)))
    node.admitter.podresources.set_pod(_listed(two))  # both look admitted now
    (refused,) = node.admitter.admit(one)
    assert refused.error is not None
    assert "candidates: default/amb-1, default/amb-2" in refused.error
    node.admitter.remove(two)


def _listed(pod):
    from agent.availability import ContainerGrant, PodGrant

    return PodGrant(
        namespace=pod.namespace,
        name=pod.name,
        containers=tuple(ContainerGrant(name=c.name) for c in pod.containers),
    )


def test_an_agent_restart_between_bind_and_allocate(node):
    pod = node.scheduler.place(share_pod("restart"), {"main": node.uuid(2)})
    node.stop_agent()
    node.start_agent()
    (done,) = node.admitter.admit(pod)
    assert done.error is None
    assert visible(done, "main") == node.uuid(2)
    node.scheduler.wait_released()
    wait_for(lambda: ALLOCATED_ANNOTATION in node.scheduler.get("restart")["metadata"].get(
        "annotations", {}), 5, "the allocated annotation")  # fmt: skip
    node.admitter.remove(pod)


def _zone_view(zone) -> tuple[dict[str, str], dict[str, str]]:
    attrs = {a["name"]: a["value"] for a in zone.get("attributes") or []}
    free = {r["name"]: r["available"] for r in zone.get("resources") or []}
    return {k: attrs.get(k, "") for k in ("sharing", "shares")}, free


def test_the_nrt_gpu_zone_shows_the_shares_memory_and_compute(node):
    pod = node.scheduler.place(
        share_pod("nrt", share_container("main", "10Gi", **{GPU_COMPUTE: "30"})),
        {"main": node.uuid(0)},
    )
    (done,) = node.admitter.admit(pod)
    memory = load_inventory(FIXTURE).gpus[0].memory_mib * MIB
    expected = (
        {"sharing": "timeSlicing", "shares": str(REPLICAS)},
        {GPU: str(REPLICAS - 1), GPU_MEMORY: str(memory - 10 * 1024**3), GPU_COMPUTE: "70"},
    )
    if replica_gpu(node, done.devices["main"][GPU][0]) != node.uuid(0):
        expected[1][GPU] = str(REPLICAS)  # the kubelet's replica is another GPU's
    wait_for(lambda: _zone_view(node.gpu_zone(0) or {}) == expected, 15, f"gpu-0 {expected}")
    assert _zone_view(node.gpu_zone(0)) == expected
    node.admitter.remove(pod)


def test_kubectl_shows_shares_per_gpu_and_per_pod(node):
    pod = node.scheduler.place(
        share_pod("shown", share_container("main", "12Gi", **{GPU_COMPUTE: "40"})),
        {"main": node.uuid(5)},
    )
    node.admitter.admit(pod)
    kubeconfig = str(node.fake.write_kubeconfig(node.folder / "user-kubeconfig"))

    def kubectl(*argv: str) -> str:
        out, err = io.StringIO(), io.StringIO()
        assert kubectl_plugin.main(["--kubeconfig", kubeconfig, *argv], out=out, err=err) == 0
        assert err.getvalue() == ""
        return out.getvalue()

    free = 80 - 12
    wait_for(lambda: f"5:{REPLICAS - 1}/{REPLICAS}({free}Gi)" in kubectl("nodes"), 15, "nodes")
    assert "SHARES FREE (GPU:FREE/OF)" in kubectl("nodes").splitlines()[0]
    (summary,) = json.loads(kubectl("-o", "json", "nodes"))["nodes"]
    assert (summary["wholeGpus"], summary["sharedGpus"]) == (0, 8)  # a shared GPU is never whole
    topo = kubectl("topo", NODE)
    assert "Shares (timeSlicing; timeSlicing enforces nothing" in topo
    assert ["5", "default/shown", "main", "12.0", "GiB", "40%"] in [
        line.split() for line in topo.splitlines()
    ]
    doc = json.loads(kubectl("-o", "json", "topo", NODE))
    assert {"gpu": 5, "pod": "default/shown", "container": "main",
            "memory": 12 * 1024**3, "compute": 40} in doc["podShares"]  # fmt: skip
    assert doc["shares"][5] == {
        "gpu": 5, "sharing": "timeSlicing", "shares": REPLICAS, "sharesFree": REPLICAS - 1,
        "memoryFree": free * 1024**3, "computeFree": 60,
    }  # fmt: skip
    node.admitter.remove(pod)


def test_a_leased_gpu_the_node_does_not_share_fails_naming_pod_and_gpu(node):
    pod = node.scheduler.place(share_pod("bad-gpu"), {"main": "GPU-00000000-not-on-this-node"})
    (refused,) = node.admitter.admit(pod)
    assert refused.error is not None
    assert (
        "pod default/bad-gpu container main: its share Lease's gputopo.io/shares names GPU "
        "GPU-00000000-not-on-this-node, which nvidia.com/gpu does not share on this node"
    ) in refused.error
    assert node.scheduler.holder() is None  # released at once, not after 30 s


def test_a_slow_api_server_still_gives_each_container_its_gpu(node):
    """100 ms per API request: the agent's direct GETs take longer but never guess."""
    node.fake.slow(0.1)
    try:
        pod = node.scheduler.place(share_pod("slow"), {"main": node.uuid(4)})
        (done,) = node.admitter.admit(pod)
        node.scheduler.wait_released()
    finally:
        node.fake.slow(0)
    assert done.error is None
    assert visible(done, "main") == node.uuid(4)
    assert max(done.allocate_seconds) < 1.0
    node.admitter.remove(pod)


def test_replicas_are_advertised_without_topology(node):
    devices = node.kubelet.devices(GPU)
    assert len(devices) == 8 * REPLICAS
    assert {d.numa_nodes for d in devices.values()} == {()}


def test_each_share_pod_costs_the_same_few_api_calls_however_many_pods_run(node):
    """The Allocate path's only API calls are GETs of the lock and the pod (for
    GetPreferredAllocation and Allocate), then the patch and the release: no call per pod on
    the node, so the cost does not grow with them."""
    costs, running = [], []
    for i in range(6):
        before = len(node.fake.authorization_checks)
        pod = node.scheduler.place(share_pod(f"cost-{i}"), {"main": node.uuid(i % 8)})
        node.admitter.admit(pod)
        node.scheduler.wait_released()
        running.append(pod)
        calls = Counter(
            (c.resource, c.verb)
            for c in node.fake.authorization_checks[before:]
            if c.user == "fake-token" and c.resource in ("leases", "pods") and c.verb != "list"
        )
        costs.append(dict(calls))
    assert (
        costs
        == [
            {
                ("leases", "get"): 3,
                ("leases", "update"): 1,
                ("pods", "get"): 2,
                ("pods", "patch"): 1,
            }
        ]
        * 6
    )
    for pod in running:
        node.admitter.remove(pod)
