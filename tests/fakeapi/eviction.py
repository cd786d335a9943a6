"""`POST pods/{name}/eviction` as kube-apiserver v1.28 answers it (kubernetes-api-notes.md, 10-11).

- The Eviction's name must be the pod's (400); a missing pod is 404.
- A pod that is Pending, Succeeded, Failed or already terminating is not protected by budgets:
  it gets the `DisruptionTarget` condition (reason `EvictionByEvictionAPI`) and is deleted with
  the Eviction's `deleteOptions` (its own grace period by default). `201` with a Status.
- Otherwise the budgets whose selector covers the pod decide: none, deleted as above; more than
  one, `500` (a Status without a reason); one whose status is older than its generation, `429`
  ("still being processed", Retry-After 10); one with `disruptionsAllowed: 0`, `429` naming it
  with its healthy counts; else the server decrements `disruptionsAllowed`, records the pod in
  `status.disruptedPods` and deletes it. A pod that is not Ready is deleted without touching the
  budget when its budget is whole (`currentHealthy >= desiredHealthy > 0`) or its
  `unhealthyPodEvictionPolicy` is `AlwaysAllow`.
- `dryRun=All` (query or `deleteOptions.dryRun`) answers the same and changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tests.fakeapi import deletion, disruption
from tests.fakeapi.errors import ApiError, bad_request, not_found
from tests.fakeapi.objects import Ref, success_status, upsert_condition
from tests.fakeapi.store import Obj, clone

if TYPE_CHECKING:
    from tests.fakeapi.api import Api

REASON = "EvictionByEvictionAPI"
MESSAGE = "Eviction API: evicting"
VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."
SEVERAL_BUDGETS = (
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not "
    "support."
)
BUDGET_CAUSE = "DisruptionBudget"
PROCESSING_RETRY_S = 10


def evict(api: Api, ref: Ref, body: Any, query: Mapping[str, str]) -> tuple[int, Obj]:
    options, dry_run = _options(ref, body, query)
    pod = api.store.get(ref.rt, ref.namespace, ref.name)
    if pod is None:
        raise not_found(ref.rt, ref.name)
    if not _ignores_budgets(pod):
        _check_budgets(api, pod, dry_run)
    if not dry_run:
        _mark_and_delete(api, Ref(ref.rt, ref.version, ref.namespace, ref.name), options)
    return 201, success_status(201)


def _options(ref: Ref, body: Any, query: Mapping[str, str]) -> tuple[Obj, bool]:
    """The Eviction's delete options and whether this is a dry run."""
    if not isinstance(body, dict) or not isinstance(body.get("metadata") or {}, dict):
        raise bad_request("the request body must be an Eviction object")
    if body.get("kind") not in (None, "", "Eviction"):
        raise bad_request(f"not a Eviction object: {body['kind']}")
    meta = body.get("metadata") or {}
    if meta.get("namespace") not in (None, "", ref.namespace):
        raise bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    if meta.get("name") != ref.name:
        raise bad_request("name in URL does not match name in Eviction object")
    options = clone(body.get("deleteOptions") or {})
    in_query = [query["dryRun"]] if query.get("dryRun") else []
    in_body = list(options.get("dryRun") or [])
    if in_query and in_body and in_query != in_body:
        raise NotImplementedError("fake API server: non-matching dry-run options are not modelled")
    dry = in_query or in_body
    if any(v != "All" for v in dry):
        raise NotImplementedError(f"fake API server: dryRun values {dry} are not modelled")
    return options, bool(dry)


def _ignores_budgets(pod: Obj) -> bool:
    """`canIgnorePDB`: a Pending, finished or terminating pod is evicted without budgets."""
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Pending", "Succeeded", "Failed") or bool(
        pod["metadata"].get("deletionTimestamp")
    )


def _check_budgets(api: Api, pod: Obj, dry_run: bool) -> None:
    """Raise what the covering budget answers, or decrement it (nothing written on a dry run)."""
    rt = api.registry.resolve(f"{disruption.PLURAL}.{disruption.GROUP}")
    ns = pod["metadata"]["namespace"]
    budgets, _ = api.store.snapshot(rt, ns)
    covering = [b for b in budgets if disruption.selects(b, pod)]
    if len(covering) > 1:
        raise ApiError(500, SEVERAL_BUDGETS, reason="")
    if not covering:
        return
    budget = covering[0]
    spec, status = budget.get("spec") or {}, budget.get("status") or {}
    if not disruption.pod_ready(pod):
        if spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
            return
        desired = status.get("desiredHealthy", 0)
        if status.get("currentHealthy", 0) >= desired > 0:
            return
    now, name = api.now(), pod["metadata"]["name"]

    def change(old: Obj | None) -> Obj | None:
        if old is None:
            return None
        decremented = _decremented(old, name, now)
        return old if dry_run else decremented

    api.store.mutate(rt, ns, budget["metadata"]["name"], change)


def _decremented(budget: Obj, pod_name: str, now: str) -> Obj:
    """`checkAndDecrement`: the budget with one disruption spent, or the error that refuses it."""
    name, status = budget["metadata"]["name"], budget.get("status") or {}
    if int(status.get("observedGeneration") or 0) < int(budget["metadata"].get("generation", 1)):
        raise _too_many(
            f"The disruption budget {name} is still being processed by the server.",
            PROCESSING_RETRY_S,
        )
    allowed = int(status.get("disruptionsAllowed", 0))
    if allowed < 0:
        raise ApiError(
            403,
            f'poddisruptionbudget.policy "{name}" is forbidden: pdb disruptions allowed is '
            "negative",
            details={"name": name, "group": disruption.GROUP, "kind": "poddisruptionbudget"},
        )
    if allowed == 0:
        raise _too_many(
            f"The disruption budget {name} needs {status.get('desiredHealthy', 0)} healthy pods "
            f"and has {status.get('currentHealthy', 0)} currently",
            0,
        )
    new = clone(budget)
    new_status = new.setdefault("status", {})
    new_status["disruptionsAllowed"] = allowed - 1
    if allowed == 1:
        disruption.set_allowed_condition(new_status, now)
    new_status["disruptedPods"] = dict(new_status.get("disruptedPods") or {}, **{pod_name: now})
    return new


def _too_many(cause: str, retry_after: int) -> ApiError:
    details: Obj = {"causes": [{"reason": BUDGET_CAUSE, "message": cause}]}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
    return ApiError(429, VIOLATION, details=details)


def _mark_and_delete(api: Api, ref: Ref, options: Obj) -> None:
    """`addConditionAndDeletePod`: write `DisruptionTarget` on the pod's status, then delete it."""
    condition: Obj = {
        "type": "DisruptionTarget",
        "status": "True",
        "lastProbeTime": None,
        "lastTransitionTime": api.now(),
        "reason": REASON,
        "message": MESSAGE,
    }

    def mark(old: Obj | None) -> Obj:
        if old is None:
            raise not_found(ref.rt, ref.name)
        deletion.check_preconditions(old, options.get("preconditions") or {})
        pod = clone(old)
        status = pod.setdefault("status", {})
        status["conditions"] = upsert_condition(list(status.get("conditions") or []), condition)
        return pod

    api.store.mutate(ref.rt, ref.namespace, ref.name, mark)
    preconditions = dict(options.get("preconditions") or {})
    preconditions.pop("resourceVersion", None)  # checked above, before the condition moved it
    deletion.delete(api, ref, dict(options, preconditions=preconditions), {})
