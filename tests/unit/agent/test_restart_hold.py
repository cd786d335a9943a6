"""`RestartHold` on a fake clock: a restart during a hold re-arms its cap, and a hold at its cap
never ends on an answer listing fewer pods than the kubelet did before it restarted."""

from __future__ import annotations

import logging

import pytest

from agent.availability import PodResourcesSnapshot
from agent.restart_hold import MAX_HOLD_S, SETTLE_S, RestartHold
from tests.builders.clock import FakeClock
from tests.builders.topology import gpu_pod

TRAIN = tuple(gpu_pod("ml", f"train-{i}", f"GPU-{i}") for i in range(4))


def answer(*names: str) -> PodResourcesSnapshot:
    """What the kubelet's List says: the training pods named, plus CPU-only pods by name."""
    pods = [p for p in TRAIN if p.name in names]
    pods += [gpu_pod("web", n) for n in names if not n.startswith("train-")]
    return PodResourcesSnapshot(pods=tuple(pods))


def counted(hold: RestartHold, snapshot: PodResourcesSnapshot) -> list[str]:
    return sorted(p.name for p in hold.apply(snapshot).pods)


@pytest.fixture
def hold(caplog: pytest.LogCaptureFixture) -> tuple[RestartHold, FakeClock]:
    caplog.set_level(logging.INFO, logger="agent.restart_hold")
    clock = FakeClock(start=0.0)
    return RestartHold(clock=clock), clock


def churning(hold: RestartHold, clock: FakeClock, until: float, *names: str) -> list[str]:
    """Answer `names` plus a CPU-only pod that changes every second (the view never settles),
    until the clock reads `until`; what the last answer counted."""
    last: list[str] = []
    while clock.now < until:
        last = counted(hold, answer(*names, f"batch-{int(clock.now)}"))
        clock.advance(1.0)
    return last


def test_a_restart_during_a_hold_re_arms_its_cap(hold, caplog) -> None:
    rh, clock = hold
    counted(rh, answer("train-0", "train-1", "batch-pre"))
    rh.restarted("kubelet restarted")
    churning(rh, clock, 9.0, "train-0", "train-1")
    rh.restarted("kubelet restarted again")  # 9 s in: the first hold never settled
    clock.advance(1.5)  # 10.5 s: past the first restart's cap, in the second's empty window
    assert {"train-0", "train-1"} <= set(counted(rh, answer()))
    clock.advance(1.0)
    churning(rh, clock, 9.0 + MAX_HOLD_S, "train-0", "train-1")
    assert rh.holding  # the cap counts from the second restart
    churning(rh, clock, 9.0 + MAX_HOLD_S + 1, "train-0", "train-1")
    assert not rh.holding
    messages = [r.getMessage() for r in caplog.records]
    assert messages[1] == "kubelet restarted again during a hold: its 10 s cap now counts from here"
    assert messages[-1].startswith(f"PodResources view not settled after {9.5 + MAX_HOLD_S:.1f} s")


def test_at_its_cap_a_hold_does_not_end_on_a_shorter_answer(hold, caplog) -> None:
    rh, clock = hold
    counted(rh, answer("train-0", "train-1", "train-2", "batch-pre"))
    rh.restarted("kubelet restarted")
    churning(rh, clock, MAX_HOLD_S, "train-0", "train-1", "train-2")
    # a restart nobody saw: the kubelet lists fewer pods, and its view keeps changing
    for _ in range(3):
        assert {"train-1", "train-2"} <= set(counted(rh, answer("train-0", f"batch-{clock.now}")))
        clock.advance(1.0)
    assert rh.holding
    assert "batch-pre" not in churning(rh, clock, clock.now + 1, "train-0", "train-1", "train-2")
    assert not rh.holding  # as many pods as before: the hold ended on this answer
    past = [r.getMessage() for r in caplog.records if "still changing" in r.getMessage()]
    assert past == [
        "PodResources view still changing 10.0 s after the kubelet's latest restart and listing "
        f"2 pod(s), 4 before it: the hold goes on until the view is steady for {SETTLE_S:.0f} s "
        "or lists as many"
    ]


def test_past_its_cap_a_shorter_view_that_settles_ends_the_hold(hold) -> None:
    rh, clock = hold
    counted(rh, answer("train-0", "train-1", "batch-pre"))
    rh.restarted("kubelet restarted")
    churning(rh, clock, MAX_HOLD_S + 1, "train-0")  # train-1 really ended
    assert "train-1" in counted(rh, answer("train-0"))
    clock.advance(SETTLE_S)
    assert counted(rh, answer("train-0")) == ["train-0"]
    assert not rh.holding


def test_a_restart_in_the_empty_window_keeps_the_count_from_before(hold) -> None:
    rh, clock = hold
    counted(rh, answer("train-0", "train-1", "train-2", "train-3"))
    rh.restarted("kubelet restarted")
    counted(rh, answer())  # the empty window
    rh.restarted("kubelet restarted again")  # before the kubelet re-synced
    churning(rh, clock, MAX_HOLD_S + 2, "train-0", "train-1")
    assert rh.holding  # 3 pods listed (2 + a batch pod), 4 before the first restart
    churning(rh, clock, MAX_HOLD_S + 3, "train-0", "train-1", "train-2")
    assert not rh.holding
