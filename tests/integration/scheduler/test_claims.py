"""gputopo-scheduler allocating ResourceClaims (DRA), run against the fake API server: NVLink
islands, claims allocated by others, templates, shared claims, reasons, binding and rollback."""

from __future__ import annotations

from tests.builders.claimcluster import (
    NS,
    PROTECTION,
    allocated_elsewhere,
    claim_of,
    claim_pod,
    devices_of,
    dra_cluster,
    gpu_claim,
    refusal,
    reserved_for,
    waiting,
)
from tests.builders.queues import create_queue, queue_body, queue_status
from tests.builders.scheduler import (
    GPU,
    create_pod,
    gpu_node,
    node_of,
    running,
    scheduled_condition,
    wait_for,
)


def test_a_two_gpu_claim_lands_on_one_nvlink_island_around_a_foreign_allocation(fake_api, core_v1):
    dra_cluster(fake_api)
    # kube-scheduler holds gpu-1..3: first fit would take gpu-0 and gpu-4, across the islands
    allocated_elsewhere(fake_api, "theirs", "n1", [1, 2, 3])
    fake_api.put_object("resourceclaims", gpu_claim("mine", 2))
    with running(fake_api):
        create_pod(core_v1, claim_pod("p1", "mine"))
        wait_for(lambda: node_of(fake_api, "p1"), 5, "p1 bound")
    devices = devices_of(fake_api, "mine")
    assert len(devices) == 2
    assert {int(d.removeprefix("gpu-")) // 4 for d in devices} == {1}
    claim = claim_of(fake_api, "mine")
    assert PROTECTION in claim["metadata"]["finalizers"]
    assert reserved_for(fake_api, "mine") == ["p1"]
    selector = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]
    assert selector["matchFields"][0]["values"] == ["n1"]


def test_a_claim_from_a_template_waits_for_its_claim_then_binds(fake_api, core_v1):
    dra_cluster(fake_api)
    with running(fake_api):
        create_pod(core_v1, claim_pod("p1", template="two-gpus"))
        wait_for(lambda: scheduled_condition(fake_api, "p1"), 5, "p1 marked unschedulable")
        waiting = scheduled_condition(fake_api, "p1")
        assert waiting is not None
        assert "resourceclaim controller" in waiting["message"]
        assert "two-gpus" in waiting["message"]
        # what the resourceclaim controller does: the claim, then the pod's status naming it
        made = gpu_claim("p1-tpl-x7k2q", 2)
        uid = fake_api.get_object("pods", "p1", NS)["metadata"]["uid"]
        owner = {"apiVersion": "v1", "kind": "Pod", "name": "p1", "uid": uid, "controller": True}
        made["metadata"]["ownerReferences"] = [owner]
        fake_api.put_object("resourceclaims", made)
        core_v1.patch_namespaced_pod_status(
            "p1",
            NS,
            {
                "status": {
                    "resourceClaimStatuses": [{"name": "tpl", "resourceClaimName": "p1-tpl-x7k2q"}]
                }
            },
        )
        wait_for(lambda: node_of(fake_api, "p1"), 5, "p1 bound")
    assert len(devices_of(fake_api, "p1-tpl-x7k2q")) == 2
    assert reserved_for(fake_api, "p1-tpl-x7k2q") == ["p1"]


def test_a_claim_shared_by_two_pods_is_allocated_once_and_reserved_for_both(fake_api, core_v1):
    dra_cluster(fake_api, ("n1", "n2"))
    fake_api.put_object("resourceclaims", gpu_claim("shared", 2))
    with running(fake_api):
        create_pod(core_v1, claim_pod("a", "shared"))
        create_pod(core_v1, claim_pod("b", "shared"))
        wait_for(lambda: node_of(fake_api, "a") and node_of(fake_api, "b"), 5, "both bound")
    assert node_of(fake_api, "a") == node_of(fake_api, "b")
    assert sorted(reserved_for(fake_api, "shared")) == ["a", "b"]
    assert len(devices_of(fake_api, "shared")) == 2
    writes = fake_api.requests_matching("PUT", r"/resourceclaims/shared/status$")
    allocating = [w for w in writes if (w.body.get("status") or {}).get("allocation")]
    assert len(writes) == 2
    first = allocating[0].body["status"]
    assert [r["name"] for r in first["reservedFor"]] in (["a"], ["b"])


def test_an_unsatisfiable_claim_stays_pending_naming_its_selector(fake_api, core_v1):
    dra_cluster(fake_api)
    selector = 'device.attributes["gpu.gputopo.io"].nvlinkIsland == 7'
    fake_api.put_object("resourceclaims", gpu_claim("nowhere", 1, selector))
    condition = refusal(fake_api, core_v1, claim_pod("p1", "nowhere"))
    assert condition["status"] == "False"
    assert "claim default/nowhere request gpus" in condition["message"]
    assert selector in condition["message"]
    assert node_of(fake_api, "p1") is None
    assert devices_of(fake_api, "nowhere") == []


