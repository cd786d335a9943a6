"""Gangs whose pods use ResourceClaims, against the fake API server: all of a gang's claims are
allocated together or none are, within one domain of the gang's required topology level."""

from __future__ import annotations

import time

from tests.builders.claimcluster import (
    GANG_LABEL,
    RACK,
    allocated_elsewhere,
    claim_gang,
    claim_pod,
    devices_of,
    dra_cluster,
    gpu_claim,
)
from tests.builders.scheduler import bound_pods, create_pod, running, scheduled_condition, wait_for
from tests.builders.workloads import create_upstream_podgroup, upstream_podgroup


def _islands(fake, pods: list[str]) -> set[tuple[str, int]]:
    """(node, island) of every claim's devices, one entry per claim when each is on one island."""
    out = set()
    for pod in pods:
        node = bound_pods(fake)[pod]
        islands = {int(d.removeprefix("gpu-")) // 4 for d in devices_of(fake, f"{pod}-gpus")}
        assert len(islands) == 1, f"{pod}'s claim spans islands {islands}"
        out.add((node, islands.pop()))
    return out


def test_a_gang_of_four_pods_with_two_gpu_claims_binds_all_on_islands(
    fake_api, core_v1, custom_objects
):
    dra_cluster(fake_api, ("n1", "n2"))
    with running(fake_api):
        pods = claim_gang(fake_api, core_v1, custom_objects, "g", 4, 2)
        wait_for(lambda: set(bound_pods(fake_api)) == set(pods), 10, "the whole gang bound")
    assert all(len(devices_of(fake_api, f"{p}-gpus")) == 2 for p in pods)
    used = [d for p in pods for d in devices_of(fake_api, f"{p}-gpus")]
    per_node = [
        (bound_pods(fake_api)[p], d) for p in pods for d in devices_of(fake_api, f"{p}-gpus")
    ]
    assert len(set(per_node)) == len(used) == 8  # nothing allocated twice
    assert len(_islands(fake_api, pods)) >= 2


def test_a_gang_that_does_not_fit_whole_allocates_nothing(fake_api, core_v1, custom_objects):
    dra_cluster(fake_api, ("n1",))
    allocated_elsewhere(fake_api, "theirs", "n1", [0, 1])  # 6 GPUs left for 4 x 2
    with running(fake_api) as rt:
        pods = claim_gang(fake_api, core_v1, custom_objects, "g", 4, 2)
        wait_for(lambda: scheduled_condition(fake_api, pods[0]), 5, "the gang marked waiting")
        time.sleep(0.5)  # the gang is tried again meanwhile: still none of it
        rt.reporter.flush()
    assert bound_pods(fake_api) == {}
    assert all(devices_of(fake_api, f"{p}-gpus") == [] for p in pods)
    assert fake_api.requests_matching("PUT", r"/resourceclaims/") == []
    condition = scheduled_condition(fake_api, pods[0])
    assert condition is not None
    assert "0 of 2 matching devices are free" in condition["message"]


def test_a_gangs_claims_stay_in_one_domain_of_its_required_level(fake_api, core_v1, custom_objects):
    dra_cluster(fake_api, ("n1", "n2", "n3"), racks=("a", "b", "b"))
    allocated_elsewhere(fake_api, "theirs", "n2", [0, 1, 2, 3, 4, 5])  # rack b: 10 free
    with running(fake_api):
        pods = claim_gang(
            fake_api, core_v1, custom_objects, "g", 5, 2, **{"gputopo.io/topology-required": RACK}
        )
        wait_for(lambda: set(bound_pods(fake_api)) == set(pods), 10, "the whole gang bound")
    nodes = {bound_pods(fake_api)[p] for p in pods}
    assert nodes <= {"n2", "n3"}  # rack a alone could hold 4 of the 5


def test_a_member_that_comes_after_its_gang_started_gets_its_claims_alone(
    fake_api, core_v1, custom_objects
):
    dra_cluster(fake_api, ("n1",))
    with running(fake_api):
        pods = claim_gang(fake_api, core_v1, custom_objects, "g", 2, 2)
        wait_for(lambda: set(bound_pods(fake_api)) == set(pods), 10, "the gang bound")
        fake_api.put_object("resourceclaims", gpu_claim("late-gpus", 2))
        body = claim_pod("late", "late-gpus")
        body["metadata"]["labels"] = {GANG_LABEL: "g"}
        create_pod(core_v1, body)
        wait_for(lambda: "late" in bound_pods(fake_api), 10, "the late member bound")
    late = devices_of(fake_api, "late-gpus")
    assert len(late) == 2
    assert not set(late) & {d for p in pods for d in devices_of(fake_api, f"{p}-gpus")}


def test_a_late_member_with_claims_stays_in_its_gangs_rack(fake_api, core_v1, custom_objects):
    dra_cluster(fake_api, ("n1", "n2", "n3"), racks=("a", "b", "b"))
    with running(fake_api) as rt:
        pods = claim_gang(
            fake_api, core_v1, custom_objects, "g", 2, 2, **{"gputopo.io/topology-required": RACK}
        )
        wait_for(lambda: set(bound_pods(fake_api)) == set(pods), 10, "the gang bound")
        assert {bound_pods(fake_api)[p] for p in pods} == {"n1"}  # rack a: the tightest
        fake_api.put_object("resourceclaims", gpu_claim("late-gpus", 8))  # rack b has 16 free
        body = claim_pod("late", "late-gpus")
        body["metadata"]["labels"] = {GANG_LABEL: "g"}
        create_pod(core_v1, body)
        wait_for(lambda: scheduled_condition(fake_api, "late"), 5, "the late member waits")
        time.sleep(0.5)  # tried again meanwhile: still not outside rack a
        rt.reporter.flush()
    assert "late" not in bound_pods(fake_api)
    assert devices_of(fake_api, "late-gpus") == []
    condition = scheduled_condition(fake_api, "late")
    assert condition is not None
    assert condition["message"].endswith("4 of 8 matching devices are free on node n1")


def test_a_basic_group_with_claims_keeps_its_pods_in_the_first_ones_rack(
    fake_api, core_v1, custom_objects
):
    fake_api.serve_workload_api(("v1beta1", "v1alpha3"))
    dra_cluster(fake_api, ("n1", "n2", "n3"), racks=("a", "b", "b"))
    allocated_elsewhere(fake_api, "on-n1", "n1", [0, 1])  # 6 free: the only node for b-0
    allocated_elsewhere(fake_api, "on-n2", "n2", [0, 1, 2, 3])  # 4 free
    allocated_elsewhere(fake_api, "on-n3", "n3", [0, 1, 2, 3])  # 4 free
    with running(fake_api) as rt:
        create_upstream_podgroup(custom_objects, upstream_podgroup("b", topology=RACK))
        for name, gpus in (("b-0", 6), ("b-1", 4)):
            fake_api.put_object("resourceclaims", gpu_claim(f"{name}-gpus", gpus))
            body = claim_pod(name, f"{name}-gpus")
            body["spec"]["schedulingGroup"] = {"podGroupName": "b"}
            create_pod(core_v1, body)
        wait_for(lambda: "b-0" in bound_pods(fake_api), 10, "b-0 bound")
        wait_for(lambda: scheduled_condition(fake_api, "b-1"), 5, "b-1 waits")
        time.sleep(0.5)  # tried again meanwhile: rack b has room, but b-0 is in rack a
        rt.reporter.flush()
    assert bound_pods(fake_api) == {"b-0": "n1"}
    assert devices_of(fake_api, "b-1-gpus") == []
