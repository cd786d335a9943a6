"""The Eviction API (`POST pods/{name}/eviction`) with and without PodDisruptionBudgets
(kubernetes-api-notes.md, 10-11), through the real client."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client import ApiClient, ApiException, PolicyV1Api

from tests.builders.fakeapi import make_eviction, make_pdb, make_pod, status_body
from tests.fakeapi import FakeApiServer

APP = {"app": "train"}
VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."


@pytest.fixture
def policy(kube_client: ApiClient) -> PolicyV1Api:
    return PolicyV1Api(kube_client)


def _running(fake: FakeApiServer, core_v1: Any, name: str, *, grace: int = 30) -> None:
    pod = make_pod(name, node="n1", labels=APP)
    pod["spec"]["terminationGracePeriodSeconds"] = grace
    core_v1.create_namespaced_pod("default", pod)
    fake.start_pod(name)


def _budget(fake: FakeApiServer, policy: Any, name: str = "b", **status: int) -> None:
    policy.create_namespaced_pod_disruption_budget(
        "default", make_pdb(name, match_labels=APP, min_available=1)
    )
    if status:
        body = {"status": dict(status, observedGeneration=1)}
        policy.patch_namespaced_pod_disruption_budget_status(name, "default", body)


def _evict(core_v1: Any, pod: str, **kw: Any) -> Any:
    return core_v1.create_namespaced_pod_eviction(
        pod, "default", make_eviction(pod, **kw), _preload_content=False
    )


def _disruption_target(fake: FakeApiServer, pod: str) -> list[tuple[str, str]]:
    stored = fake.get_object("pods", pod, "default")
    assert stored is not None
    conditions = stored["status"].get("conditions") or []
    return [(c["reason"], c["message"]) for c in conditions if c["type"] == "DisruptionTarget"]


def test_without_a_budget_the_pod_is_deleted_with_its_own_grace(fake_api, core_v1):
    _running(fake_api, core_v1, "now", grace=0)
    _running(fake_api, core_v1, "later")
    core_v1.create_namespaced_pod_eviction("now", "default", make_eviction("now"))
    answer = _evict(core_v1, "later")
    assert answer.status == 201
    assert answer.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }
    assert fake_api.get_object("pods", "now", "default") is None
    later = fake_api.get_object("pods", "later", "default")
    assert later["metadata"]["deletionGracePeriodSeconds"] == 30
    assert _disruption_target(fake_api, "later") == [
        ("EvictionByEvictionAPI", "Eviction API: evicting")
    ]


def test_eviction_replaces_the_schedulers_condition_and_a_second_one_is_201(fake_api, core_v1):
    _running(fake_api, core_v1, "p")
    condition = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "PreemptionByScheduler",
        "message": "preempted",
        "lastTransitionTime": "2024-01-01T00:00:00Z",
    }
    core_v1.patch_namespaced_pod_status("p", "default", {"status": {"conditions": [condition]}})
    assert _evict(core_v1, "p").status == 201
    assert _evict(core_v1, "p").status == 201
    pod = fake_api.get_object("pods", "p", "default")
    targets = [c for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert [(c["reason"], c["lastTransitionTime"]) for c in targets] == [
        ("EvictionByEvictionAPI", "2024-01-01T00:00:00Z")
    ]
    assert pod["metadata"]["deletionTimestamp"]


def test_the_evictions_delete_options_override_the_pods_grace(fake_api, core_v1):
    _running(fake_api, core_v1, "p")
    assert _evict(core_v1, "p", grace=0).status == 201
    assert fake_api.get_object("pods", "p", "default") is None


def _too_many(err: pytest.ExceptionInfo[ApiException]) -> list[dict[str, Any]]:
    body = status_body(err.value)
    assert (err.value.status, body["reason"], body["message"]) == (
        429,
        "TooManyRequests",
        VIOLATION,
    )
    causes: list[dict[str, Any]] = body["details"]["causes"]
    return causes


def test_a_budget_no_controller_has_processed_answers_429(fake_api, core_v1, policy):
    _running(fake_api, core_v1, "p")
    _budget(fake_api, policy)
    with pytest.raises(ApiException) as err:
        _evict(core_v1, "p")
    assert _too_many(err) == [
        {
            "reason": "DisruptionBudget",
            "message": "The disruption budget b is still being processed by the server.",
        }
    ]
    assert err.value.headers is not None
    assert err.value.headers["Retry-After"] == "10"
    assert _disruption_target(fake_api, "p") == []


@pytest.mark.parametrize("dry_run", [False, True], ids=["evict", "dry run"])
def test_a_budget_allowing_no_disruption_answers_429_naming_it(fake_api, core_v1, policy, dry_run):
    _running(fake_api, core_v1, "p")
    _budget(fake_api, policy, disruptionsAllowed=0, currentHealthy=1, desiredHealthy=1)
    with pytest.raises(ApiException) as err:
        _evict(core_v1, "p", dry_run=dry_run)
    assert _too_many(err) == [
        {
            "reason": "DisruptionBudget",
            "message": "The disruption budget b needs 1 healthy pods and has 1 currently",
        }
    ]
    assert "retryAfterSeconds" not in status_body(err.value)["details"]
    assert fake_api.get_object("pods", "p", "default")["metadata"].get("deletionTimestamp") is None


def test_an_allowed_eviction_spends_the_budget_and_records_the_pod(fake_api, core_v1, policy):
    _running(fake_api, core_v1, "p", grace=0)
    _running(fake_api, core_v1, "q")
    _budget(fake_api, policy, disruptionsAllowed=1, currentHealthy=2, desiredHealthy=1)
    assert _evict(core_v1, "p").status == 201
    assert fake_api.get_object("pods", "p", "default") is None
    status = policy.read_namespaced_pod_disruption_budget_status("b", "default").status
    assert status.disruptions_allowed == 0
    assert list(status.disrupted_pods) == ["p"]
    assert [(c.type, c.status, c.reason) for c in status.conditions] == [
        ("DisruptionAllowed", "False", "InsufficientPods")
    ]
    with pytest.raises(ApiException) as err:
        _evict(core_v1, "q")
    assert err.value.status == 429


def test_a_dry_run_eviction_changes_nothing(fake_api, core_v1, policy):
    _running(fake_api, core_v1, "p", grace=0)
    _budget(fake_api, policy, disruptionsAllowed=1, currentHealthy=2, desiredHealthy=1)
    before = fake_api.get_object("poddisruptionbudgets", "b", "default")
    by_query = core_v1.create_namespaced_pod_eviction(
        "p", "default", make_eviction("p"), dry_run="All", _preload_content=False
    )
    assert (by_query.status, _evict(core_v1, "p", dry_run=True).status) == (201, 201)
    assert fake_api.get_object("poddisruptionbudgets", "b", "default") == before
    assert _disruption_target(fake_api, "p") == []


def test_pending_pods_are_not_protected_by_budgets(fake_api, core_v1, policy):
    core_v1.create_namespaced_pod("default", make_pod("waiting", labels=APP))
    _budget(fake_api, policy, disruptionsAllowed=0)
    assert _evict(core_v1, "waiting").status == 201
    assert fake_api.get_object("pods", "waiting", "default") is None


def test_an_unready_pod_goes_without_spending_a_whole_budget(fake_api, core_v1, policy):
    pod = make_pod("sick", node="n1", labels=APP)
    pod["spec"]["terminationGracePeriodSeconds"] = 0
    core_v1.create_namespaced_pod("default", pod)
    fake_api.start_pod("sick", ready=False)
    _budget(fake_api, policy, disruptionsAllowed=0, currentHealthy=2, desiredHealthy=2)
    assert _evict(core_v1, "sick").status == 201
    assert fake_api.get_object("pods", "sick", "default") is None
    stored = fake_api.get_object("poddisruptionbudgets", "b", "default")
    assert "disruptedPods" not in stored["status"]


def test_two_covering_budgets_answer_500(fake_api, core_v1, policy):
    _running(fake_api, core_v1, "p")
    _budget(fake_api, policy, "one", disruptionsAllowed=1)
    _budget(fake_api, policy, "two", disruptionsAllowed=1)
    with pytest.raises(ApiException) as err:
        _evict(core_v1, "p")
    assert err.value.status == 500
    assert status_body(err.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "This pod has more than one PodDisruptionBudget, which the eviction "
        "subresource does not support.",
        "code": 500,
    }


def test_a_name_mismatch_is_400_and_a_missing_pod_404(fake_api, core_v1):
    _running(fake_api, core_v1, "p")
    with pytest.raises(ApiException) as err:
        core_v1.create_namespaced_pod_eviction("p", "default", make_eviction("q"))
    assert (err.value.status, status_body(err.value)["message"]) == (
        400,
        "name in URL does not match name in Eviction object",
    )
    with pytest.raises(ApiException) as err:
        _evict(core_v1, "gone")
    assert (err.value.status, status_body(err.value)["message"]) == (404, 'pods "gone" not found')


def test_discovery_lists_pods_eviction(core_v1):
    resources = {r.name: r for r in core_v1.get_api_resources().resources}
    eviction = resources["pods/eviction"]
    assert (eviction.group, eviction.version, eviction.kind, eviction.verbs) == (
        "policy",
        "v1",
        "Eviction",
        ["create"],
    )
