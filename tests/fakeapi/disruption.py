"""PodDisruptionBudgets (`policy/v1`) and what the disruption controller writes into them.

A real API server validates a budget and stores its status as written; it never computes the
status itself. kube-controller-manager's disruption controller does, and the Eviction API reads it
(see `eviction.py`). Here that controller runs only when a test asks (`settled`, through
`FakeApiServer.settle_pdb`), so a test can also write any status it likes through `/status`.

- Spec: `minAvailable` or `maxUnavailable` (an integer >= 0 or a percentage up to 100%; both
  set is 422), `selector` (a LabelSelector: a missing one selects no pod, `{}` every pod of the
  namespace), `unhealthyPodEvictionPolicy` (`IfHealthyBudget` or `AlwaysAllow`).
- Status: always shows the four counters (0 when unset, as the Go struct serializes them); a
  negative counter is 422 on a status write.
- The controller: healthy = pods with a `Ready=True` condition, not terminating and not listed
  in `disruptedPods` (entries expire after two minutes); expected = the selected pods (a real
  controller asks the pods' owning controllers for their scale when the budget is a percentage
  or `maxUnavailable`: here every selected pod counts, with or without an owner); percentages
  round up; `disruptionsAllowed = max(0, healthy - desired)`, 0 while no pod is expected.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tests.fakeapi.errors import bad_request, invalid
from tests.fakeapi.objects import parse_time, upsert_condition
from tests.fakeapi.resources import ResourceType
from tests.fakeapi.selectors import selector_matches
from tests.fakeapi.store import Obj, clone

GROUP = "policy"
PLURAL = "poddisruptionbudgets"
COUNTERS = ("disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods")
ALLOWED_CONDITION = "DisruptionAllowed"
DELETION_TIMEOUT_S = 120.0  # how long an eviction's entry in `disruptedPods` counts
EVICTION_POLICIES = ("AlwaysAllow", "IfHealthyBudget")
_PERCENT = re.compile(r"^[0-9]+%$")
_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def _go_int_or_string(value: int | str) -> str:
    """How a Go `field.Invalid` prints an `intstr.IntOrString` value (`%#v`)."""
    if isinstance(value, str):
        return f'intstr.IntOrString{{Type:1, IntVal:0, StrVal:"{value}"}}'
    return f'intstr.IntOrString{{Type:0, IntVal:{value}, StrVal:""}}'


def _amount_problems(field: str, value: Any) -> list[str]:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise bad_request(
            f"json: cannot unmarshal {value!r} into Go struct field "
            f"PodDisruptionBudgetSpec.{field.split('.')[-1]} of type intstr.IntOrString"
        )
    shown = _go_int_or_string(value)
    if isinstance(value, int):
        if value < 0:
            return [f"{field}: Invalid value: {value}: must be greater than or equal to 0"]
        return []
    if not _PERCENT.match(value):
        return [
            f"{field}: Invalid value: {shown}: a valid percent string must be a numeric string "
            "followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is "
            "'[0-9]+%')"
        ]
    if int(value[:-1]) > 100:
        return [f"{field}: Invalid value: {shown}: must not be greater than 100%"]
    return []


def _selector_problems(selector: Any) -> list[str]:
    if selector is None:
        return []
    problems = []
    for n, expr in enumerate(selector.get("matchExpressions") or []):
        where = f"spec.selector.matchExpressions[{n}]"
        op, values = expr.get("operator"), expr.get("values") or []
        if op in ("In", "NotIn") and not values:
            problems.append(
                f"{where}.values: Required value: must be specified when `operator` is 'In' or "
                "'NotIn'"
            )
        elif op in ("Exists", "DoesNotExist") and values:
            problems.append(
                f"{where}.values: Forbidden: may not be specified when `operator` is 'Exists' or "
                "'DoesNotExist'"
            )
        elif op not in _OPERATORS:
            problems.append(
                f'{where}.operator: Invalid value: "{op}": not a valid selector operator'
            )
    return problems


def spec_problems(pdb: Obj) -> list[str]:
    """What `ValidatePodDisruptionBudgetSpec` rejects (the Go struct dump is abbreviated)."""
    spec = pdb.get("spec") or {}
    problems = []
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        problems.append(
            "spec: Invalid value: policy.PodDisruptionBudgetSpec{...}: minAvailable and "
            "maxUnavailable cannot be both set"
        )
    for key in ("minAvailable", "maxUnavailable"):
        if spec.get(key) is not None:
            problems += _amount_problems(f"spec.{key}", spec[key])
    problems += _selector_problems(spec.get("selector"))
    policy = spec.get("unhealthyPodEvictionPolicy")
    if policy is not None and policy not in EVICTION_POLICIES:
        problems.append(
            f'spec.unhealthyPodEvictionPolicy: Unsupported value: "{policy}": supported values: '
            '"AlwaysAllow", "IfHealthyBudget"'
        )
    return problems


def shown_status(status: Mapping[str, Any] | None) -> Obj:
    """The status as a real server stores it: the four counters always, empty parts omitted."""
    shown = {k: v for k, v in (status or {}).items() if v not in (None, {}, [])}
    if not shown.get("observedGeneration"):
        shown.pop("observedGeneration", None)
    for key in COUNTERS:
        shown.setdefault(key, 0)
    return shown


def prepare_create(rt: ResourceType, pdb: Obj) -> Obj:
    problems = spec_problems(pdb)
    if problems:
        raise invalid(rt, pdb["metadata"].get("name", ""), problems)
    pdb["status"] = shown_status(None)
    return pdb


def check_update(rt: ResourceType, new: Obj, sub: str) -> Obj:
    """422 for an invalid spec (main resource) or a negative counter (status)."""
    if sub == "status":
        new["status"] = shown_status(new.get("status"))
        problems = [
            f"status.{key}: Invalid value: {new['status'][key]}: must be greater than or equal to 0"
            for key in COUNTERS
            if isinstance(new["status"][key], int) and new["status"][key] < 0
        ]
    else:
        problems = spec_problems(new)
    if problems:
        raise invalid(rt, new["metadata"]["name"], problems)
    return new


def selects(pdb: Obj, pod: Obj) -> bool:
    """Whether the budget covers the pod (same namespace; a missing selector covers nothing)."""
    if pdb["metadata"].get("namespace") != pod["metadata"].get("namespace"):
        return False
    selector = (pdb.get("spec") or {}).get("selector")
    if not isinstance(selector, dict):
        return False
    return selector_matches(selector, pod["metadata"].get("labels") or {})


def pod_ready(pod: Obj) -> bool:
    """`IsPodReady`: the pod's `Ready` condition is True."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def set_allowed_condition(status: Obj, now: str) -> None:
    """`UpdateDisruptionAllowedCondition`: `DisruptionAllowed` True (SufficientPods) while
    disruptions are allowed, else False (InsufficientPods); the transition time moves only when
    the condition's status changes."""
    allowed = status.get("disruptionsAllowed", 0) > 0
    wanted: Obj = {
        "type": ALLOWED_CONDITION,
        "status": "True" if allowed else "False",
        "reason": "SufficientPods" if allowed else "InsufficientPods",
        "message": "",
        "lastTransitionTime": now,
    }
    if status.get("observedGeneration"):
        wanted["observedGeneration"] = status["observedGeneration"]
    status["conditions"] = upsert_condition(list(status.get("conditions") or []), wanted)


