"""The upstream gang API of a real API server: `scheduling.k8s.io` Workloads and PodGroups.

Served only when a test asks (`FakeApiServer.serve_workload_api(versions)`), in the versions it
names, as a server with the `GenericWorkload` gate serves them (1.36: `v1alpha2`; 1.37.2:
`v1beta1`, and `v1alpha3` with alpha APIs on). Both are namespaced; PodGroups have a status
subresource. What 1.37.2 was seen to do (`reference/dra-and-workload-api.md`):

- a PodGroup's `schedulingPolicy` must set exactly one of `basic`, `gang` (422 `must specify
  exactly one of: ...`, or `must specify one of: ...` when it sets none); `gang.minCount` is
  required and at least 1 (0 reads as unset: `Required value`);
- `disruptionMode` defaults to `{single: {}}`, a union of `single` and `all`; on 1.36
  (`v1alpha2` served) it is a string, `Pod` (the default) or `PodGroup` (422 `Unsupported
  value` otherwise, read from the 1.36.3 sources); at most one `schedulingConstraints.topology`
  entry (TopologyAwareWorkloadScheduling on);
- the priority admission resolves `priority` from `priorityClassName` (no class: 0); a `priority`
  sent that differs is 403, a resolved value above 1000000000 is 422;
- a new PodGroup gets the finalizer `scheduling.k8s.io/podgroup-protection` (no controller here
  removes it: `fake.delete_object` removes a PodGroup at once);
- a Workload's `podGroupTemplates[*].schedulingPolicy` follows the same union rule;
- with the `DRAWorkloadResourceClaims` gate (`CLAIMS_GATE`, on unless a test turns it off) a
  PodGroup's `spec.resourceClaims` holds at most 4 entries of unique `name`s, each with exactly
  one of `resourceClaimName`, `resourceClaimTemplateName`; the list is immutable; every
  `status.resourceClaimStatuses[*].name` must name one of them. Without the gate both fields
  are dropped (unless the stored object has claims already), as `dropDisabledPodGroupSpecFields`
  does.

1.35 (`serve_workload_api(["v1alpha1"])`, served alone) has Workloads only, no PodGroups: a
Workload's `spec.podGroups` holds 1 to 8 entries, each a unique DNS-label `name` and a `policy`
of exactly one of `basic`, `gang` (`gang.minCount` positive); the list is immutable. Pods name a
pod group in `spec.workloadRef {name, podGroup, podGroupReplicaKey}` (a DNS subdomain and two
DNS labels), a field kept only while that API is served, dropped otherwise, as
`dropDisabledWorkloadRef` does (`admit_workload_ref`).

With the `CompositePodGroup` gate (`serve_workload_api(..., composite_gate=True)`, 1.37 alpha)
CompositePodGroups are served in `v1alpha3` (namespaced, with a status subresource): a
`schedulingPolicy` of exactly one of `basic`, `gang` (`gang.minGroupCount` required, at least
1), `workloadRef {workloadName, templateName}` required, `disruptionMode` defaulting to
`{single: {}}`, the PodGroup's priority admission and topology rule, every spec field immutable,
no finalizer. A PodGroup's `parentCompositePodGroupName` needs `workloadRef` with the gate on,
and is dropped without it; it is immutable. (All as 1.37.2 was seen to answer.)

Not modelled (raises `NotImplementedError`): a `globalDefault` PriorityClass with a PodGroup that
names no class, a Workload's `compositePodGroupTemplates`, a Workload template's
`resourceClaims`, and 1.35's `v1alpha1` beside a later version.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from tests.fakeapi import priority
from tests.fakeapi.errors import invalid
from tests.fakeapi.resources import ResourceType
from tests.fakeapi.store import Obj

GROUP = "scheduling.k8s.io"
CLAIMS_GATE = "DRAWorkloadResourceClaims"
MAX_CLAIMS = 4
_CLAIM_REFS = ("resourceClaimName", "resourceClaimTemplateName")
PODGROUPS, WORKLOADS, COMPOSITES = "podgroups", "workloads", "compositepodgroups"
COMPOSITE_GATE = "CompositePodGroup"
_IMMUTABLE = "{field}: Invalid value: null: field is immutable"  # 1.37.2 shows null, not the value
V1_37_ALPHA = "v1alpha3"
V1_35 = "v1alpha1"  # 1.35: Workloads only, named by pods' spec.workloadRef
MAX_POD_GROUPS = 8
PROTECTION_FINALIZER = "scheduling.k8s.io/podgroup-protection"
_POLICIES = ("basic", "gang")
_DISRUPTION = ("single", "all")
V1_36 = "v1alpha2"
_DISRUPTION_136 = ("Pod", "PodGroup")  # v1alpha2's DisruptionMode: a string enum


def types(
    versions: Sequence[str], *, claims_gate: bool = True, composite_gate: bool = False
) -> list[ResourceType]:
    """The resource types, served in `versions` (`claims_gate`: DRAWorkloadResourceClaims;
    `composite_gate`: CompositePodGroup, its objects served in `v1alpha3` when that is)."""
    served = tuple(versions)
    if V1_35 in served:
        if served != (V1_35,):
            raise NotImplementedError(
                f"fake API server: {V1_35} (1.35) beside a later version is not modelled"
            )
        return [
            ResourceType(
                group=GROUP, versions=served, plural=WORKLOADS, kind="Workload", namespaced=True
            )
        ]
    gates = {CLAIMS_GATE} if claims_gate else set()
    if composite_gate:
        gates.add(COMPOSITE_GATE)
    found = [
        ResourceType(
            group=GROUP,
            versions=served,
            plural=PODGROUPS,
            kind="PodGroup",
            namespaced=True,
            status_subresource=True,
            gates=frozenset(gates),
        ),
        ResourceType(
            group=GROUP, versions=served, plural=WORKLOADS, kind="Workload", namespaced=True
        ),
    ]
    if composite_gate and V1_37_ALPHA in served:
        found.append(
            ResourceType(
                group=GROUP,
                versions=(V1_37_ALPHA,),
                plural=COMPOSITES,
                kind="CompositePodGroup",
                namespaced=True,
                status_subresource=True,
                gates=frozenset({COMPOSITE_GATE}),
            )
        )
    return found


def handles(rt: ResourceType) -> bool:
    return rt.builtin and rt.group == GROUP and rt.plural in (PODGROUPS, WORKLOADS, COMPOSITES)


def _union(field: str, value: Any, members: tuple[str, ...], required: bool) -> list[str]:
    """A union's problems as the API server words them."""
    if value is None:
        if not required:
            return []
        return [f'{field}: Invalid value: "": must specify one of: {_quoted(members)}']
    if not isinstance(value, dict):
        return [f"{field}: Invalid value: must be an object"]
    unknown = sorted(set(value) - set(members))
    if unknown:
        raise NotImplementedError(f"fake API server: {field}.{unknown[0]} is not modelled")
    given = sorted(k for k in members if value.get(k) is not None)
    if len(given) > 1:
        shown = "{" + ", ".join(given) + "}"
        return [
            f'{field}: Invalid value: "{shown}": must specify exactly one of: {_quoted(members)}'
        ]
    if not given and required:
        return [f'{field}: Invalid value: "": must specify one of: {_quoted(members)}']
    return []


