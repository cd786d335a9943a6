"""A group's topology domain holds for all its members (DESIGN §7, §15): members placed after
the gang (beyond `minMember`, replacements) and every pod of a `basic` upstream PodGroup go to
the domain its placed members are in, as kube-scheduler 1.37 keeps them."""

from __future__ import annotations

import time

import pytest

from scheduler.placement.pick import REASON_OUTSIDE_DOMAIN
from tests.builders.scheduler import (
    bound_pods,
    create_pod,
    create_podgroup,
    delete_node,
    delete_pod,
    gpu_node,
    pod_body,
    podgroup,
    running,
    scheduled_condition,
    wait_for,
)
from tests.builders.workloads import create_upstream_podgroup, member_pod, upstream_podgroup

pytestmark = pytest.mark.timeout(60)

RACK = "gputopo.io/rack"
GANG_LABEL = "scheduling.x-k8s.io/pod-group"


def _gang_pod(name: str, group: str, gpus: int):
    return pod_body(name, gpus=gpus, labels={GANG_LABEL: group})


def _rack_of(fake, pod: str) -> str:
    node = bound_pods(fake)[pod]
    return str(fake.get_object("nodes", node)["metadata"]["labels"][RACK])


def _bind_gang(fake, core, custom, name: str, annotation: str, gpus: int) -> None:
    """A PodGroup of minMember 2 with `annotation: rack`, its two pods, both bound."""
    create_podgroup(custom, podgroup(name, 2, annotations={annotation: RACK}))
    for i in range(2):
        create_pod(core, _gang_pod(f"{name}-{i}", name, gpus=gpus))
    wait_for(lambda: {f"{name}-0", f"{name}-1"} <= set(bound_pods(fake)), 5, "the gang")


def _two_racks(fake, gpus: int = 8) -> None:
    gpu_node(fake, "a1", gpus=gpus, labels={RACK: "r1"})
    gpu_node(fake, "b1", gpus=gpus, labels={RACK: "r2"})


def test_members_beyond_min_member_wait_for_room_in_the_gangs_rack(
    fake_api, core_v1, custom_objects
):
    _two_racks(fake_api)
    with running(fake_api):
        _bind_gang(fake_api, core_v1, custom_objects, "g", "gputopo.io/topology-required", 4)
        home = _rack_of(fake_api, "g-0")
        create_pod(core_v1, _gang_pod("g-2", "g", gpus=4))  # the other rack is empty
        message = wait_for(
            lambda: (scheduled_condition(fake_api, "g-2") or {}).get("message"), 5, "g-2 waits"
        )
        assert "g-2" not in bound_pods(fake_api)
        assert f"1 {REASON_OUTSIDE_DOMAIN}" in message, message
        assert "1 Insufficient nvidia.com/gpu" in message, message
        delete_pod(core_v1, "g-0")  # room in the gang's rack
        wait_for(lambda: "g-2" in bound_pods(fake_api), 5, "g-2 bound")
    assert _rack_of(fake_api, "g-2") == home


def test_a_preferred_domain_takes_later_members_first_then_lets_them_out(
    fake_api, core_v1, custom_objects
):
    _two_racks(fake_api)
    # r2 is fuller (binpacking prefers its node for a lone pod) and too full for the gang.
    create_pod(core_v1, pod_body("foreign", gpus=6, scheduler="default-scheduler", node="b1"))
    with running(fake_api):
        _bind_gang(fake_api, core_v1, custom_objects, "p", "gputopo.io/topology-preferred", 2)
        assert {_rack_of(fake_api, "p-0"), _rack_of(fake_api, "p-1")} == {"r1"}
        for i in range(2, 4):  # r1 has room for both: they stay with the gang
            create_pod(core_v1, _gang_pod(f"p-{i}", "p", gpus=2))
        wait_for(lambda: {"p-2", "p-3"} <= set(bound_pods(fake_api)), 5, "two more")
        assert {_rack_of(fake_api, "p-2"), _rack_of(fake_api, "p-3")} == {"r1"}
        create_pod(core_v1, _gang_pod("p-4", "p", gpus=2))  # r1 is full: preferred lets it out
        wait_for(lambda: "p-4" in bound_pods(fake_api), 5, "p-4 bound")
    assert _rack_of(fake_api, "p-4") == "r2"


@pytest.fixture
def upstream(fake_api):
    fake_api.serve_workload_api(("v1beta1", "v1alpha3"))
    return fake_api


def test_a_basic_group_starts_in_the_domain_that_holds_most_of_it(
    upstream, core_v1, custom_objects
):
    gpu_node(upstream, "a1", gpus=4, labels={RACK: "r1"})
    gpu_node(upstream, "b1", gpus=8, labels={RACK: "r2"})
    gpu_node(upstream, "b2", gpus=4, labels={RACK: "r2"})
    with running(upstream):
        names = [f"b-{i}" for i in range(4)]
        for name in names:  # 16 GPUs: r2 holds three of them (12 GPUs), r1 one
            create_pod(core_v1, member_pod(name, "b", gpus=4))
        # The pods wait for their PodGroup, so that all four are pending when it comes.
        wait_for(lambda: scheduled_condition(upstream, "b-3"), 5, "b-3 waits for its group")
        create_upstream_podgroup(custom_objects, upstream_podgroup("b", topology=RACK))
        wait_for(lambda: len(set(names) & set(bound_pods(upstream))) == 3, 5, "three bound")
        waiting = next(n for n in names if n not in bound_pods(upstream))
        message = wait_for(
            lambda: (scheduled_condition(upstream, waiting) or {}).get("message"), 5, "a reason"
        )
        assert REASON_OUTSIDE_DOMAIN in message, message
    assert {_rack_of(upstream, n) for n in names if n != waiting} == {"r2"}  # never split


