"""resource.k8s.io/v1 objects, as the API server sends them (camelCase JSON dicts), into the model.

`parse_claim`, `parse_claim_template`, `parse_device_class`, `parse_slice`, `parse_taint_rule`;
each raises `SpecError` naming the object and the field when the input is malformed. Defaults
are the API's: `allocationMode` ExactCount, `count` 1, toleration operator Equal, taint effect
NoSchedule.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.placement import Effect, Toleration
from scheduler.placement.request import NodeSelectorTerm, Operator

from .model import (
    AllocatedDevice,
    Allocation,
    AllocationMode,
    Alternative,
    ClaimKey,
    ClaimSpec,
    ConfigEntry,
    Constraint,
    DeviceClass,
    DeviceId,
    DeviceRequest,
    ResourceClaim,
)
from .slices import parse_slice, qualified
from .taintrules import parse_taint_rule
from .wire import Fields, fields_of

__all__ = [
    "ClaimTemplate",
    "parse_claim",
    "parse_claim_template",
    "parse_device_class",
    "parse_slice",
    "parse_taint_rule",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimTemplate:
    """A ResourceClaimTemplate: the spec every claim made from it gets."""

    key: ClaimKey
    spec: ClaimSpec


def parse_device_class(obj: object) -> DeviceClass:
    top = fields_of("DeviceClass", obj)
    spec = top.sub("spec")
    return DeviceClass(
        name=top.sub("metadata").text("name"),
        selectors=_selectors(spec),
        config=tuple(_config(c) for c in spec.items("config")),
        extended_resource_name=spec.opt_str("extendedResourceName"),
        created=top.sub("metadata").text("creationTimestamp", ""),
    )


def parse_claim(obj: object) -> ResourceClaim:
    top = fields_of("ResourceClaim", obj)
    meta = top.sub("metadata")
    status = top.sub("status")
    allocation = status.sub("allocation") if status.has("allocation") else None
    return ResourceClaim(
        key=ClaimKey(meta.text("namespace", "default"), meta.text("name")),
        uid=meta.text("uid", ""),
        spec=_claim_spec(top.sub("spec")),
        allocation=None if allocation is None else _allocation(allocation),
        reserved_for=tuple(r.text("uid", "") for r in status.items("reservedFor")),
    )


def parse_claim_template(obj: object) -> ClaimTemplate:
    top = fields_of("ResourceClaimTemplate", obj)
    meta = top.sub("metadata")
    return ClaimTemplate(
        key=ClaimKey(meta.text("namespace", "default"), meta.text("name")),
        spec=_claim_spec(top.sub("spec").sub("spec")),
    )


def _claim_spec(spec: Fields) -> ClaimSpec:
    devices = spec.sub("devices")
    requests = tuple(_request(r) for r in devices.items("requests"))
    names = [r.name for r in requests]
    if len(set(names)) != len(names):
        raise devices.error("requests", f"duplicate request names in {names}")
    constraints = tuple(_constraint(c, names) for c in devices.items("constraints"))
    return ClaimSpec(
        requests=requests,
        constraints=constraints,
        config=tuple(_config(c) for c in devices.items("config")),
    )


def _request(req: Fields) -> DeviceRequest:
    name = req.text("name")
    if req.has("exactly") == req.has("firstAvailable"):
        raise req.error("exactly", "set exactly one of exactly and firstAvailable")
    if req.has("exactly"):
        return DeviceRequest(name=name, alternatives=(_alternative(req.sub("exactly"), name),))
    subs = tuple(_alternative(s, f"{name}/{s.text('name')}") for s in req.items("firstAvailable"))
    if not subs:
        raise req.error("firstAvailable", "empty")
    return DeviceRequest(name=name, alternatives=subs, first_available=True)


def _alternative(alt: Fields, name: str) -> Alternative:
    mode_text = alt.text("allocationMode", AllocationMode.EXACT_COUNT.value)
    try:
        mode = AllocationMode(mode_text)
    except ValueError:
        raise alt.error("allocationMode", f"want ExactCount or All, got {mode_text!r}") from None
    count = alt.integer("count", 1)
    if mode is AllocationMode.EXACT_COUNT and count < 1:
        raise alt.error("count", f"want at least 1, got {count}")
    wanted = alt.sub("capacity").sub("requests")
    return Alternative(
        name=name,
        device_class=alt.text("deviceClassName"),
        selectors=_selectors(alt),
        mode=mode,
        count=count,
        admin_access=alt.flag("adminAccess"),
        tolerations=tuple(t for t in map(_toleration, alt.items("tolerations")) if t),
        capacity={key: wanted.quantity(key) for key in wanted.data},
    )


def _selectors(owner: Fields) -> tuple[str, ...]:
    return tuple(s.sub("cel", required=True).text("expression") for s in owner.items("selectors"))


def _toleration(tol: Fields) -> Toleration | None:
    """None for effect `None`: such a toleration matches only taints that block nothing."""
    operator = tol.text("operator", "Equal")
    if operator not in {"Equal", "Exists"}:
        raise tol.error("operator", f"want Equal or Exists, got {operator!r}")
    effect = tol.opt_str("effect")
    if effect == "None":
        return None
    try:
        parsed = None if effect is None else Effect(effect)
    except ValueError:
        raise tol.error("effect", f"unknown effect {effect!r}") from None
    return Toleration(
        key=tol.text("key", ""), operator=operator, value=tol.text("value", ""), effect=parsed
    )


def _constraint(con: Fields, names: list[str]) -> Constraint:
    requests = con.strs("requests")
    unknown = [r for r in requests if r.split("/", 1)[0] not in names]
    if unknown:
        raise con.error("requests", f"unknown requests {unknown}")
    match, distinct = con.opt_str("matchAttribute"), con.opt_str("distinctAttribute")
    if (match is None) == (distinct is None):
        raise con.error("matchAttribute", "set exactly one of matchAttribute and distinctAttribute")
    return Constraint(requests=requests, match_attribute=match, distinct_attribute=distinct)


def _config(entry: Fields) -> ConfigEntry:
    opaque = entry.sub("opaque", required=True)
    params = opaque.data.get("parameters")
    return ConfigEntry(
        driver=opaque.text("driver"),
        parameters=dict(params) if isinstance(params, dict) else {},
        requests=entry.strs("requests"),
    )


def _allocation(alloc: Fields) -> Allocation:
    devices = alloc.sub("devices")
    results = []
    for res in devices.items("results"):
        consumed = res.sub("consumedCapacity")
        driver = res.text("driver")
        results.append(
            AllocatedDevice(
                request=res.text("request"),
                id=DeviceId(driver, res.text("pool"), res.text("device")),
                admin_access=res.flag("adminAccess"),
                share_id=res.opt_str("shareID"),
                consumed={qualified(k, driver): consumed.quantity(k) for k in consumed.data},
                binding_conditions=res.strs("bindingConditions"),
                binding_failure_conditions=res.strs("bindingFailureConditions"),
            )
        )
    node, selector = _reach(alloc)
    return Allocation(devices=tuple(results), node=node, node_selector=selector)


def _reach(alloc: Fields) -> tuple[str | None, tuple[NodeSelectorTerm, ...] | None]:
    """(the node, None) for a selector that names one node (one term: `metadata.name In
    [node]`, what allocators write for a node's own devices); (None, its terms) for any other;
    (None, None) for none."""
    if not alloc.has("nodeSelector"):
        return None, None
    terms = alloc.node_selector("nodeSelector")
    if len(terms) == 1 and not terms[0].match_expressions and len(terms[0].match_fields) == 1:
        only = terms[0].match_fields[0]
        if only.operator is Operator.IN and len(only.values) == 1:
            return only.values[0], None
    return None, terms