def _quoted(members: tuple[str, ...]) -> str:
    return ", ".join(f"`{m}`" for m in members)


def _policy_problems(field: str, policy: Any) -> list[str]:
    problems = _union(field, policy, _POLICIES, required=True)
    gang = policy.get("gang") if isinstance(policy, dict) else None
    if problems or gang is None:
        return problems
    count = gang.get("minCount") if isinstance(gang, dict) else None
    if not count:
        return [f"{field}.gang.minCount: Required value"]
    if not isinstance(count, int) or count < 1:
        return [
            f"{field}.gang.minCount: Invalid value: {count}: must be greater than or equal to 1"
        ]
    return []


def _disruption_problems(field: str, mode: Any, rt: ResourceType) -> list[str]:
    if V1_36 not in rt.versions:
        return _union(field, mode, _DISRUPTION, False)
    if mode is None or mode in _DISRUPTION_136:
        return []
    supported = ", ".join(f'"{m}"' for m in _DISRUPTION_136)
    return [f"{field}: Unsupported value: {json.dumps(mode)}: supported values: {supported}"]


def _default_disruption(rt: ResourceType) -> object:
    return "Pod" if V1_36 in rt.versions else {"single": {}}


def _group_problems(spec: Obj, rt: ResourceType, prefix: str = "spec") -> list[str]:
    problems = _policy_problems(f"{prefix}.schedulingPolicy", spec.get("schedulingPolicy"))
    problems += _disruption_problems(f"{prefix}.disruptionMode", spec.get("disruptionMode"), rt)
    return problems + _topology_problems(spec, prefix)


