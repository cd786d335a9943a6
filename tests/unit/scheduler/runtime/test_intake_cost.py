"""Intake reads a pod once: the update that confirms a binding keeps the request already read,
and quantities in their usual spellings are counted without fractions (same answers)."""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agent.quantity import resource_units
from scheduler.runtime.cluster.podinfo import read_pod
from scheduler.runtime.cluster.podspec import units
from tests.builders.pods import container, pod

SCHEDULER = "gputopo-scheduler"
CONFIRM_CALL_BUDGET = 40  # Python calls; reading every container again took 120


def _pending() -> dict[str, Any]:
    limits = {"nvidia.com/gpu": 2, "cpu": "1", "memory": "2Gi"}
    body = pod("p", "ml", containers=[container(limits=limits)], schedulerName=SCHEDULER)
    body["metadata"]["uid"] = "uid-1"
    return body


def _bound(body: dict[str, Any]) -> dict[str, Any]:
    bound = copy.deepcopy(body)
    bound["spec"]["nodeName"] = "n1"
    bound["status"] = {"conditions": [{"type": "PodScheduled", "status": "True"}]}
    return bound


def _python_calls(action: Callable[[], object]) -> int:
    calls = 0

    def count(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        calls += event == "call"

    sys.setprofile(count)
    try:
        action()
    finally:
        sys.setprofile(None)
    return calls


def test_the_binding_update_keeps_the_request_and_is_cheap():
    pending = read_pod(_pending(), SCHEDULER)
    bound_body = _bound(_pending())
    bound = read_pod(bound_body, SCHEDULER, pending)
    assert bound.request is pending.request
    assert (bound.node, bound.pending, bound.counted) == ("n1", False, True)
    assert bound.request == read_pod(bound_body, SCHEDULER).request
    calls = _python_calls(lambda: read_pod(bound_body, SCHEDULER, pending))
    assert calls <= CONFIRM_CALL_BUDGET, f"the confirming read made {calls} Python calls"


def test_a_changed_input_or_another_pod_is_read_again():
    pending = read_pod(_pending(), SCHEDULER)
    relabelled = _pending()
    relabelled["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "g"}
    assert read_pod(relabelled, SCHEDULER, pending).request.pod_group == "g"
    resized = _pending()
    resized["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 4
    assert read_pod(resized, SCHEDULER, pending).request.gpus == 4
    recreated = _pending()
    recreated["metadata"]["uid"] = "uid-2"
    assert read_pod(recreated, SCHEDULER, pending).request is not pending.request


SUFFIXES = ["", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "m", "u", "e3"]


def _answer(parse: Callable[[str, object], int], resource: str, value: object) -> object:
    try:
        return parse(resource, value)
    except ValueError as exc:
        return ("ValueError", str(exc))


@given(
    st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "ephemeral-storage"]),
    st.one_of(
        st.builds(lambda n, s: f"{n}{s}", st.integers(0, 10**20), st.sampled_from(SUFFIXES)),
        st.integers(-(10**6), 10**12),
        st.text("0123456789.+-eEkKmMgGi ", max_size=8),
        st.booleans(),
    ),
)
def test_units_answer_as_resource_units_does(resource: str, value: object) -> None:
    assert _answer(units, resource, value) == _answer(resource_units, resource, value)
