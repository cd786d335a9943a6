"""PriorityClasses and the `Priority` admission plugin of a real API server.

- `scheduling.k8s.io/v1` priorityclasses: `preemptionPolicy` defaults to `PreemptLowerPriority`;
  names starting `system-` are reserved for the two built-in classes, a user value above
  1000000000 is forbidden (422); `value` and `preemptionPolicy` are immutable; a second
  `globalDefault` class is 403; the built-in classes cannot be deleted (403).
- Pods, on create: `spec.priority` and `spec.preemptionPolicy` come from `priorityClassName`
  (a missing class is 403), or from the `globalDefault` class (its name is written into the pod),
  or 0 / `PreemptLowerPriority`. A pod that sends a different value itself is 403. On update an
  omitted `priority` or `preemptionPolicy` is carried over from the stored pod.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tests.fakeapi.errors import ApiError, bad_request, invalid
from tests.fakeapi.resources import ResourceType
from tests.fakeapi.store import Obj

GROUP = "scheduling.k8s.io"
PREEMPT_LOWER = "PreemptLowerPriority"
POLICIES = ("Never", PREEMPT_LOWER)
HIGHEST_USER_PRIORITY = 1_000_000_000
SYSTEM_PREFIX = "system-"
SYSTEM_CLASSES: dict[str, tuple[int, str]] = {
    "system-node-critical": (
        2_000_001_000,
        "Used for system critical pods that must not be moved from their current node.",
    ),
    "system-cluster-critical": (
        2_000_000_000,
        "Used for system critical pods that must run in the cluster, but can be moved to another "
        "node if necessary.",
    ),
}


def system_classes() -> list[Obj]:
    """The classes kube-apiserver creates when it starts."""
    return [
        {"metadata": {"name": name}, "value": value, "description": text}
        for name, (value, text) in SYSTEM_CLASSES.items()
    ]


def forbidden(rt: ResourceType, name: str, why: str) -> ApiError:
    """403 as `admission.NewForbidden` / `apierrors.NewForbidden` answer it."""
    details: dict[str, Any] = {"name": name, "kind": rt.plural}
    if rt.group:
        details["group"] = rt.group
    return ApiError(403, f'{rt.qualified} "{name}" is forbidden: {why}', details=details)


def _system_problem(name: str, value: int, default: bool) -> str | None:
    if name not in SYSTEM_CLASSES:
        return f"{name} is not a known system priority class"
    if value != SYSTEM_CLASSES[name][0]:
        return f"value of {name} PriorityClass must be {SYSTEM_CLASSES[name][0]}"
    return f"globalDefault of {name} PriorityClass must be false" if default else None


def _class_problems(pc: Obj) -> list[str]:
    name, value = pc["metadata"]["name"], pc["value"]
    problems = []
    if name.startswith(SYSTEM_PREFIX):
        why = _system_problem(name, value, bool(pc.get("globalDefault")))
        if why is not None:
            problems.append(
                f"metadata.name: Forbidden: priority class names with '{SYSTEM_PREFIX}' prefix "
                f"are reserved for system use only. error: {why}"
            )
    elif value > HIGHEST_USER_PRIORITY:
        problems.append(
            "value: Forbidden: maximum allowed value of a user defined priority is "
            f"{HIGHEST_USER_PRIORITY}"
        )
    if pc["preemptionPolicy"] not in POLICIES:
        problems.append(
            f'preemptionPolicy: Unsupported value: "{pc["preemptionPolicy"]}": supported values: '
            '"Never", "PreemptLowerPriority"'
        )
    return problems


def _defaulted(pc: Obj) -> Obj:
    value = pc.get("value", 0)
    if not isinstance(value, int) or isinstance(value, bool) or not -(2**31) <= value < 2**31:
        raise bad_request(
            f"json: cannot unmarshal {value!r} into Go struct field PriorityClass.value of type "
            "int32"
        )
    pc["value"] = value
    pc.setdefault("preemptionPolicy", PREEMPT_LOWER)
    if not pc.get("globalDefault"):
        pc.pop("globalDefault", None)
    return pc


def _check_default(rt: ResourceType, pc: Obj, classes: Sequence[Obj]) -> None:
    if not pc.get("globalDefault"):
        return
    current = default_class(classes)
    name = pc["metadata"]["name"]
    if current is not None and current["metadata"]["name"] != name:
        other = current["metadata"]["name"]
        raise forbidden(
            rt,
            name,
            f"PriorityClass {other} is already marked as default. Only one default can exist",
        )


def prepare_class_create(rt: ResourceType, pc: Obj, classes: Sequence[Obj]) -> Obj:
    """Defaults, validation (422) and the admission check on `globalDefault` (403)."""
    pc = _defaulted(pc)
    problems = _class_problems(pc)
    if problems:
        raise invalid(rt, pc["metadata"]["name"], problems)
    _check_default(rt, pc, classes)
    return pc


def check_class_update(rt: ResourceType, old: Obj, new: Obj, classes: Sequence[Obj]) -> Obj:
    """`value` and `preemptionPolicy` may not change; a second default is 403."""
    new = _defaulted(new)
    problems = _class_problems(new)
    if new["value"] != old.get("value"):
        problems.append("value: Forbidden: may not be changed in an update.")
    if new["preemptionPolicy"] != old.get("preemptionPolicy"):
        problems.append(
            f'preemptionPolicy: Invalid value: "{new["preemptionPolicy"]}": field is immutable'
        )
    if problems:
        raise invalid(rt, new["metadata"]["name"], problems)
    _check_default(rt, new, classes)
    return new


def check_class_delete(rt: ResourceType, name: str) -> None:
    if name in SYSTEM_CLASSES:
        raise forbidden(rt, name, "this is a system priority class and cannot be deleted")


def default_class(classes: Sequence[Obj]) -> Obj | None:
    """The `globalDefault` class (the lowest value if a race left two), or None."""
    marked = [c for c in classes if c.get("globalDefault")]
    return min(marked, key=lambda c: int(c.get("value", 0))) if marked else None


def _resolve(rt: ResourceType, pod: Obj, classes: Sequence[Obj]) -> tuple[int, str]:
    """(priority, preemption policy) for a new pod; writes the default class name into it."""
    spec = pod["spec"]
    wanted = spec.get("priorityClassName") or ""
    if not wanted:
        found = default_class(classes)
        if found is None:
            return 0, PREEMPT_LOWER
        spec["priorityClassName"] = found["metadata"]["name"]
    else:
        found = next((c for c in classes if c["metadata"]["name"] == wanted), None)
        if found is None:
            name = _admission_name(pod)
            raise forbidden(rt, name, f"no PriorityClass with name {wanted} was found")
    return int(found.get("value", 0)), str(found.get("preemptionPolicy") or PREEMPT_LOWER)


def admit_pod(rt: ResourceType, pod: Obj, classes: Sequence[Obj]) -> None:
    """Fill `spec.priority` and `spec.preemptionPolicy` of a new pod, or raise 403."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return  # validation answers 422 for it
    priority, policy = _resolve(rt, pod, classes)
    name = _admission_name(pod)
    sent = spec.get("priority")
    if sent is not None and sent != priority:
        raise forbidden(
            rt,
            name,
            f"the integer value of priority ({sent}) must not be provided in pod spec; priority "
            f"admission controller computed {priority} from the given PriorityClass name",
        )
    sent_policy = spec.get("preemptionPolicy")
    if sent_policy is not None and sent_policy != policy:
        raise forbidden(
            rt,
            name,
            f"the string value of PreemptionPolicy ({sent_policy}) must not be provided in pod "
            f"spec; priority admission controller computed {policy} from the given PriorityClass "
            "name",
        )
    spec["priority"], spec["preemptionPolicy"] = priority, policy


def carry_over(old: Obj, new: Obj) -> None:
    """On update, what the pod omits of `priority` / `preemptionPolicy` stays as stored."""
    old_spec, new_spec = old.get("spec") or {}, new.get("spec")
    if not isinstance(new_spec, dict):
        return
    for key in ("priority", "preemptionPolicy"):
        if new_spec.get(key) is None and old_spec.get(key) is not None:
            new_spec[key] = old_spec[key]


def _admission_name(pod: Obj) -> str:
    """The name admission errors use: the name, else the generateName prefix (before the suffix
    is generated), else `Unknown`."""
    meta = pod.get("metadata") or {}
    return str(meta.get("name") or meta.get("generateName") or "Unknown")