def test_a_failed_bind_rolls_back_the_allocation_and_the_finalizer(fake_api, core_v1):
    dra_cluster(fake_api)
    fake_api.put_object("resourceclaims", gpu_claim("mine", 2))
    fake_api.fail_next(2, 500, r"/pods/p1/binding$", "POST")  # the bind and its one retry
    with running(fake_api):
        create_pod(core_v1, claim_pod("p1", "mine"))
        wait_for(lambda: node_of(fake_api, "p1"), 5, "p1 bound at its second attempt")
    status_writes = fake_api.requests_matching("PUT", r"/resourceclaims/mine/status$")
    states = [bool((w.body.get("status") or {}).get("allocation")) for w in status_writes]
    assert states == [True, False, True]  # allocated, undone after the failed bind, again
    claim_writes = fake_api.requests_matching("PUT", r"/resourceclaims/mine$")
    finalizers = [PROTECTION in (w.body["metadata"].get("finalizers") or ()) for w in claim_writes]
    assert finalizers == [True, False, True]
    assert reserved_for(fake_api, "mine") == ["p1"]


def test_a_claim_allocated_by_someone_else_leaves_too_few_gpus(fake_api, core_v1):
    dra_cluster(fake_api)
    allocated_elsewhere(fake_api, "theirs", "n1", [0, 1, 2, 3, 4, 5, 6])
    fake_api.put_object("resourceclaims", gpu_claim("mine", 2))
    condition = refusal(fake_api, core_v1, claim_pod("p1", "mine"))
    assert condition["status"] == "False"
    assert "1 of 2 matching devices are free" in condition["message"]
    assert devices_of(fake_api, "mine") == []


def test_a_queue_is_charged_the_gpus_its_pods_claims_hold(fake_api, core_v1, custom_objects):
    dra_cluster(fake_api)
    create_queue(custom_objects, queue_body("team", gpu_max=8, namespaces=[NS]))
    fake_api.put_object("resourceclaims", gpu_claim("mine", 2))
    with running(fake_api):
        create_pod(core_v1, claim_pod("p1", "mine"))
        wait_for(lambda: node_of(fake_api, "p1"), 5, "p1 bound")
        used = wait_for(
            lambda: queue_status(fake_api, "team").get("used", {}).get(GPU), 5, "team's usage"
        )
    assert used == "2"


def test_a_queue_max_holds_back_a_pod_whose_claims_would_pass_it(fake_api, core_v1, custom_objects):
    dra_cluster(fake_api)
    create_queue(custom_objects, queue_body("team", gpu_max=2, namespaces=[NS]))
    for name in ("first", "second"):
        fake_api.put_object("resourceclaims", gpu_claim(name, 2))
    with running(fake_api) as rt:
        create_pod(core_v1, claim_pod("a", "first"))
        wait_for(lambda: node_of(fake_api, "a"), 5, "a bound")
        create_pod(core_v1, claim_pod("b", "second"))
        wait_for(lambda: scheduled_condition(fake_api, "b"), 5, "b held back")
        rt.reporter.flush()
    message, node, devices = waiting(fake_api, "b", "second")
    assert "max" in message
    assert (node, devices) == (None, [])


def test_a_running_pod_is_charged_its_claims_gpus_when_the_scheduler_starts(
    fake_api, core_v1, custom_objects
):
    dra_cluster(fake_api)
    create_queue(custom_objects, queue_body("team", gpu_max=8, namespaces=[NS]))
    allocated_elsewhere(fake_api, "held", "n1", [4, 5, 6])  # as a scheduler before this one did
    body = claim_pod("p1", "held")
    body["spec"]["nodeName"] = "n1"
    create_pod(core_v1, body)
    with running(fake_api):
        used = wait_for(
            lambda: queue_status(fake_api, "team").get("used", {}).get(GPU), 5, "team's usage"
        )
    assert used == "3"


def test_without_resource_k8s_io_v1_dra_is_off_and_pods_with_claims_wait(fake_api, core_v1):
    gpu_node(fake_api, "n1")
    for plural in (
        "deviceclasses",
        "resourceslices",
        "resourceclaims",
        "resourceclaimtemplates",
        "devicetaintrules",
    ):
        fake_api.registry.remove("resource.k8s.io", plural)  # a server before 1.34
    condition = refusal(fake_api, core_v1, claim_pod("p1", "mine"))
    assert "unsupported: dynamic resource claims" in condition["message"]
    assert fake_api.requests_matching("GET", r"/apis/resource\.k8s\.io/v1/") == []