def _parent_problems(rt: ResourceType, spec: Obj, old: Obj | None) -> list[str]:
    """A PodGroup's `parentCompositePodGroupName`: dropped without the gate (unless the stored
    object has one), with it `workloadRef` required beside it; immutable (1.37.2's words)."""
    before = (old or {}).get("spec", {}).get("parentCompositePodGroupName")
    if COMPOSITE_GATE not in rt.gates and before is None:
        spec.pop("parentCompositePodGroupName", None)
    parent = spec.get("parentCompositePodGroupName")
    problems = []
    if old is not None and parent != before:
        problems.append(_IMMUTABLE.format(field="spec.parentCompositePodGroupName"))
    if parent is None:
        return problems
    if not isinstance(parent, str) or not _DNS_SUBDOMAIN.fullmatch(parent):
        problems.append(
            f'spec.parentCompositePodGroupName: Invalid value: "{parent}": {_SUBDOMAIN_RULE}'
        )
    if spec.get("workloadRef") is None:
        problems.append(
            "spec.workloadRef: Required value: must be set when parentCompositePodGroupName is set"
        )
    return problems


def _workload_ref_problems(ref: Any, required: bool) -> list[str]:
    if ref is None:
        return ["spec.workloadRef: Required value"] if required else []
    ref = ref if isinstance(ref, dict) else {}
    return [
        f"spec.workloadRef.{field}: Required value"
        for field in ("workloadName", "templateName")
        if not ref.get(field)
    ]


def _composite_problems(spec: Obj, rt: ResourceType) -> list[str]:
    """A CompositePodGroup's spec (1.37.2's declarative validation, as its types declare it)."""
    field = "spec.schedulingPolicy"
    policy = spec.get("schedulingPolicy")
    problems = _union(field, policy, _POLICIES, required=True)
    gang = policy.get("gang") if isinstance(policy, dict) else None
    if not problems and gang is not None:
        count = gang.get("minGroupCount") if isinstance(gang, dict) else None
        if not count:
            problems.append(f"{field}.gang.minGroupCount: Required value")
        elif not isinstance(count, int) or count < 1:
            problems.append(
                f"{field}.gang.minGroupCount: Invalid value: {count}: must be greater than or "
                "equal to 1"
            )
    problems += _union("spec.disruptionMode", spec.get("disruptionMode"), _DISRUPTION, False)
    problems += _workload_ref_problems(spec.get("workloadRef"), required=True)
    problems += _topology_problems(spec, "spec")
    parent = spec.get("parentCompositePodGroupName")
    if parent is not None and not _DNS_SUBDOMAIN.fullmatch(str(parent)):
        problems.append(
            f'spec.parentCompositePodGroupName: Invalid value: "{parent}": {_SUBDOMAIN_RULE}'
        )
    return problems


def _topology_problems(spec: Obj, prefix: str) -> list[str]:
    topology = (spec.get("schedulingConstraints") or {}).get("topology") or []
    problems = []
    if len(topology) > 1:
        problems.append(
            f"{prefix}.schedulingConstraints.topology: Too many: {len(topology)}: must have at "
            "most 1 items"
        )
    for i, constraint in enumerate(topology):
        if not (constraint or {}).get("key"):
            problems.append(f"{prefix}.schedulingConstraints.topology[{i}].key: Required value")
    return problems


def _claim_problems(claims: Any) -> list[str]:
    """`spec.resourceClaims` as the declarative validation of 1.37.2 checks it."""
    if not isinstance(claims, list):
        return ["spec.resourceClaims: Invalid value: must be a list"]
    problems = []
    if len(claims) > MAX_CLAIMS:
        problems.append(
            f"spec.resourceClaims: Too many: {len(claims)}: must have at most {MAX_CLAIMS} items"
        )
    seen: set[str] = set()
    for i, claim in enumerate(claims):
        field = f"spec.resourceClaims[{i}]"
        name = (claim or {}).get("name")
        if not name:
            problems.append(f"{field}.name: Required value")
        elif name in seen:
            problems.append(f'{field}: Duplicate value: {{"name":"{name}"}}')
        seen.add(str(name))
        given = [k for k in _CLAIM_REFS if (claim or {}).get(k) is not None]
        if len(given) != 1:
            how = "exactly one of" if given else "one of"
            problems.append(
                f'{field}: Invalid value: "": must specify {how}: {_quoted(_CLAIM_REFS)}'
            )
    return problems