def test_a_basic_group_adds_pods_one_by_one_inside_its_domain(upstream, core_v1, custom_objects):
    gpu_node(upstream, "a1", gpus=8, labels={RACK: "r1"})
    gpu_node(upstream, "b1", gpus=8, labels={RACK: "r2"})
    with running(upstream):
        create_upstream_podgroup(custom_objects, upstream_podgroup("b", topology=RACK))
        create_pod(core_v1, member_pod("b-0", "b", gpus=4))
        wait_for(lambda: "b-0" in bound_pods(upstream), 5, "the first")
        home = _rack_of(upstream, "b-0")
        create_pod(core_v1, member_pod("b-1", "b", gpus=4))
        wait_for(lambda: "b-1" in bound_pods(upstream), 5, "the second")
        assert _rack_of(upstream, "b-1") == home
        create_pod(core_v1, member_pod("b-2", "b", gpus=4))  # no room left at home
        message = wait_for(
            lambda: (scheduled_condition(upstream, "b-2") or {}).get("message"), 5, "b-2 waits"
        )
    assert "b-2" not in bound_pods(upstream)
    assert REASON_OUTSIDE_DOMAIN in message, message


def test_a_replacement_for_a_lost_member_goes_back_to_the_gangs_rack(
    fake_api, core_v1, custom_objects
):
    for name in ("a1", "a2", "a3"):
        gpu_node(fake_api, name, gpus=1, labels={RACK: "r2"})
    gpu_node(fake_api, "b1", gpus=1, labels={RACK: "r1"})  # first in order when racks tie
    with running(fake_api):
        _bind_gang(fake_api, core_v1, custom_objects, "g", "gputopo.io/topology-required", 1)
        assert {_rack_of(fake_api, "g-0"), _rack_of(fake_api, "g-1")} == {"r2"}
        delete_node(core_v1, bound_pods(fake_api)["g-0"])
        assert len(fake_api.collect_orphaned_pods()) == 1  # PodGC: g-0 is gone
        wait_for(lambda: "g-0" not in bound_pods(fake_api), 5, "g-0 lost")
        # One GPU free in each rack: on its own the replacement would take r1's, first in order.
        create_pod(core_v1, _gang_pod("r-0", "g", gpus=1))
        wait_for(lambda: "r-0" in bound_pods(fake_api), 5, "the replacement bound")
    assert _rack_of(fake_api, "r-0") == "r2"


def test_a_gang_that_starts_with_its_minimum_keeps_the_rest_in_its_rack(
    fake_api, core_v1, custom_objects
):
    gpu_node(fake_api, "a1", gpus=8, labels={RACK: "r1"})
    gpu_node(fake_api, "b1", gpus=4, labels={RACK: "r2"})
    with running(fake_api):
        for i in range(4):  # 16 GPUs: no rack holds all; r1 holds the minimum, two of them
            create_pod(core_v1, _gang_pod(f"g-{i}", "g", gpus=4))
        wait_for(lambda: scheduled_condition(fake_api, "g-3"), 5, "the pods wait for the group")
        annotations = {"gputopo.io/topology-required": RACK}
        create_podgroup(custom_objects, podgroup("g", 2, annotations=annotations))
        wait_for(lambda: {"g-0", "g-1"} <= set(bound_pods(fake_api)), 5, "the minimum bound")
        message = wait_for(
            lambda: (
                REASON_OUTSIDE_DOMAIN
                in (scheduled_condition(fake_api, "g-2") or {}).get("message", "")
            ),
            5,
            "g-2 waits for room in r1",
        )
    assert message
    assert set(bound_pods(fake_api)) == {"g-0", "g-1"}  # r2's 4 free GPUs stay unused
    assert {_rack_of(fake_api, "g-0"), _rack_of(fake_api, "g-1")} == {"r1"}


def test_a_gang_that_fits_no_rack_whole_starts_in_the_rack_that_holds_most_of_it(
    fake_api, core_v1, custom_objects
):
    gpu_node(fake_api, "a1", gpus=8, labels={RACK: "r1"})  # the tightest for the minimum
    gpu_node(fake_api, "b1", gpus=8, labels={RACK: "r2"})
    gpu_node(fake_api, "b2", gpus=8, labels={RACK: "r2"})
    with running(fake_api):
        names = [f"g-{i}" for i in range(5)]
        for name in names:  # 20 GPUs: r2 holds four of them, r1 two
            create_pod(core_v1, _gang_pod(name, "g", gpus=4))
        wait_for(lambda: scheduled_condition(fake_api, "g-4"), 5, "the pods wait for the group")
        annotations = {"gputopo.io/topology-required": RACK}
        create_podgroup(custom_objects, podgroup("g", 2, annotations=annotations))
        wait_for(lambda: len(bound_pods(fake_api)) == 4, 5, "four bound")
        time.sleep(0.3)
    assert set(bound_pods(fake_api)) == set(names[:4])  # the oldest first
    assert {_rack_of(fake_api, n) for n in names[:4]} == {"r2"}
