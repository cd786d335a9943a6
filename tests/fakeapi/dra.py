"""resource.k8s.io/v1 (DRA) in the fake API server: ResourceSlices, ResourceClaims (status
subresource), ResourceClaimTemplates and DeviceClasses, checked as kube-apiserver 1.34+ checks them.

ResourceSlices: `spec.driver`, `spec.pool` (`name`, `resourceSliceCount` >= 1, `generation` >= 0)
and exactly one of `spec.nodeName`, `allNodes` and `perDeviceNodeSelection` (true when set);
with `perDeviceNodeSelection` each device has exactly one of `nodeName` and `allNodes`, which
no device of another slice may have (`nodeSelector`, on a slice or a device, is not modelled:
it raises); `sharedCounters` (at most 8 sets, names
unique DNS labels, each with 1-32 counters named by DNS labels) or `devices`, not both; a device's
`consumesCounters` at most 2 sets, unique, each with 1-32 counters;
at most 128 devices (64 when any has taints or consumes counters), device names are DNS labels
and unique, every
attribute holds exactly one of `int`, `bool`, `string` (<= 64 characters) or `version` (semantic),
attribute and capacity names are C identifiers of <= 32 characters with an optional domain, at
most 32 of them per device; a taint's effect is `NoSchedule`, `NoExecute` or `None` and the server
sets its `timeAdded`; a capacity's `requestPolicy` (`default`, `validRange.min`/`max`) must hold
its default within the range and the value. Field selectors `spec.nodeName` and `spec.driver`.
ResourceClaims: `spec` is immutable (`status` is written through `/status`: `reservedFor` needs an
allocation, an allocation is set or cleared, never changed).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from tests.fakeapi.errors import invalid
from tests.fakeapi.resources import ResourceType

GROUP = "resource.k8s.io"
MAX_DEVICES = 128
MAX_TAINTED = 64
MAX_RESERVED = 256
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_C_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?"
)
_VALUE_TYPES = ("int", "bool", "string", "version")
_DEVICE_KEYS = {"name", "attributes", "capacity", "taints", "allowMultipleAllocations",
                "consumesCounters", "bindingConditions", "bindingFailureConditions",
                "bindsToNode", "nodeName", "allNodes", "nodeSelector"}  # fmt: skip
MAX_BINDING_CONDITIONS = 4
_UNMODELLED_SPEC = ("nodeSelector",)
_NODE_FIELDS = ("nodeName", "allNodes")  # a device's, with perDeviceNodeSelection
MAX_COUNTER_SETS = 8
MAX_COUNTERS = 32
MAX_CONSUMED_SETS = 2

Obj = dict[str, Any]


def dra_types() -> list[ResourceType]:
    def grouped(plural: str, kind: str, namespaced: bool, **kw: Any) -> ResourceType:
        return ResourceType(
            group=GROUP, versions=("v1",), plural=plural, kind=kind, namespaced=namespaced, **kw
        )

    return [
        grouped(
            "resourceslices",
            "ResourceSlice",
            False,
            field_labels=frozenset({"spec.nodeName", "spec.driver"}),
        ),
        grouped("resourceclaims", "ResourceClaim", True, status_subresource=True),
        grouped("resourceclaimtemplates", "ResourceClaimTemplate", True),
        grouped("deviceclasses", "DeviceClass", False),
        grouped("devicetaintrules", "DeviceTaintRule", False, status_subresource=True),
    ]


def is_dra(rt: ResourceType) -> bool:
    return rt.builtin and rt.group == GROUP


def prepare_create(rt: ResourceType, obj: Obj) -> Obj:
    if rt.plural == "resourceslices":
        _check_slice(rt, obj)
    if rt.plural == "devicetaintrules":
        _check_rule(rt, obj)
    return obj


def check_update(rt: ResourceType, old: Obj, new: Obj) -> Obj:
    if rt.plural == "resourceslices":
        _check_slice(rt, new, old)
    if rt.plural == "devicetaintrules":
        _check_rule(rt, new, old)
    if rt.plural == "resourceclaims" and new.get("spec") != old.get("spec"):
        raise invalid(rt, new["metadata"]["name"], ["spec: Invalid value: field is immutable"])
    return new


def check_status_update(rt: ResourceType, old: Obj, new: Obj) -> Obj:
    """A ResourceClaim's status as kube-apiserver validates it: `reservedFor` only with an
    allocation, at most 256 entries with unique UIDs, each naming its `resource`, `name` and
    `uid` (a pod, or a `scheduling.k8s.io` `podgroups` one); an allocation may be set or cleared but
    not changed, and not set on a claim being deleted."""
    status, before = new.get("status") or {}, old.get("status") or {}
    reserved = status.get("reservedFor") or []
    allocation, old_allocation = status.get("allocation"), before.get("allocation")
    problems = []
    if reserved and not allocation:
        problems.append(
            "status.reservedFor: Forbidden: may not be specified when `allocated` is not set"
        )
    if len(reserved) > MAX_RESERVED:
        problems.append(
            f"status.reservedFor: Too many: {len(reserved)}: must have at most {MAX_RESERVED} items"
        )
    for i, consumer in enumerate(reserved):
        problems += [
            f"status.reservedFor[{i}].{part}: Required value"
            for part in ("resource", "name", "uid")
            if not (consumer or {}).get(part)
        ]
    uids = [r.get("uid") for r in reserved]
    if len(set(uids)) != len(uids):
        problems.append("status.reservedFor: Duplicate value: a consumer UID twice")
    if allocation and old_allocation and allocation != old_allocation:
        problems.append("status.allocation: Invalid value: field is immutable")
    if allocation and not old_allocation and old["metadata"].get("deletionTimestamp"):
        problems.append("status.allocation: Forbidden: new allocation not allowed while deleting")
    problems += _device_status_problems(status, allocation)
    if problems:
        raise invalid(rt, new["metadata"]["name"], problems)
    return new


_CONDITION_STATUSES = ("True", "False", "Unknown")
_REASON = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")


def _device_status_problems(status: Mapping[str, Any], allocation: Any) -> list[str]:
    """`status.devices` (DRAResourceClaimDeviceStatus): each entry an allocated device, once,
    its conditions as metav1.Conditions (type, a status of True/False/Unknown, a reason,
    lastTransitionTime)."""
    results = ((allocation or {}).get("devices") or {}).get("results") or ()
    allocated = {(r.get("driver"), r.get("pool"), r.get("device")) for r in results}
    problems, seen = [], set()
    for i, entry in enumerate(status.get("devices") or ()):
        at = f"status.devices[{i}]"
        key = (entry.get("driver"), entry.get("pool"), entry.get("device"))
        if key not in allocated:
            problems.append(f"{at}: Invalid value: must be an allocated device in the claim")
        if key in seen:
            problems.append(f"{at}: Duplicate value: {key!r}")
        seen.add(key)
        for j, cond in enumerate(entry.get("conditions") or ()):
            where = f"{at}.conditions[{j}]"
            if not cond.get("type"):
                problems.append(f"{where}.type: Required value")
            if cond.get("status") not in _CONDITION_STATUSES:
                problems.append(f"{where}.status: Unsupported value: {cond.get('status')!r}")
            if not _REASON.fullmatch(str(cond.get("reason") or "")):
                problems.append(f"{where}.reason: Invalid value: {cond.get('reason')!r}")
            if not cond.get("lastTransitionTime"):
                problems.append(f"{where}.lastTransitionTime: Required value")
    return problems


def _check_slice(rt: ResourceType, obj: Obj, old: Obj | None = None) -> None:
    spec = obj.get("spec") or {}
    for key in _UNMODELLED_SPEC:
        if spec.get(key):
            raise NotImplementedError(f"fake API server: ResourceSlice spec.{key}")
    problems = _spec_problems(spec)
    devices = spec.get("devices") or []
    if "sharedCounters" in spec and "devices" in spec:
        problems.append(
            'spec: Invalid value: "": only one of `sharedCounters` or `devices` is allowed'
        )
    problems += _counter_sets_problems(
        "spec.sharedCounters", spec.get("sharedCounters") or [], "name", MAX_COUNTER_SETS
    )
    tainted = any(
        isinstance(d, Mapping) and (d.get("taints") or d.get("consumesCounters")) for d in devices
    )
    limit = MAX_TAINTED if tainted else MAX_DEVICES
    if len(devices) > limit:
        problems.append(f"spec.devices: Too many: {len(devices)}: must have at most {limit} items")
    seen: set[str] = set()
    per_device = bool(spec.get("perDeviceNodeSelection"))
    for i, device in enumerate(devices):
        problems += _device_problems(f"spec.devices[{i}]", device, seen)
        if isinstance(device, Mapping):
            problems += _node_problems(f"spec.devices[{i}]", device, per_device)
    if problems:
        raise invalid(rt, obj["metadata"].get("name", ""), problems)
    _stamp_taints(devices, old)


def _check_rule(rt: ResourceType, obj: Obj, old: Obj | None = None) -> None:
    """A DeviceTaintRule (1.37, v1): `spec.taint` with a `key` (a qualified name) and an
    `effect` of `NoSchedule`, `NoExecute` or `None`; a `deviceSelector` of `driver`, `pool` and
    `device` only (the `deviceClassName` and `selectors` of v1alpha3 are gone in v1). The server
    sets the taint's `timeAdded` (kept from `old` while the taint is the same)."""
    spec = obj.get("spec") or {}
    selector = spec.get("deviceSelector")
    if selector is not None and set(selector) - {"driver", "pool", "device"}:
        raise NotImplementedError(f"fake API server: DeviceTaintRule deviceSelector {selector!r}")
    taint = spec.get("taint") or {}
    problems = []
    if not taint.get("key"):
        problems.append("spec.taint.key: Required value")
    elif not _label_name(str(taint["key"])):
        problems.append(f"spec.taint.key: Invalid value: {taint['key']!r}: not a qualified name")
    if taint.get("effect") not in ("NoSchedule", "NoExecute", "None"):
        problems.append(f"spec.taint.effect: Unsupported value: {taint.get('effect')!r}")
    if problems:
        raise invalid(rt, obj["metadata"].get("name", ""), problems)
    before = ((old or {}).get("spec") or {}).get("taint") or {}
    same = {k: v for k, v in before.items() if k != "timeAdded"} == {
        k: v for k, v in taint.items() if k != "timeAdded"
    }
    if "timeAdded" not in taint:
        if same and before.get("timeAdded"):
            taint["timeAdded"] = before["timeAdded"]
        else:
            taint["timeAdded"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _label_name(key: str) -> bool:
    """A qualified name as a label key is one: an optional DNS-subdomain prefix and `/`, then
    at most 63 characters."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not _SUBDOMAIN.fullmatch(prefix) or len(prefix) > 253):
        return False
    return bool(_LABEL_NAME.fullmatch(name)) and len(name) <= 63


def _spec_problems(spec: Mapping[str, Any]) -> list[str]:
    problems = []
    if not spec.get("driver"):
        problems.append("spec.driver: Required value")
    pool = spec.get("pool") or {}
    if not pool.get("name"):
        problems.append("spec.pool.name: Required value")
    if int(pool.get("resourceSliceCount") or 0) < 1:
        problems.append("spec.pool.resourceSliceCount: Invalid value: must be greater than zero")
    if int(pool.get("generation") or 0) < 0:
        problems.append("spec.pool.generation: Invalid value: must be greater than or equal to 0")
    for flag in ("allNodes", "perDeviceNodeSelection"):
        if spec.get(flag) is False:
            problems.append(f"spec.{flag}: Invalid value: false: must be either unset or true")
    chosen = [k for k in ("nodeName", "allNodes", "perDeviceNodeSelection") if spec.get(k)]
    if len(chosen) != 1:
        problems.append(
            "spec: Invalid value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, "
            "`perDeviceNodeSelection` is required"
            + (", but multiple fields are set" if chosen else "")
        )
    return problems


def _node_problems(field: str, device: Mapping[str, Any], per_device: bool) -> list[str]:
    """A device's own `nodeName` or `allNodes`: exactly one of them with
    `perDeviceNodeSelection`, neither without."""
    if device.get("nodeSelector"):
        raise NotImplementedError(f"fake API server: ResourceSlice {field}.nodeSelector")
    if device.get("allNodes") is False:
        return [f"{field}.allNodes: Invalid value: false: must be either unset or set to true"]
    chosen = [k for k in _NODE_FIELDS if device.get(k)]
    if per_device and len(chosen) != 1:
        return [
            f"{field}: Required value: exactly one of `nodeName`, `nodeSelector`, or `allNodes` "
            "is required when `perDeviceNodeSelection` is set to true in the ResourceSlice spec"
        ]
    if not per_device and chosen:
        return [
            f"{field}: Invalid value: `nodeName`, `nodeSelector` and `allNodes` can only be set "
            "if `perDeviceNodeSelection` is set to true in the ResourceSlice spec"
        ]
    return []


def _device_problems(field: str, device: Any, seen: set[str]) -> list[str]:
    if not isinstance(device, Mapping):
        return [f"{field}: Invalid value: must be an object"]
    unknown = set(device) - _DEVICE_KEYS
    if unknown:
        raise NotImplementedError(
            f"fake API server: ResourceSlice {field} fields {sorted(unknown)}"
        )
    problems = []
    name = device.get("name") or ""
    if not _LABEL.fullmatch(name) or len(name) > 63:
        problems.append(f"{field}.name: Invalid value: {name!r}: must be a DNS label")
    elif name in seen:
        problems.append(f"{field}.name: Duplicate value: {name!r}")
    seen.add(name)
    attributes = device.get("attributes") or {}
    capacity = device.get("capacity") or {}
    if len(attributes) + len(capacity) > 32:
        problems.append(f"{field}: Too many: must have at most 32 attributes and capacities")
    for key, value in attributes.items():
        problems += _name_problems(f"{field}.attributes[{key}]", key)
        problems += _value_problems(f"{field}.attributes[{key}]", value)
    for key, value in capacity.items():
        problems += _name_problems(f"{field}.capacity[{key}]", key)
        problems += _capacity_problems(f"{field}.capacity[{key}]", value)
    problems += _counter_sets_problems(
        f"{field}.consumesCounters",
        device.get("consumesCounters") or [],
        "counterSet",
        MAX_CONSUMED_SETS,
    )
    problems += _binding_problems(field, device)
    for j, taint in enumerate(device.get("taints") or []):
        if taint.get("effect") not in ("NoSchedule", "NoExecute", "None"):
            problems.append(
                f"{field}.taints[{j}].effect: Unsupported value: {taint.get('effect')!r}"
            )
    return problems


def _binding_problems(field: str, device: Mapping[str, Any]) -> list[str]:
    """`bindingConditions` and `bindingFailureConditions`: at most 4 each, qualified names,
    none twice, none in both."""
    problems = []
    wanted = list(device.get("bindingConditions") or [])
    failing = list(device.get("bindingFailureConditions") or [])
    for name, items in (("bindingConditions", wanted), ("bindingFailureConditions", failing)):
        if len(items) > MAX_BINDING_CONDITIONS:
            problems.append(
                f"{field}.{name}: Too many: {len(items)}: must have at most "
                f"{MAX_BINDING_CONDITIONS} items"
            )
        for i, item in enumerate(items):
            if not isinstance(item, str) or not _label_name(item):
                problems.append(f"{field}.{name}[{i}]: Invalid value: {item!r}")
            elif item in items[:i]:
                problems.append(f"{field}.{name}[{i}]: Duplicate value: {item!r}")
    for i, item in enumerate(failing):
        if item in wanted:
            problems.append(
                f"{field}.bindingFailureConditions[{i}]: Invalid value: {item!r}: "
                "bindingFailureConditions must not overlap with bindingConditions"
            )
    return problems


def _counter_sets_problems(field: str, sets: Any, key: str, limit: int) -> list[str]:
    """`sharedCounters` (`key` "name") or a device's `consumesCounters` ("counterSet")."""
    if not isinstance(sets, list):
        return [f"{field}: Invalid value: must be a list"]
    problems = []
    if len(sets) > limit:
        problems.append(f"{field}: Too many: {len(sets)}: must have at most {limit} items")
    seen: set[str] = set()
    for i, entry in enumerate(sets):
        at = f"{field}[{i}]"
        if not isinstance(entry, Mapping) or not set(entry) <= {key, "counters"}:
            raise NotImplementedError(f"fake API server: ResourceSlice {at} {entry!r}")
        name = entry.get(key) or ""
        if not name:
            problems.append(f"{at}.{key}: Required value")
        elif not _LABEL.fullmatch(name) or len(name) > 63:
            problems.append(f"{at}.{key}: Invalid value: {name!r}: must be a DNS label")
        elif name in seen:
            problems.append(f"{at}.{key}: Duplicate value: {name!r}")
        seen.add(name)
        problems += _counters_problems(f"{at}.counters", entry.get("counters") or {})
    return problems


def _counters_problems(field: str, counters: Mapping[str, Any]) -> list[str]:
    problems = []
    if not counters:
        problems.append(f"{field}: Required value")
    if len(counters) > MAX_COUNTERS:
        problems.append(
            f"{field}: Too many: {len(counters)}: must have at most {MAX_COUNTERS} items"
        )
    for counter, value in counters.items():
        if not _LABEL.fullmatch(counter) or len(counter) > 63:
            problems.append(f"{field}[{counter}]: Invalid value: must be a DNS label")
        elif not isinstance(value, Mapping) or _quantity(value.get("value")) is None:
            problems.append(f"{field}[{counter}].value: Invalid value: not a quantity")
    return problems


def _capacity_problems(field: str, value: Any) -> list[str]:
    """`value`, and a `requestPolicy` with `default` and `validRange` (`validValues` and `step`
    are not modelled); the default lies in the range and within the value."""
    if not isinstance(value, Mapping) or not set(value) <= {"value", "requestPolicy"}:
        raise NotImplementedError(f"fake API server: {field} {value!r}")
    total = _quantity(value.get("value"))
    if total is None:
        return [f"{field}.value: Invalid value: {value.get('value')!r}: not a quantity"]
    policy = value.get("requestPolicy")
    if policy is None:
        return []
    if not set(policy) <= {"default", "validRange"} or set(policy.get("validRange") or {}) - {
        "min",
        "max",
    }:
        raise NotImplementedError(f"fake API server: {field}.requestPolicy {policy!r}")
    default = _quantity(policy.get("default"))
    low = _quantity((policy.get("validRange") or {}).get("min"))
    if default is None or low is None:
        return [f"{field}.requestPolicy: Invalid value: default and validRange.min are required"]
    if not low <= default <= total:
        return [
            f"{field}.requestPolicy.default: Invalid value: must lie within validRange and value"
        ]
    return []


_SUFFIXES = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6,
             "G": 10**9, "T": 10**12}  # fmt: skip
