"""The cyclic collector while the scheduler starts: off until the cache is warm, then on with
what was alive frozen; on again without freezing when the start takes too long."""

from __future__ import annotations

import gc

import pytest

from scheduler.cli.startgc import STEADY_THRESHOLDS, StartupGc
from tests.builders.clock import FakeClock


@pytest.fixture
def collector():
    """Each test leaves the process's collector as it found it: on, nothing frozen, its
    thresholds."""
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.enable()
    gc.set_threshold(*thresholds)


def test_off_until_synced_then_on_with_the_warm_objects_frozen(collector):
    gc.set_threshold(500, 5, 5)  # the process's own, restored at the end
    startup = StartupGc()
    startup.pause()
    assert not gc.isenabled()
    startup.synced()
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == STEADY_THRESHOLDS
    startup.release()
    assert (gc.isenabled(), gc.get_freeze_count()) == (True, 0)
    assert gc.get_threshold() == (500, 5, 5)


def test_full_passes_are_ten_times_rarer_once_serving_and_the_young_ones_as_before(collector):
    default = gc.get_threshold()  # CPython's, in a test process
    startup = StartupGc()
    startup.pause()
    startup.synced()
    serving = gc.get_threshold()
    assert serving[:2] == default[:2]
    assert serving[2] == 10 * default[2]


def test_a_start_past_its_limit_turns_the_collector_on_without_freezing(collector):
    clock = FakeClock()
    startup = StartupGc(limit=120.0, clock=clock)
    startup.pause()
    clock.advance(119.0)
    startup.check()
    assert not gc.isenabled()
    clock.advance(2.0)
    startup.check()
    assert (gc.isenabled(), gc.get_freeze_count()) == (True, 0)
    assert gc.get_threshold() == STEADY_THRESHOLDS  # serving, if unfrozen
    startup.synced()  # the sync that comes later freezes nothing
    assert gc.get_freeze_count() == 0
    startup.release()
    assert gc.get_threshold() != STEADY_THRESHOLDS


@pytest.mark.parametrize(
    ("active", "enabled_before"),
    [
        pytest.param(False, True, id="inactive (a test's runtime)"),
        pytest.param(True, False, id="collector already off (the process chose so)"),
    ],
)
def test_it_leaves_the_collector_alone(collector, active, enabled_before):
    if not enabled_before:
        gc.disable()
    startup = StartupGc(active=active)
    startup.pause()
    startup.synced()
    startup.release()
    assert (gc.isenabled(), gc.get_freeze_count()) == (enabled_before, 0)
    assert gc.get_threshold() != STEADY_THRESHOLDS
