"""The scheduler's side of the share lock (`runtime.sharebind`) with its real Lease calls against
the fake API server: a decision reserves its node, so the next share pod goes elsewhere instead of
racing for the same Lease; and a Lease still naming a holder the scheduler saw allocated (the
agent records the pod, then releases) is read again shortly, not waited out for a lock period."""

from __future__ import annotations

import uuid

from agent.nrt import decode
from agent.shares import (
    ALLOCATED_ANNOTATION,
    DEFAULT_SHARE_LOCK_NAMESPACE,
    LEASE_SHARES_ANNOTATION,
    LOCK_POD_ANNOTATION,
    LeaseShare,
    decode_lease_shares,
    share_lock_name,
)
from scheduler.kubeapi.client import KubeClient
from scheduler.kubeapi.sharelock import ShareLocks
from scheduler.placement import Placer, Snapshot, default_scoring
from scheduler.runtime.binding.sharebind import LOCKED, RECHECK, ShareBinding
from scheduler.runtime.cluster.podinfo import read_pod
from tests.builders.nrt import make_shared_nrt
from tests.builders.placement import GIB, share, share_pod, shared_node
from tests.builders.scheduler import NAME, create_pod
from tests.builders.shares import share_body
from tests.builders.topology import dgx_h100

SECONDS = 30


class Wall:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def _binding(fake_api, wall: Wall) -> ShareBinding:
    fake_api.put_object("namespaces", {"metadata": {"name": DEFAULT_SHARE_LOCK_NAMESPACE}})
    kube = KubeClient(fake_api.api_client(), NAME, f"test-{uuid.uuid4().hex[:6]}")
    locks = ShareLocks(kube, DEFAULT_SHARE_LOCK_NAMESPACE, SECONDS, wall)
    return ShareBinding(locks, kube.annotate_pod, wall, SECONDS)


def _placer() -> Placer:
    nodes = [shared_node(n, shared=2, slots=4) for n in ("n1", "n2")]
    return Placer(Snapshot(nodes), default_scoring())


def test_a_decision_reserves_its_node_for_the_next_share_pod(fake_api) -> None:
    binding, placer = _binding(fake_api, Wall()), _placer()
    first = share_pod("default/a", share("main", memory=10 * GIB))
    second = share_pod("default/b", share("main", memory=10 * GIB))
    chosen, locked = binding.decide(placer, first, placer.decide(first), None)
    assert locked is None
    assert chosen.assignment is not None
    # Without the reservation b would go to the same node (it packs), before a's bind took it.
    assert placer.decide(second).assignment.node == chosen.assignment.node
    again, locked = binding.decide(placer, second, placer.decide(second), None)
    assert locked is None
    assert {chosen.assignment.node, again.assignment.node} == {"n1", "n2"}
    third = share_pod("default/c", share("main", memory=10 * GIB))
    refused, message = binding.decide(placer, third, placer.decide(third), None)
    assert refused.assignment is None
    assert message is not None
    assert "default/a" in message
    assert "default/b" in message


def test_a_lease_naming_an_allocated_holder_is_read_again_shortly(fake_api, core_v1) -> None:
    wall = Wall()
    binding, placer = _binding(fake_api, wall), _placer()
    for name in ("a", "b"):
        create_pod(core_v1, share_body(name, "10Gi"))
    pods = {n: read_pod(fake_api.get_object("pods", n, "default"), NAME) for n in ("a", "b")}
    decided, _ = binding.decide(placer, pods["a"].request, placer.decide(pods["a"].request), None)
    nrt = decode(make_shared_nrt(decided.assignment.node, dgx_h100(), shared=(0, 1), slots=4))
    assert binding.bind(pods["a"], decided.assignment, nrt, lambda: "bound") == "bound"
    node = decided.assignment.node
    lease = fake_api.get_object("leases", share_lock_name(node), DEFAULT_SHARE_LOCK_NAMESPACE)
    assert lease["spec"]["holderIdentity"] == pods["a"].uid
    # The agent recorded a's allocation; its release of the Lease has not landed yet.
    allocated = dict(pods["a"].obj)
    allocated["metadata"] = {**allocated["metadata"], "annotations": {ALLOCATED_ANNOTATION: "{}"}}
    assert binding.pod_changed(pods["a"].key, read_pod(allocated, NAME))
    assert node not in binding.blocked()
    assert binding.bind(pods["b"], decided.assignment, nrt, lambda: "bound") == LOCKED
    assert node in binding.blocked()
    wall.now += RECHECK + 0.01
    assert node not in binding.blocked()  # read again, not held for the 30 s lock period


def test_the_lease_names_the_pod_and_gives_each_share_container_its_gpu_and_size(
    fake_api, core_v1
) -> None:
    """What the agent serves (DESIGN §12 "Trust"): the Lease, which tenants cannot write; the
    release clears it with the holder."""
    wall = Wall()
    binding, placer = _binding(fake_api, wall), _placer()
    create_pod(core_v1, share_body("sized", "12Gi"))
    pod = read_pod(fake_api.get_object("pods", "sized", "default"), NAME)
    decided, _ = binding.decide(placer, pod.request, placer.decide(pod.request), None)
    node = decided.assignment.node
    nrt = decode(make_shared_nrt(node, dgx_h100(), shared=(0, 1), slots=4))
    assert binding.bind(pod, decided.assignment, nrt, lambda: "failed") == "failed"
    lease = fake_api.get_object("leases", share_lock_name(node), DEFAULT_SHARE_LOCK_NAMESPACE)
    assert "holderIdentity" not in lease["spec"]  # a failed bind releases at once
    assert LEASE_SHARES_ANNOTATION not in lease["metadata"].get("annotations", {})
    assert binding.bind(pod, decided.assignment, nrt, lambda: "bound") == "bound"
    lease = fake_api.get_object("leases", share_lock_name(node), DEFAULT_SHARE_LOCK_NAMESPACE)
    annotations = lease["metadata"]["annotations"]
    (share,) = decided.assignment.shares
    assert annotations[LOCK_POD_ANNOTATION] == "default/sized"
    assert decode_lease_shares(annotations[LEASE_SHARES_ANNOTATION]) == {
        "main": LeaseShare(
            gpu=nrt.inventory.gpus[share.gpu].uuid, memory_bytes=12 * GIB, compute_percent=None
        )
    }