def _gate_claims(rt: ResourceType, new: Obj, old: Obj | None) -> list[str]:
    """Drop the claim fields without the gate; their problems with it."""
    spec, before = new.setdefault("spec", {}), (old or {}).get("spec") or {}
    if CLAIMS_GATE not in rt.gates and not before.get("resourceClaims"):
        spec.pop("resourceClaims", None)
        (new.get("status") or {}).pop("resourceClaimStatuses", None)
        return []
    if "resourceClaims" not in spec:
        return []
    if old is not None and spec.get("resourceClaims") != before.get("resourceClaims"):
        return ["spec.resourceClaims: Invalid value: field is immutable"]
    return _claim_problems(spec["resourceClaims"])


def check_status_update(rt: ResourceType, old: Obj, new: Obj) -> Obj:
    """A PodGroup's status: each `resourceClaimStatuses[*].name` names a spec claim."""
    _gate_claims(rt, new, old)
    names = {c.get("name") for c in (new.get("spec") or {}).get("resourceClaims") or ()}
    problems = [
        f'status.resourceClaimStatuses[{i}].name: Invalid value: "{s.get("name")}": must match '
        "the name of an entry in `spec.resourceClaims`"
        for i, s in enumerate((new.get("status") or {}).get("resourceClaimStatuses") or ())
        if s.get("name") not in names
    ]
    if problems:
        raise invalid(rt, new["metadata"]["name"], problems)
    return new


def _admit_priority(rt: ResourceType, group: Obj, classes: Sequence[Obj]) -> None:
    spec, name = group["spec"], group["metadata"].get("name", "")
    wanted = spec.get("priorityClassName") or ""
    if not wanted:
        if priority.default_class(classes) is not None:
            raise NotImplementedError(
                "fake API server: a PodGroup without priorityClassName beside a globalDefault "
                "PriorityClass is not modelled"
            )
        value = 0
    else:
        found = next((c for c in classes if c["metadata"]["name"] == wanted), None)
        if found is None:
            raise priority.forbidden(rt, name, f"no PriorityClass with name {wanted} was found")
        value = int(found.get("value", 0))
    sent = spec.get("priority")
    if sent is not None and sent != value:
        raise priority.forbidden(
            rt,
            name,
            f"priority set in the pod group ({sent}) must match the priority computed ({value}) "
            "based on the priority class set in the spec",
        )
    spec["priority"] = value


def prepare_create(rt: ResourceType, obj: Obj, classes: Sequence[Obj]) -> Obj:
    """Defaults, admission and validation of a new PodGroup or Workload (403, 422)."""
    spec = obj.setdefault("spec", {})
    name = obj["metadata"].get("name", "")
    if rt.plural == WORKLOADS:
        return _checked_workload(rt, obj)
    spec.setdefault("disruptionMode", _default_disruption(rt))
    _admit_priority(rt, obj, classes)
    if rt.plural == COMPOSITES:
        problems = _composite_problems(spec, rt)
    else:
        problems = _group_problems(spec, rt) + _gate_claims(rt, obj, None)
        problems += _parent_problems(rt, spec, None)
    if spec["priority"] > priority.HIGHEST_USER_PRIORITY:
        problems.append(
            f"spec.priority: Invalid value: {spec['priority']}: must be less than or equal to "
            f"{priority.HIGHEST_USER_PRIORITY}"
        )
    if problems:
        raise invalid(rt, name, problems)
    if rt.plural == COMPOSITES:
        return obj
    finalizers = obj["metadata"].setdefault("finalizers", [])
    if PROTECTION_FINALIZER not in finalizers:
        finalizers.append(PROTECTION_FINALIZER)
    return obj


def check_update(rt: ResourceType, old: Obj, new: Obj) -> Obj:
    """An update of the object (not its status): the same rules; `priority` carried over."""
    if rt.plural == WORKLOADS:
        return _checked_workload(rt, new, old)
    spec = new.setdefault("spec", {})
    if rt.plural == COMPOSITES:  # every field of its spec is immutable
        before = old.get("spec") or {}
        spec.setdefault("priority", before.get("priority"))
        spec.setdefault("disruptionMode", before.get("disruptionMode"))
        changed = sorted(k for k in {*spec, *before} if spec.get(k) != before.get(k))
        if changed:
            problems = [_IMMUTABLE.format(field=f"spec.{k}") for k in changed]
            raise invalid(rt, new["metadata"]["name"], problems)
        return new
    spec.setdefault("disruptionMode", (old.get("spec") or {}).get("disruptionMode"))
    spec.setdefault("priority", (old.get("spec") or {}).get("priority"))
    problems = _group_problems(spec, rt) + _gate_claims(rt, new, old)
    problems += _parent_problems(rt, spec, old)
    if problems:
        raise invalid(rt, new["metadata"]["name"], problems)
    return new


