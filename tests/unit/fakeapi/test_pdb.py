"""PodDisruptionBudgets (`policy/v1`): validation, the status subresource, and `settle_pdb` (what
the disruption controller would write), through the real client."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client import ApiClient, ApiException, CoreV1Api, PolicyV1Api

from tests.builders.clock import FakeClock
from tests.builders.fakeapi import make_pdb, make_pod, status_body
from tests.fakeapi import FakeApiServer
from tests.fakeapi.objects import format_time

APP = {"app": "train"}


@pytest.fixture
def policy(kube_client: ApiClient) -> PolicyV1Api:
    return PolicyV1Api(kube_client)


def _running(fake: FakeApiServer, core_v1: Any, name: str, *, ready: bool = True) -> None:
    core_v1.create_namespaced_pod("default", make_pod(name, node="n1", labels=APP))
    fake.start_pod(name, ready=ready)


def test_new_budget_has_generation_1_and_zero_counters(fake_api, policy):
    body = make_pdb("b", match_labels=APP, min_available=1)
    body["status"] = {"disruptionsAllowed": 5, "observedGeneration": 1}
    created = policy.create_namespaced_pod_disruption_budget("default", body)
    assert created.metadata.generation == 1
    stored = fake_api.get_object("poddisruptionbudgets", "b", "default")
    assert stored["status"] == {
        "disruptionsAllowed": 0,
        "currentHealthy": 0,
        "desiredHealthy": 0,
        "expectedPods": 0,
    }
    listed = policy.list_pod_disruption_budget_for_all_namespaces()
    assert [(p.metadata.name, p.spec.min_available) for p in listed.items] == [("b", 1)]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param(
            {"minAvailable": 1, "maxUnavailable": 1},
            "spec: Invalid value: policy.PodDisruptionBudgetSpec{...}: minAvailable and "
            "maxUnavailable cannot be both set",
            id="both minAvailable and maxUnavailable",
        ),
        pytest.param(
            {"minAvailable": -1},
            "spec.minAvailable: Invalid value: -1: must be greater than or equal to 0",
            id="negative",
        ),
        pytest.param(
            {"maxUnavailable": "150%"},
            "spec.maxUnavailable: Invalid value: "
            'intstr.IntOrString{Type:1, IntVal:0, StrVal:"150%"}: must not be greater than 100%',
            id="above 100%",
        ),
        pytest.param(
            {"minAvailable": "half"},
            'spec.minAvailable: Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:"half"}'
            ": a valid percent string must be a numeric string followed by an ending '%'",
            id="not a percentage",
        ),
        pytest.param(
            {"selector": {"matchExpressions": [{"key": "app", "operator": "Near"}]}},
            'spec.selector.matchExpressions[0].operator: Invalid value: "Near": not a valid '
            "selector operator",
            id="unknown selector operator",
        ),
        pytest.param(
            {"selector": {"matchExpressions": [{"key": "app", "operator": "In"}]}},
            "spec.selector.matchExpressions[0].values: Required value: must be specified when "
            "`operator` is 'In' or 'NotIn'",
            id="In without values",
        ),
    ],
)
def test_invalid_budgets_are_422(policy, spec, message):
    body = make_pdb("b")
    body["spec"] = spec
    with pytest.raises(ApiException) as err:
        policy.create_namespaced_pod_disruption_budget("default", body)
    assert err.value.status == 422
    assert message in status_body(err.value)["message"]
    assert status_body(err.value)["message"].startswith(
        'PodDisruptionBudget.policy "b" is invalid: '
    )


def test_status_is_written_only_through_the_status_subresource(fake_api, policy):
    policy.create_namespaced_pod_disruption_budget("default", make_pdb("b", match_labels=APP))
    status = {"observedGeneration": 1, "disruptionsAllowed": 2, "currentHealthy": 3}
    written = policy.patch_namespaced_pod_disruption_budget_status(
        "b", "default", {"status": status}
    )
    assert (written.status.disruptions_allowed, written.status.current_healthy) == (2, 3)
    assert (written.status.desired_healthy, written.status.expected_pods) == (0, 0)
    main = policy.patch_namespaced_pod_disruption_budget(
        "b", "default", {"status": {"disruptionsAllowed": 9}}
    )
    assert main.status.disruptions_allowed == 2
    assert main.metadata.generation == 1


def test_a_spec_change_moves_the_generation_past_the_observed_one(policy):
    policy.create_namespaced_pod_disruption_budget("default", make_pdb("b", match_labels=APP))
    policy.patch_namespaced_pod_disruption_budget_status(
        "b", "default", {"status": {"observedGeneration": 1}}
    )
    changed = policy.patch_namespaced_pod_disruption_budget(
        "b", "default", {"spec": {"minAvailable": 2}}
    )
    assert (changed.metadata.generation, changed.status.observed_generation) == (2, 1)


def test_a_negative_counter_is_422_on_a_status_write(policy):
    policy.create_namespaced_pod_disruption_budget("default", make_pdb("b", match_labels=APP))
    with pytest.raises(ApiException) as err:
        policy.patch_namespaced_pod_disruption_budget_status(
            "b", "default", {"status": {"disruptionsAllowed": -1}}
        )
    assert err.value.status == 422
    assert status_body(err.value)["message"].endswith(
        "status.disruptionsAllowed: Invalid value: -1: must be greater than or equal to 0"
    )


def test_settle_counts_ready_selected_pods_as_the_disruption_controller_does(
    fake_api, core_v1, policy
):
    for name in ("a", "b"):
        _running(fake_api, core_v1, name)
    _running(fake_api, core_v1, "c", ready=False)
    core_v1.create_namespaced_pod("default", make_pod("other", node="n1", labels={"app": "x"}))
    fake_api.start_pod("other")
    policy.create_namespaced_pod_disruption_budget(
        "default", make_pdb("b", match_labels=APP, min_available=1)
    )
    fake_api.settle_pdb("b")
    status = policy.read_namespaced_pod_disruption_budget_status("b", "default").status
    assert (
        status.observed_generation,
        status.expected_pods,
        status.current_healthy,
        status.desired_healthy,
        status.disruptions_allowed,
    ) == (1, 3, 2, 1, 1)
    assert [(c.type, c.status, c.reason) for c in status.conditions] == [
        ("DisruptionAllowed", "True", "SufficientPods")
    ]


@pytest.mark.parametrize(
    ("amounts", "desired"),
    [
        pytest.param({"min_available": 2}, 2, id="minAvailable 2"),
        pytest.param({"min_available": "50%"}, 2, id="minAvailable 50% of 3 rounds up"),
        pytest.param({"max_unavailable": 1}, 2, id="maxUnavailable 1"),
        pytest.param({"max_unavailable": "34%"}, 1, id="maxUnavailable 34% of 3 rounds up"),
        pytest.param({"min_available": 5}, 5, id="more than there are"),
    ],
)
def test_settle_computes_desired_healthy_and_allowed_disruptions(
    fake_api, core_v1, policy, amounts, desired
):
    for name in ("a", "b", "c"):
        _running(fake_api, core_v1, name)
    policy.create_namespaced_pod_disruption_budget(
        "default", make_pdb("b", match_labels=APP, **amounts)
    )
    status = fake_api.settle_pdb("b")["status"]
    assert (status["desiredHealthy"], status["disruptionsAllowed"]) == (
        desired,
        max(0, 3 - desired),
    )


def test_settle_with_an_empty_selector_counts_every_pod_and_without_one_none(
    fake_api, core_v1, policy
):
    _running(fake_api, core_v1, "a")
    everything = make_pdb("all", min_available=0)
    everything["spec"]["selector"] = {}
    policy.create_namespaced_pod_disruption_budget("default", everything)
    policy.create_namespaced_pod_disruption_budget("default", make_pdb("none", min_available=0))
    assert fake_api.settle_pdb("all")["status"]["disruptionsAllowed"] == 1
    nothing = fake_api.settle_pdb("none")["status"]
    assert (nothing["expectedPods"], nothing["disruptionsAllowed"]) == (0, 0)
    assert nothing["conditions"][0]["reason"] == "InsufficientPods"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_700_000_000.0)


@pytest.fixture
def timed(clock: FakeClock) -> Iterator[FakeApiServer]:
    with FakeApiServer(clock=clock) as fake:
        yield fake


def test_settle_keeps_recent_disruptions_and_forgets_expired_ones(timed, clock):
    api_client = timed.api_client()
    try:
        policy: Any = PolicyV1Api(api_client)
        core_v1 = CoreV1Api(api_client)
        for name in ("a", "b", "c"):
            _running(timed, core_v1, name)
        policy.create_namespaced_pod_disruption_budget(
            "default", make_pdb("b", match_labels=APP, min_available=1)
        )
        recent = {"a": format_time(clock.now - 60), "b": format_time(clock.now - 121)}
        policy.patch_namespaced_pod_disruption_budget_status(
            "b", "default", {"status": {"disruptedPods": recent}}
        )
        status = timed.settle_pdb("b")["status"]
    finally:
        api_client.close()
    assert status["disruptedPods"] == {"a": recent["a"]}
    assert (status["currentHealthy"], status["disruptionsAllowed"]) == (2, 1)
