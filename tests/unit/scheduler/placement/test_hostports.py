"""Host ports (`hostports.port_conflicts`) and the decisions the `Placer` makes with them: a
node where another pod takes a port the pod asks for is refused with kube-scheduler's
`NodePorts` message, on both of the Placer's paths."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.placement import Placer, PodRequest, Scoring, Snapshot, default_scoring
from scheduler.placement.hostports import REASON_PORTS, port_conflicts
from scheduler.placement.request import HostPort
from tests.builders.placement import make_node, pod


def nodes(count: int) -> Snapshot:
    return Snapshot(make_node(f"n{i}") for i in range(count))


def taking(key: str, *ports: HostPort, gpus: int = 1) -> PodRequest:
    return pod(f"default/{key}", gpus=gpus, host_ports=ports)


@pytest.fixture(params=("pick", "memo"))
def scoring(request: pytest.FixtureRequest) -> Scoring:
    """The Placer's two paths: `pick` (a candidate limit) and the verdict memo."""
    return Scoring() if request.param == "pick" else default_scoring()


def test_a_taken_port_sends_the_next_pod_to_another_node(scoring):
    snap = nodes(2)
    snap.assume_on(taking("a", HostPort(port=8080)), "n0")
    incoming = taking("b", HostPort(port=8080))
    assert port_conflicts(incoming, snap) == {"n0": REASON_PORTS}
    assert Placer(snap, scoring).decide(incoming).node == "n1"


def test_with_every_node_taken_the_pod_waits_and_says_why(scoring):
    snap = nodes(2)
    snap.assume_on(taking("a", HostPort(port=22)), "n0")
    snap.assume_on(taking("b", HostPort(port=22, ip="10.0.0.2")), "n1")
    decision = Placer(snap, scoring).decide(taking("c", HostPort(port=22)))
    assert decision.node is None
    assert decision.message() == (
        "0/2 nodes are available: 2 node(s) didn't have free ports for the requested pod ports."
    )


@pytest.mark.parametrize(
    ("taken", "asked", "conflict"),
    [
        (HostPort(port=53, protocol="UDP"), HostPort(port=53), False),
        (HostPort(port=80, ip="10.0.0.1"), HostPort(port=80, ip="10.0.0.2"), False),
        (HostPort(port=80, ip="10.0.0.1"), HostPort(port=80), True),
        (HostPort(port=80), HostPort(port=80, ip="10.0.0.1"), True),
        (HostPort(port=80, ip="10.0.0.1"), HostPort(port=80, ip="10.0.0.1"), True),
        (HostPort(port=80), HostPort(port=81), False),
    ],
)
def test_ports_conflict_on_port_protocol_and_an_address_in_common(taken, asked, conflict):
    snap = nodes(1)
    snap.assume_on(taking("a", taken), "n0")
    assert bool(port_conflicts(taking("b", asked), snap)) is conflict


def test_a_port_is_free_again_once_its_pod_is_gone_and_a_pod_never_blocks_itself(scoring):
    snap = nodes(1)
    first = taking("a", HostPort(port=9000))
    snap.assume_on(first, "n0")
    assert port_conflicts(first, snap) is None  # its own port (a gang member placed again)
    placer = Placer(snap, scoring)
    assert placer.decide(taking("b", HostPort(port=9000))).node is None
    snap.forget(first.key)
    assert placer.decide(taking("b", HostPort(port=9000))).node == "n0"


def test_a_node_without_room_is_counted_under_the_room_it_lacks(scoring):
    """The one place the message differs from kube-scheduler's, whose `NodePorts` runs first."""
    snap = nodes(1)
    snap.assume_on(taking("a", HostPort(port=80), gpus=8), "n0")
    decision = Placer(snap, scoring).decide(taking("b", HostPort(port=80)))
    assert decision.message() == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."


ports = st.builds(
    HostPort,
    port=st.sampled_from([22, 80, 8080]),
    protocol=st.sampled_from(["TCP", "UDP"]),
    ip=st.sampled_from(["", "10.0.0.1", "10.0.0.2"]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    running=st.lists(st.tuples(st.integers(0, 3), st.lists(ports, max_size=2)), max_size=8),
    asked=st.lists(ports, min_size=1, max_size=2),
    path=st.sampled_from(["pick", "memo"]),
)
def test_the_pod_goes_only_where_no_pod_takes_a_port_it_asks(running, asked, path):
    snap = nodes(4)
    for i, (node, taken) in enumerate(running):
        snap.assume_on(taking(f"r{i}", *taken, gpus=0), f"n{node}")
    incoming = taking("new", *asked)
    blocked = {
        f"n{node}"
        for node, taken in running
        if any(a.overlaps(t) or t.overlaps(a) for a in asked for t in taken)
    }
    assert set(port_conflicts(incoming, snap) or {}) == blocked
    scoring = Scoring() if path == "pick" else default_scoring()
    decision = Placer(snap, scoring).decide(incoming)
    assert decision.node is None if len(blocked) == 4 else decision.node not in blocked
