"""A pod's inter-pod rules and preferences, read from its JSON: required pod affinity and
anti-affinity terms and `DoNotSchedule` topology spread constraints (`InterPodRules`), preferred
terms and `ScheduleAnyway` constraints (`InterPodPreferences`), as kube-scheduler reads them.

- A term's namespaces are its `namespaces`, or the pod's own when it has neither those nor a
  `namespaceSelector`; an empty `namespaceSelector` (`{}`) means every namespace; a non-empty one
  adds the namespaces whose labels it matches, read when the term is (`PodTerm.in_namespaces`,
  on the snapshot's `namespace_labels`, which the cache keeps from a watch of namespaces).
- `matchLabelKeys` (and a term's `mismatchLabelKeys`) add `key in (value)` (`key notin (value)`)
  for each key the pod has a label for, as the API server merges them since 1.34; a selector that
  already holds the same requirement is unchanged by it.
- Preferred terms (with their weights) and `ScheduleAnyway` constraints are the pod's
  `InterPodPreferences`, which placement weighs beside its own scores.

Malformed input raises ValueError naming the field (`spec.topologySpreadConstraints[0].maxSkew:
...`), which `pod_request` turns into the pod's error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.placement.request import (
    InterPodPreferences,
    InterPodRules,
    LabelSelector,
    NodeSelectorRequirement,
    Operator,
    PodTerm,
    SpreadConstraint,
)

__all__ = ["PodRules", "inter_pod_rules", "label_selector"]

Obj = Mapping[str, Any]

_SELECTOR_OPERATORS = {
    "In": Operator.IN,
    "NotIn": Operator.NOT_IN,
    "Exists": Operator.EXISTS,
    "DoesNotExist": Operator.DOES_NOT_EXIST,
}
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
_POLICIES = ("Honor", "Ignore")


@dataclass(frozen=True, slots=True)
class PodRules:
    """A pod's inter-pod rules and preferences (None: none)."""

    rules: InterPodRules | None = None
    preferences: InterPodPreferences | None = None