def _checked_workload(rt: ResourceType, workload: Obj, old: Obj | None = None) -> Obj:
    if rt.versions == (V1_35,):
        return _checked_workload_135(rt, workload, old)
    spec = workload.get("spec") or {}
    if spec.get("compositePodGroupTemplates"):
        raise NotImplementedError("fake API server: compositePodGroupTemplates are not modelled")
    if any((t or {}).get("resourceClaims") for t in spec.get("podGroupTemplates") or []):
        raise NotImplementedError(
            "fake API server: podGroupTemplates[*].resourceClaims (a Workload's) are not modelled"
        )
    problems = []
    for i, template in enumerate(spec.get("podGroupTemplates") or []):
        field = f"spec.podGroupTemplates[{i}]"
        if not template.get("name"):
            problems.append(f"{field}.name: Required value")
        problems += _group_problems(template, rt, field)
    if problems:
        raise invalid(rt, workload["metadata"].get("name", ""), problems)
    return workload


def _checked_workload_135(rt: ResourceType, workload: Obj, old: Obj | None) -> Obj:
    """A 1.35 Workload (`ValidateWorkload`, `ValidateWorkloadUpdate` of 1.35.4)."""
    spec = workload.get("spec") or {}
    groups = spec.get("podGroups") or []
    problems = []
    if not groups:
        problems.append("spec.podGroups: Required value: must have at least one item")
    elif len(groups) > MAX_POD_GROUPS:
        problems.append(
            f"spec.podGroups: Too many: {len(groups)}: must have at most {MAX_POD_GROUPS} items"
        )
    seen: set[str] = set()
    for i, group in enumerate(groups if len(groups) <= MAX_POD_GROUPS else ()):
        field = f"spec.podGroups[{i}]"
        name = str((group or {}).get("name") or "")
        if not _DNS_LABEL.fullmatch(name):
            problems.append(f'{field}.name: Invalid value: "{name}": {_LABEL_RULE}')
        elif name in seen:
            problems.append(f'{field}.name: Duplicate value: "{name}"')
        seen.add(name)
        problems += _policy_problems_135(f"{field}.policy", (group or {}).get("policy"))
    if old is not None and spec.get("podGroups") != (old.get("spec") or {}).get("podGroups"):
        # 1.35.4 names the field without `spec.` and shows the new list
        problems.append(f"podGroups: Invalid value: {json.dumps(groups)}: field is immutable")
    if problems:
        raise invalid(rt, workload["metadata"].get("name", ""), problems)
    return workload


def _policy_problems_135(field: str, policy: Any) -> list[str]:
    policy = policy if isinstance(policy, dict) else {}
    unknown = sorted(set(policy) - set(_POLICIES))
    if unknown:
        raise NotImplementedError(f"fake API server: {field}.{unknown[0]} is not modelled")
    given = [f"`{k}`" for k in _POLICIES if policy.get(k) is not None]
    if not given:
        return [f"{field}: Required value: exactly one of `basic`, `gang` is required"]
    if len(given) > 1:
        return [
            f'{field}: Invalid value: "{{{", ".join(given)}}}": exactly one of `basic`, `gang` '
            "is required, but multiple fields are set"
        ]
    count = (policy.get("gang") or {}).get("minCount") if policy.get("gang") is not None else 1
    if not isinstance(count, int) or count < 1:
        return [f"{field}.gang.minCount: Invalid value: {count}: must be greater than zero"]
    return []


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_RULE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character"
)
_SUBDOMAIN_RULE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character"
)


def admit_workload_ref(pods: ResourceType, pod: Obj, *, served: bool) -> None:
    """A new pod's `spec.workloadRef`: dropped unless the 1.35 Workload API is `served`, else
    checked (422)."""
    spec = pod.get("spec") or {}
    if "workloadRef" not in spec:
        return
    if not served:
        spec.pop("workloadRef")
        return
    ref = spec["workloadRef"] if isinstance(spec["workloadRef"], dict) else {}
    checks = (
        ("name", _DNS_SUBDOMAIN, _SUBDOMAIN_RULE, True),
        ("podGroup", _DNS_LABEL, _LABEL_RULE, True),
        ("podGroupReplicaKey", _DNS_LABEL, _LABEL_RULE, False),
    )
    problems = []
    for field, pattern, rule, required in checks:
        value = ref.get(field) or ""
        if (value or required) and not pattern.fullmatch(str(value)):
            problems.append(f'spec.workloadRef.{field}: Invalid value: "{value}": {rule}')
    if problems:
        raise invalid(pods, pod["metadata"].get("name", ""), problems)
