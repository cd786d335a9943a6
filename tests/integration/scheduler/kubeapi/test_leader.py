"""Lease election and fencing against the fake API server (coordination.k8s.io/v1)."""

from __future__ import annotations

import logging
import threading

import pytest

from scheduler.cli.runtime import LeaseTiming
from scheduler.kubeapi.client import KubeClient
from scheduler.kubeapi.leader import AlwaysLeader, Fence, LeaderElector, LeaseStore, micro_time
from tests.builders.clock import FakeClock
from tests.builders.scheduler import create_pod, gpu_node, pod_body, running, wait_for


@pytest.fixture
def kube(fake_api):
    client = KubeClient(fake_api.api_client(), "gputopo-scheduler", "unused")
    yield client
    client.close()


def elector(kube, identity: str, clock: FakeClock) -> LeaderElector:
    return LeaderElector(
        kube, "default", "gputopo-scheduler", identity, clock=clock, wall=lambda: 1.7e9 + clock.now,
        lease_duration=15, renew_deadline=10, retry_period=2,
    )  # fmt: skip


def holder(fake_api) -> str | None:
    lease = fake_api.get_object("leases", "gputopo-scheduler", "default")
    return None if lease is None else lease["spec"].get("holderIdentity")


def test_protocols_are_implemented(kube):
    store: LeaseStore = kube
    fence: Fence = elector(store, "a", FakeClock())
    always: Fence = AlwaysLeader()
    assert (fence.may_bind(), always.may_bind()) == (False, True)


def test_one_leader_and_takeover_after_expiry(fake_api, kube):
    clock = FakeClock()
    a, b = elector(kube, "a", clock), elector(kube, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert (a.may_bind(), b.may_bind(), holder(fake_api)) == (True, False, "a")
    clock.now += 5
    assert a.try_acquire_or_renew()  # renewal
    assert not b.try_acquire_or_renew()  # b saw a new renewTime: its wait starts over
    clock.now += 14
    assert not b.try_acquire_or_renew()
    assert not a.may_bind()  # a stopped binding 10 s after its last renewal, before b may take over
    clock.now += 1.5
    assert b.try_acquire_or_renew()
    assert holder(fake_api) == "b"
    lease = fake_api.get_object("leases", "gputopo-scheduler", "default")
    assert lease["spec"]["leaseTransitions"] == 1


def test_fencing_when_the_api_server_is_unreachable(fake_api, kube):
    clock = FakeClock()
    a = elector(kube, "a", clock)
    assert a.try_acquire_or_renew()
    fake_api.down()
    clock.now += 9
    assert a.may_bind()
    with pytest.raises(Exception, match=r"lease .*(Connection|refused|Max retries)"):
        a.try_acquire_or_renew()
    clock.now += 1.01
    assert not a.may_bind()


def test_stale_write_loses_with_a_conflict(fake_api, kube):
    clock = FakeClock()
    a = elector(kube, "a", clock)
    assert a.try_acquire_or_renew()
    lease = fake_api.get_object("leases", "gputopo-scheduler", "default")
    assert lease is not None
    stale = dict(lease)
    fake_api.put_object(
        "leases", {**lease, "spec": {**lease["spec"], "renewTime": micro_time(1.8e9)}}
    )
    with pytest.raises(Exception, match=r"HTTP 409"):
        kube.replace_lease("default", "gputopo-scheduler", stale)


def test_second_replica_without_the_lease_binds_nothing(fake_api, core_v1):
    gpu_node(fake_api, "n1")
    fake_api.put_object(
        "leases",
        {
            "metadata": {"name": "gputopo-scheduler", "namespace": "default"},
            "spec": {
                "holderIdentity": "another-replica",
                "leaseDurationSeconds": 1,
                "renewTime": micro_time(1.7e9),
            },
        },
    )
    timing = LeaseTiming(duration=1.0, renew_deadline=0.6, retry_period=0.1)
    with running(fake_api, leader_elect=True, lease=timing) as rt:
        create_pod(core_v1, pod_body("p", gpus=1))
        wait_for(
            lambda: holder(fake_api) == rt.kube.identity, 5, "takeover after the lease expired"
        )
        wait_for(
            lambda: (fake_api.get_object("pods", "p", "default") or {})["spec"].get("nodeName"),
            5,
            "p bound",
        )
        gauge = rt.metrics.registry.get_sample_value("gputopo_scheduler_leader")
    requests = fake_api.requests
    took_over = next(
        i
        for i, r in enumerate(requests)
        if r.method in ("PUT", "POST")
        and "/leases" in r.path
        and (r.body or {}).get("spec", {}).get("holderIdentity") == rt.kube.identity
    )
    binds = [i for i, r in enumerate(requests) if r.path.endswith("/binding")]
    ours = ("/binding", "/events", "/status")
    writes_before = [r for r in requests[:took_over] if r.path.endswith(ours)]
    assert binds
    assert min(binds) > took_over
    assert writes_before == []  # no binding, event or status write while another replica led
    assert gauge == 1


def test_an_outage_costs_one_line_per_failed_round_with_the_reason(fake_api, tmp_path, caplog):
    caplog.set_level(logging.INFO)  # what an operator sees
    kubeconfig = str(fake_api.write_kubeconfig(tmp_path / "kubeconfig"))
    kube = KubeClient.from_kubeconfig(kubeconfig, "gputopo-scheduler", "a")  # as `run` makes it
    a = LeaderElector(
        kube, "default", "gputopo-scheduler", "a",
        lease_duration=3, renew_deadline=2, retry_period=0.05,
    )  # fmt: skip
    stop = threading.Event()
    thread = threading.Thread(target=a.run, args=(stop,))
    fake_api.fail_next(25, 500, path_regex="/leases/")
    thread.start()
    try:
        wait_for(a.may_bind, 20, "the lease after 25 failed rounds")
        fake_api.down()
        wait_for(lambda: len(failed(caplog, "Connection refused")) >= 25, 20, "25 rounds down")
        at_info = failed(caplog, "")
        caplog.set_level(logging.DEBUG, logger="scheduler.kubeapi.leader")
        wait_for(
            lambda: [r for r in failed(caplog, "refused")[len(at_info) :] if r.exc_info],
            20,
            "a round with its traceback at DEBUG",
        )
        caplog.set_level(logging.INFO, logger="scheduler.kubeapi.leader")
        fake_api.up()
        wait_for(a.may_bind, 20, "the lease again after the outage")
    finally:
        stop.set()
        thread.join(timeout=10)
        kube.close()
    assert len(failed(caplog, "HTTP 500")) == 25  # one line per failed round, with the reason
    assert {r.levelno for r in at_info} == {logging.WARNING}
    assert [r for r in at_info if r.exc_info] == []
    assert [r for r in at_info if "\n" in r.getMessage()] == []
    assert [r.getMessage() for r in caplog.records if r.name.startswith("urllib3")] == []


def failed(caplog, reason: str) -> list[logging.LogRecord]:
    """The election's "failed" lines that give `reason`."""
    return [
        r
        for r in caplog.records
        if r.name == "scheduler.kubeapi.leader"
        and "failed" in r.getMessage()
        and reason in r.getMessage()
    ]