def _scaled(value: int | str, total: int) -> int:
    if isinstance(value, int):
        return value
    return math.ceil(int(value[:-1]) * total / 100)


def _expectation(spec: Mapping[str, Any], selected: int) -> tuple[int, int]:
    """(expected pods, desired healthy) as `getExpectedPodCount` computes them."""
    if spec.get("maxUnavailable") is not None:
        return selected, max(0, selected - _scaled(spec["maxUnavailable"], selected))
    if spec.get("minAvailable") is not None:
        return selected, _scaled(spec["minAvailable"], selected)
    return 0, 0


def _still_disrupted(recorded: Mapping[str, str], pods: Sequence[Obj], now_s: float) -> Obj:
    """`buildDisruptedPodMap`: entries of pods still there, not terminating, and not expired."""
    kept: Obj = {}
    for pod in pods:
        name = pod["metadata"]["name"]
        if pod["metadata"].get("deletionTimestamp") or name not in recorded:
            continue
        if parse_time(recorded[name]) + DELETION_TIMEOUT_S >= now_s:
            kept[name] = recorded[name]
    return kept


def settled(pdb: Obj, pods: Sequence[Obj], now_s: float, fmt: Callable[[float], str]) -> Obj:
    """The budget after one pass of the disruption controller over the namespace's `pods`."""
    spec, status = pdb.get("spec") or {}, pdb.get("status") or {}
    selected = [p for p in pods if selects(pdb, p)]
    expected, desired = _expectation(spec, len(selected))
    disrupted = _still_disrupted(status.get("disruptedPods") or {}, selected, now_s)
    healthy = sum(
        1
        for p in selected
        if not p["metadata"].get("deletionTimestamp")
        and p["metadata"]["name"] not in disrupted
        and pod_ready(p)
    )
    allowed = healthy - desired if expected > 0 and healthy > desired else 0
    new = clone(pdb)
    new["status"] = shown_status(
        {
            "observedGeneration": pdb["metadata"].get("generation", 1),
            "disruptedPods": disrupted,
            "disruptionsAllowed": allowed,
            "currentHealthy": healthy,
            "desiredHealthy": desired,
            "expectedPods": expected,
            "conditions": status.get("conditions"),
        }
    )
    set_allowed_condition(new["status"], fmt(now_s))
    return new
