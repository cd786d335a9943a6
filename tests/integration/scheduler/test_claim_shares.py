"""Pods whose ResourceClaims take shares of shared GPUs (DESIGN §14 "Queues", §12), against the
fake API server: their queue charges each share as a device-plugin share of the same memory and
compute (`nvidia.com/gpu` in milli, `gputopo.io/gpu-memory` in bytes), admits by it, and counts
it again after a restart; a DRA GPU is never offered to device-plugin pods."""

from __future__ import annotations

from tests.builders.claimcluster import (
    NS,
    claim_pod,
    devices_of,
    share_claim,
    shared_cluster,
    shared_elsewhere,
    waiting,
)
from tests.builders.queues import create_queue, queue_body, queue_status
from tests.builders.scheduler import (
    GPU,
    create_pod,
    node_of,
    running,
    scheduled_condition,
    wait_for,
)

MEMORY = "gputopo.io/gpu-memory"
GIB = 1 << 30


def _used(fake, resource: str) -> str | None:
    return queue_status(fake, "team").get("used", {}).get(resource)


def test_a_queue_charges_claimed_shares_and_holds_back_the_one_past_its_max(
    fake_api, core_v1, custom_objects
):
    shared_cluster(fake_api)
    limits = {GPU: "1", MEMORY: "160Gi"}
    create_queue(custom_objects, queue_body("team", namespaces=[NS], max=limits))
    # 40Gi of 80Gi and 30 % of the SMs: 500 milli each, as a device-plugin share of that size
    for name in ("first", "second"):
        fake_api.put_object("resourceclaims", share_claim(name, "40Gi", 30))
    fake_api.put_object("resourceclaims", share_claim("third", "8Gi", 10))
    with running(fake_api) as rt:
        create_pod(core_v1, claim_pod("a", "first"))
        wait_for(lambda: node_of(fake_api, "a"), 5, "a bound")
        assert wait_for(lambda: _used(fake_api, GPU) == "0.5" or None, 5, "a charged 500m")
        create_pod(core_v1, claim_pod("b", "second"))
        wait_for(lambda: node_of(fake_api, "b"), 5, "b bound (1000m: the max, not past it)")
        create_pod(core_v1, claim_pod("c", "third"))
        wait_for(lambda: scheduled_condition(fake_api, "c"), 5, "c held back")
        rt.reporter.flush()
        wait_for(lambda: _used(fake_api, GPU) == "1" or None, 5, "a and b charged")
        assert _used(fake_api, MEMORY) == str(80 * GIB)
    message, node, devices = waiting(fake_api, "c", "third")
    assert "max" in message
    assert (node, devices) == (None, [])


def test_a_running_pod_is_charged_its_claimed_share_when_the_scheduler_starts(
    fake_api, core_v1, custom_objects
):
    shared_cluster(fake_api)
    limits = {GPU: "8", MEMORY: "640Gi"}
    create_queue(custom_objects, queue_body("team", namespaces=[NS], max=limits))
    shared_elsewhere(fake_api, "held", "n1", 1, "20Gi", 60)  # as a scheduler before this one
    body = claim_pod("p1", "held")
    body["spec"]["nodeName"] = "n1"
    create_pod(core_v1, body)
    with running(fake_api):
        used = wait_for(lambda: _used(fake_api, GPU), 5, "team's usage")
        assert wait_for(lambda: _used(fake_api, MEMORY), 5, "team's memory") == str(20 * GIB)
    assert used == "0.6"  # compute leads: 60 % of the SMs


def test_two_claimed_shares_fill_a_shared_gpu_and_a_third_takes_the_next(fake_api, core_v1):
    """The room a share takes counts once its allocation is read back from the API server."""
    shared_cluster(fake_api)
    for name in ("first", "second", "third"):
        fake_api.put_object("resourceclaims", share_claim(name, "40Gi", 10))
    with running(fake_api):
        for name, claim in (("a", "first"), ("b", "second")):
            create_pod(core_v1, claim_pod(name, claim))
            wait_for(lambda n=name: node_of(fake_api, n), 5, f"{name} bound")
        wait_for(
            lambda: all(
                fake_api.get_object("resourceclaims", c, NS)["status"].get("allocation")
                for c in ("first", "second")
            ),
            5,
            "both allocations written",
        )
        create_pod(core_v1, claim_pod("c", "third"))
        wait_for(lambda: node_of(fake_api, "c"), 5, "c bound")
    first, second, third = (devices_of(fake_api, c) for c in ("first", "second", "third"))
    assert first == second  # the fullest shared GPU first
    assert third != first
    assert len(third) == 1
