"""Health per Xid class with a fake clock, through the real backend on the fake pynvml."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agent.inventory import discover
from agent.nvml.backend import GpuStatus
from agent.nvml.fixture import load_fixture
from agent.nvml.pynvml_backend import fake_backend
from deviceplugin.health import HealthMonitor, HealthTracker, XidClass, classify
from deviceplugin.settings import XidPolicy
from tests.builders.clock import FakeClock

QUIET, RECHECK = 60.0, 5.0


class Node:
    """The real backend over the fake pynvml, a tracker and a monitor, all on one fake clock."""

    def __init__(self, fixture: str = "dgx-a100-mig", policy: XidPolicy | None = None) -> None:
        self.clock = FakeClock()
        quiet = replace(load_fixture(fixture), events=())  # no scripted Xids: the test emits them
        self.backend, self.fake = fake_backend(quiet, clock=self.clock, sleep=self.clock.advance)
        self.inventory = discover(self.backend)
        self.tracker = HealthTracker(
            self.inventory,
            policy or XidPolicy(),
            quiet_period_s=QUIET,
            recheck_interval_s=RECHECK,
            clock=self.clock,
        )
        self.published: list[frozenset[str]] = []
        self.monitor = HealthMonitor(
            self.backend, self.tracker, self.published.append, wait_timeout_s=0.0, clock=self.clock
        )
        self.monitor.step()  # registers the event set, so emitted Xids are delivered

    def uuid(self, gpu: int) -> str:
        return self.inventory.gpus[gpu].uuid

    def xid(self, gpu: int, xid: int, **ids: int) -> frozenset[str]:
        self.fake.emit_xid(gpu, xid, **ids)
        assert self.monitor.step() is True
        return self.published[-1]

    def after(self, seconds: float) -> frozenset[str]:
        self.clock.advance(seconds)
        self.monitor.step()
        return self.published[-1]


@pytest.fixture
def node():
    n = Node()
    yield n
    n.backend.close()


@pytest.mark.parametrize("xid", [13, 31, 43, 45, 68, 109])
def test_application_xids_change_nothing(node, xid):
    assert node.xid(4, xid) == frozenset()


def test_transient_94_recovers_after_the_quiet_period(node):
    assert node.xid(5, 94) == {node.uuid(5)}
    assert node.after(QUIET - 1) == {node.uuid(5)}
    assert node.xid(5, 94) == {node.uuid(5)}  # a new Xid restarts the quiet period
    assert node.after(QUIET - 1) == {node.uuid(5)}
    assert node.after(1) == frozenset()


def test_79_stays_unhealthy_while_the_gpu_is_lost(node):
    assert node.xid(6, 79) == {node.uuid(6)}
    node.fake.set_lost(6)
    assert node.after(10 * RECHECK) == {node.uuid(6)}
    node.fake.set_lost(6, False)
    assert node.after(RECHECK) == frozenset()


def test_48_recovers_only_when_the_remap_is_no_longer_pending(node):
    node.fake.set_remap_pending(7)
    assert node.xid(7, 48) == {node.uuid(7)}
    assert node.after(10 * QUIET) == {node.uuid(7)}
    node.fake.set_remap_pending(7, False)
    assert node.after(RECHECK) == frozenset()


def test_an_xid_from_a_gpu_already_lost_marks_only_that_gpu(node):
    node.fake.set_lost(6)
    node.fake.emit_xid(6, 79)
    node.monitor.step()  # the backend named the GPU from the UUID it cached at registration
    assert node.published[-1] == {node.uuid(6)}
    assert node.after(RECHECK) == {node.uuid(6)}


def test_unknown_xid_counts_as_reset_required(node):
    assert classify(999, XidPolicy()) is XidClass.RESET_REQUIRED
    assert node.xid(4, 999) == {node.uuid(4)}
    node.fake.set_lost(4)
    assert node.after(QUIET + RECHECK) == {node.uuid(4)}


def test_mig_xid_marks_only_that_mig_device(node):
    gpu = node.inventory.gpus[1]
    target = gpu.mig_devices[1]
    assert node.xid(1, 94, gi_id=target.gi_id, ci_id=target.ci_id) == {target.uuid}


def test_losing_nvml_marks_every_gpu_and_keeps_going(node):
    node.fake.fail("nvmlEventSetWait", 999, times=1)  # NVML_ERROR_UNKNOWN
    node.monitor.step()
    assert node.published[-1] == {g.uuid for g in node.inventory.gpus}
    assert node.after(RECHECK) == frozenset()  # every GPU answers again


def test_dp_disable_all_turns_xid_checks_off():
    policy = XidPolicy.from_env("all", None)
    assert not policy.checks_enabled
    assert policy.ignores(79)


def test_dp_disable_list_and_enable_list():
    policy = XidPolicy.from_env("48, 94", "13")
    assert policy.ignores(48)
    assert policy.ignores(94)
    assert not policy.ignores(13)  # force-enabled
    assert policy.ignores(31)
    everything = XidPolicy.from_env("xids", "all")
    assert not everything.ignores(43)


def test_dp_variables_reject_garbage():
    with pytest.raises(ValueError, match=r"DP_ENABLE_HEALTHCHECKS: 'x' is not an Xid"):
        XidPolicy.from_env(None, "13,x")


def test_ignored_xid_via_policy_changes_nothing():
    n = Node(policy=XidPolicy.from_env("79", None))
    try:
        assert n.xid(3, 79) == frozenset()
    finally:
        n.backend.close()


def test_tracker_probes_at_most_once_per_recheck_interval():
    n = Node()
    calls: list[str] = []

    def status(uuid):
        calls.append(uuid)
        return GpuStatus(responds=False, lost=True, remap_pending=False)

    try:
        n.fake.emit_xid(2, 79)
        n.monitor.step()
        for _ in range(10):
            n.clock.advance(1.0)
            n.tracker.reevaluate(status)
        assert len(calls) == 2
    finally:
        n.backend.close()


def test_every_xid_read_is_counted_by_gpu_and_xid_ignored_ones_too(node):
    node.xid(4, 13)  # ignored: no health change, still counted
    node.xid(4, 13)
    node.xid(5, 94)
    node.xid(5, 63)  # one the policy does not name: counted from its first event
    seen = {key: n for key, n in node.tracker.xid_counts().items() if n}
    assert seen == {(node.uuid(4), 13): 2, (node.uuid(5), 94): 1, (node.uuid(5), 63): 1}


def test_each_gpu_counts_each_named_xid_from_zero_before_any_event():
    n = Node(policy=XidPolicy(ignored=frozenset({13}), enabled=frozenset({31})))
    try:
        counts = n.tracker.xid_counts()
    finally:
        n.backend.close()
    named = {74, 92, 94, 48, 79, 95, 119, 13, 31}
    assert counts == {(gpu.uuid, xid): 0 for gpu in n.inventory.gpus for xid in named}