_QUANTITY = re.compile(r"(\d+)(Ki|Mi|Gi|Ti|k|M|G|T)?")


def _quantity(text: Any) -> int | None:
    """Integral quantities only (what the driver writes); anything else reads as invalid."""
    match = _QUANTITY.fullmatch(str(text)) if text is not None else None
    return int(match[1]) * _SUFFIXES[match[2] or ""] if match else None


def _name_problems(field: str, key: str) -> list[str]:
    domain, slash, ident = key.rpartition("/")
    if slash and not domain:
        return [f"{field}: Invalid value: empty domain"]
    if not _C_IDENT.fullmatch(ident) or len(ident) > 32:
        return [
            f"{field}: Invalid value: {ident!r}: must be a C identifier of at most 32 characters"
        ]
    return []


def _value_problems(field: str, value: Any) -> list[str]:
    if not isinstance(value, Mapping):
        return [f"{field}: Invalid value: must be an object"]
    kinds = [k for k in _VALUE_TYPES if k in value]
    if len(kinds) != 1 or set(value) - set(_VALUE_TYPES):
        return [f"{field}: Invalid value: exactly one value must be specified"]
    kind, item = kinds[0], value[kinds[0]]
    if kind == "version" and not (isinstance(item, str) and _SEMVER.fullmatch(item)):
        return [f"{field}.version: Invalid value: {item!r}: must be a semantic version"]
    if kind == "string" and (not isinstance(item, str) or len(item) > 64):
        return [f"{field}.string: Too long: may not be more than 64 bytes"]
    if kind == "int" and (not isinstance(item, int) or isinstance(item, bool)):
        return [f"{field}.int: Invalid value: must be an integer"]
    return []


def _stamp_taints(devices: list[Any], old: Obj | None) -> None:
    """The server sets `timeAdded` of a taint that has none."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for device in devices:
        for taint in device.get("taints") or []:
            taint.setdefault("timeAdded", now)
