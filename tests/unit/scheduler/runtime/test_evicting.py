"""The `DisruptionTarget` message names the preemptor's unit, so a new leader can read it back."""

from __future__ import annotations

import pytest

from scheduler.runtime.preempting.evicting import disruption_message, preemptor_of


def _victim(message: str, reason: str = "PreemptionByScheduler") -> dict:
    condition = {"type": "DisruptionTarget", "status": "True", "reason": reason}
    return {"status": {"conditions": [{**condition, "message": message}]}}


@pytest.mark.parametrize("unit", ["pod/team-a/big", "gang/team-a/train"])
def test_the_message_names_the_unit_and_reads_back(unit):
    message = disruption_message("gputopo-scheduler", unit, 100)
    assert unit in message
    assert preemptor_of(_victim(message), "gputopo-scheduler") == unit


def test_other_schedulers_and_evictions_are_not_read_as_ours():
    message = disruption_message("other-scheduler", "pod/a/b", 1)
    assert preemptor_of(_victim(message), "gputopo-scheduler") is None
    ours = disruption_message("gputopo-scheduler", "pod/a/b", 1)
    assert preemptor_of(_victim(ours, reason="EvictionByEvictionAPI"), "gputopo-scheduler") is None
    assert preemptor_of({"status": {}}, "gputopo-scheduler") is None