def inter_pod_rules(pod: Obj) -> PodRules:
    """The pod's rules and preferences. ValueError names a malformed field."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    namespace = str(meta.get("namespace") or "default")
    labels = _string_map(meta.get("labels"), "metadata.labels")
    affinity = _mapping(spec.get("affinity"), "spec.affinity")
    near = _terms(affinity.get("podAffinity"), "spec.affinity.podAffinity", namespace, labels)
    away = _terms(
        affinity.get("podAntiAffinity"), "spec.affinity.podAntiAffinity", namespace, labels
    )
    spread, soft = _spread(spec.get("topologySpreadConstraints"), labels)
    rules = InterPodRules(affinity=near[0], anti_affinity=away[0], spread=spread)
    preferences = InterPodPreferences(affinity=near[1], anti_affinity=away[1], spread=soft)
    return PodRules(
        rules=rules if rules != InterPodRules() else None,
        preferences=preferences if preferences != InterPodPreferences() else None,
    )


def label_selector(raw: object, where: str) -> LabelSelector | None:
    """A `metav1.LabelSelector` (None when absent: it selects nothing)."""
    if raw is None:
        return None
    selector = _mapping(raw, where)
    requirements = [
        NodeSelectorRequirement(key=key, operator=Operator.IN, values=(value,))
        for key, value in _string_map(selector.get("matchLabels"), f"{where}.matchLabels").items()
    ]
    for i, expr in enumerate(_list(selector.get("matchExpressions"), f"{where}.matchExpressions")):
        at = f"{where}.matchExpressions[{i}]"
        expr = _mapping(expr, at)
        operator = _SELECTOR_OPERATORS.get(str(expr.get("operator")))
        if operator is None:
            raise ValueError(
                f"{at}.operator: {expr.get('operator')!r} is not one of In, NotIn, Exists, "
                "DoesNotExist"
            )
        key = expr.get("key")
        if not isinstance(key, str) or not key:
            raise ValueError(f"{at}.key: must be a non-empty string")
        values = tuple(str(v) for v in _list(expr.get("values"), f"{at}.values"))
        if operator in (Operator.IN, Operator.NOT_IN) and not values:
            raise ValueError(f"{at}.values: must be non-empty for {operator}")
        if operator in (Operator.EXISTS, Operator.DOES_NOT_EXIST) and values:
            raise ValueError(f"{at}.values: must be empty for {operator}")
        requirements.append(NodeSelectorRequirement(key=key, operator=operator, values=values))
    return LabelSelector(requirements=tuple(requirements))


def _terms(
    raw: object, where: str, namespace: str, labels: Mapping[str, str]
) -> tuple[tuple[PodTerm, ...], tuple[tuple[int, PodTerm], ...]]:
    """(the required terms, the preferred ones with their weights) of one block."""
    block = _mapping(raw, where)
    preferred: list[tuple[int, PodTerm]] = []
    for i, weighted in enumerate(_list(block.get(_PREFERRED), f"{where}.{_PREFERRED}")):
        at = f"{where}.{_PREFERRED}[{i}]"
        weight = _mapping(weighted, at).get("weight")
        if not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= 100:
            raise ValueError(f"{at}.weight: must be an integer from 1 to 100")
        term = _mapping(weighted, at).get("podAffinityTerm")
        preferred.append((weight, _term(term, f"{at}.podAffinityTerm", namespace, labels)))
    required = tuple(
        _term(term, f"{where}.{_REQUIRED}[{i}]", namespace, labels)
        for i, term in enumerate(_list(block.get(_REQUIRED), f"{where}.{_REQUIRED}"))
    )
    return required, tuple(preferred)


def _term(raw: object, where: str, namespace: str, labels: Mapping[str, str]) -> PodTerm:
    term = _mapping(raw, where)
    key = term.get("topologyKey")
    if not isinstance(key, str) or not key:
        raise ValueError(f"{where}.topologyKey: must be a non-empty string")
    selector = label_selector(term.get("labelSelector"), f"{where}.labelSelector")
    selector = _with_label_keys(selector, term, where, labels, mismatch=False)
    selector = _with_label_keys(selector, term, where, labels, mismatch=True)
    names = frozenset(str(n) for n in _list(term.get("namespaces"), f"{where}.namespaces"))
    namespace_selector = term.get("namespaceSelector")
    if namespace_selector is not None:
        chosen = label_selector(namespace_selector, f"{where}.namespaceSelector")
        if chosen is not None and chosen.requirements:  # those listed and those it picks
            return PodTerm(
                selector=selector, namespaces=names, topology_key=key, namespace_selector=chosen
            )
        return PodTerm(selector=selector, namespaces=None, topology_key=key)
    return PodTerm(selector=selector, namespaces=names or frozenset((namespace,)), topology_key=key)


def _with_label_keys(
    selector: LabelSelector | None,
    raw: Obj,
    where: str,
    labels: Mapping[str, str],
    *,
    mismatch: bool,
) -> LabelSelector | None:
    field = "mismatchLabelKeys" if mismatch else "matchLabelKeys"
    keys = [str(k) for k in _list(raw.get(field), f"{where}.{field}")]
    if not keys:
        return selector
    if selector is None:
        raise ValueError(f"{where}.{field}: needs a labelSelector")
    operator = Operator.NOT_IN if mismatch else Operator.IN
    added = [
        NodeSelectorRequirement(key=key, operator=operator, values=(labels[key],))
        for key in keys
        if key in labels
    ]
    fresh = tuple(r for r in added if r not in selector.requirements)
    return LabelSelector(requirements=selector.requirements + fresh) if fresh else selector


def _spread(
    raw: object, labels: Mapping[str, str]
) -> tuple[tuple[SpreadConstraint, ...], tuple[SpreadConstraint, ...]]:
    """(the `DoNotSchedule` constraints, the `ScheduleAnyway` ones)."""
    out: list[SpreadConstraint] = []
    soft: list[SpreadConstraint] = []
    for i, item in enumerate(_list(raw, "spec.topologySpreadConstraints")):
        where = f"spec.topologySpreadConstraints[{i}]"
        constraint = _mapping(item, where)
        skew = constraint.get("maxSkew")
        if not isinstance(skew, int) or isinstance(skew, bool) or skew < 1:
            raise ValueError(f"{where}.maxSkew: must be an integer >= 1")
        key = constraint.get("topologyKey")
        if not isinstance(key, str) or not key:
            raise ValueError(f"{where}.topologyKey: must be a non-empty string")
        when = constraint.get("whenUnsatisfiable")
        if when not in ("DoNotSchedule", "ScheduleAnyway"):
            raise ValueError(f"{where}.whenUnsatisfiable: must be DoNotSchedule or ScheduleAnyway")
        domains = constraint.get("minDomains")
        if domains is not None and (
            not isinstance(domains, int) or isinstance(domains, bool) or domains < 1
        ):
            raise ValueError(f"{where}.minDomains: must be an integer >= 1")
        if domains is not None and when != "DoNotSchedule":
            raise ValueError(f"{where}.minDomains: only with whenUnsatisfiable DoNotSchedule")
        affinity_policy = _policy(constraint, "nodeAffinityPolicy", "Honor", where)
        taints_policy = _policy(constraint, "nodeTaintsPolicy", "Ignore", where)
        selector = label_selector(constraint.get("labelSelector"), f"{where}.labelSelector")
        selector = _with_label_keys(selector, constraint, where, labels, mismatch=False)
        (out if when == "DoNotSchedule" else soft).append(
            SpreadConstraint(
                max_skew=skew,
                topology_key=key,
                selector=selector,
                min_domains=domains or 1,
                honor_affinity=affinity_policy == "Honor",
                honor_taints=taints_policy == "Honor",
            )
        )
    return tuple(out), tuple(soft)


def _policy(constraint: Obj, field: str, default: str, where: str) -> str:
    value = constraint.get(field)
    if value is None:
        return default
    if value not in _POLICIES:
        raise ValueError(f"{where}.{field}: must be Honor or Ignore")
    return str(value)


def _mapping(raw: object, where: str) -> Obj:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: must be an object")
    return raw


def _list(raw: object, where: str) -> Sequence[Any]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ValueError(f"{where}: must be a list")
    return raw


def _string_map(raw: object, where: str) -> dict[str, str]:
    return {str(k): str(v) for k, v in _mapping(raw, where).items()}
