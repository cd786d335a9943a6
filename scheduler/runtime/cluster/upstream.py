"""Upstream PodGroups (`scheduling.k8s.io`, DESIGN §15) as gangs, and the condition
kube-scheduler writes on them.

`parse_upstream_group` reads what the scheduler honours: `schedulingPolicy` (`gang.minCount` the
gang's minimum, `basic` no gang), `schedulingConstraints.topology[0].key` (a required topology
level, as our annotation), `priorityClassName` with the `priority` admission resolved for it,
`disruptionMode` (`all`, 1.36's `PodGroup`: evicted whole), `preemptionPolicy` and the
PodGroup-level `resourceClaims` (DRAWorkloadResourceClaims: each claim is allocated once for the
group and reserved for the PodGroup, `scheduler.runtime.claims`). A topology constraint holds for
every pod of the group, `basic` ones too: the pods go to the domain its placed pods are in
(`scheduler.placement.gang`). `parentCompositePodGroupName` makes the group a child in a tree of
CompositePodGroups (`composite`), scheduled with the tree. A union with no member, two, or one
this reader does not know (a newer server's) is malformed. Pure: `initially_scheduled`
builds the condition from what the gang tracker knows; the tracker writes it.
`members_disagree` is kube-scheduler's check of a gang's pods before it is tried: one
`schedulerName`, the root group's priority, one `preemptionPolicy`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from agent.podgroup import union_member
from scheduler.kubeapi.workloads import condition_for
from scheduler.runtime.cluster.groups import (
    GroupClaim,
    GroupInfo,
    WorkloadGang,
    base_group,
    parent_name,
    spec_preemption_policy,
    spec_priority,
    spec_topology,
)

__all__ = [
    "REASON_SCHEDULED",
    "REASON_SCHEDULER_ERROR",
    "REASON_UNSCHEDULABLE",
    "condition_type",
    "initially_scheduled",
    "members_disagree",
    "parse_upstream_group",
    "parse_workload_group",
    "status_patch",
    "status_with",
]

Obj = Mapping[str, Any]
REASON_SCHEDULED = "Scheduled"  # kube-scheduler's reasons (1.36, 1.37)
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_SCHEDULER_ERROR = "SchedulerError"
_DISRUPTION_MODES_136 = ("Pod", "PodGroup")


def condition_type(obj: Obj) -> str:
    """The condition kube-scheduler writes on a PodGroup of this object's API version."""
    return condition_for(str(obj.get("apiVersion") or ""))


def parse_upstream_group(obj: Obj, *, levels: Iterable[str] | None = None) -> GroupInfo:
    """Read an upstream PodGroup; a malformed or unsupported one comes back with `error` naming
    the object and the field (never raises). `levels`: as `groups.parse_group`'s."""
    base = base_group(obj, upstream=True)
    spec = obj.get("spec") or {}
    try:
        if not isinstance(spec, Mapping):
            raise ValueError(f"spec: must be an object, got {spec!r}")
        base = replace(base, parent=parent_name(spec))  # kept when a later field is malformed
        policy = union_member(spec, "schedulingPolicy", ("basic", "gang"))
        topology = spec_topology(spec, levels)
        return replace(
            base,
            min_member=_min_count(spec) if policy == "gang" else 1,
            basic=policy == "basic",
            topology=topology,
            priority=spec_priority(spec),
            whole=_evicted_whole(spec),
            never_preempts=spec_preemption_policy(spec) == "Never",
            claims=_claims(spec),
        )
    except (ValueError, TypeError, AttributeError) as exc:
        return replace(base, error=f"invalid {base.title}: {exc}")


def _evicted_whole(spec: Obj) -> bool:
    """`disruptionMode`: 1.37's union (`{single: {}}` or `{all: {}}`), or 1.36's string
    (`v1alpha2`: `Pod` or `PodGroup`); whether the group is evicted whole."""
    mode = spec.get("disruptionMode")
    if isinstance(mode, str):
        if mode not in _DISRUPTION_MODES_136:
            raise ValueError(f"spec.disruptionMode: must be Pod or PodGroup, got {mode!r}")
        return mode == "PodGroup"
    return union_member(spec, "disruptionMode", ("single", "all"), default="single") == "all"


def parse_workload_group(obj: Obj, gang: WorkloadGang) -> GroupInfo:
    """The gang of one pod group (and replica key) of a 1.35 Workload (`scheduling.k8s.io/
    v1alpha1`, `spec.podGroups[] {name, policy {basic | gang {minCount}}}`), as kube-scheduler 1.35
    reads it: `gang.minCount` pods or none, `basic` members one by one. That API has no priority,
    topology, disruption mode or claims of its own. A Workload without the named pod group comes
    back with `error` (its pods wait, as upstream, until the Workload holds it)."""
    meta = obj.get("metadata") or {}
    base = GroupInfo(
        key=gang.key,
        namespace=gang.namespace,
        name=gang.workload,
        uid=str(meta.get("uid") or ""),
        obj=obj,
        workload=gang,
    )
    try:
        index, entry = _workload_pod_group(obj.get("spec"), gang.pod_group)
        at = f"spec.podGroups[{index}]"
        if union_member(entry, "policy", ("basic", "gang"), at=at) == "basic":
            return replace(base, basic=True)
        policy = entry["policy"]["gang"]
        count = policy.get("minCount") if isinstance(policy, Mapping) else None
        return replace(base, min_member=_positive(count, f"{at}.policy.gang.minCount"))
    except (ValueError, TypeError, AttributeError) as exc:
        return replace(base, error=f"invalid Workload {gang.workload_key}: {exc}")


def _workload_pod_group(spec: object, name: str) -> tuple[int, Obj]:
    """The index and entry of `spec.podGroups` named `name`."""
    entries = spec.get("podGroups") if isinstance(spec, Mapping) else None
    if not isinstance(entries, list):
        raise ValueError("spec.podGroups: must be a list")
    for i, entry in enumerate(entries):
        if isinstance(entry, Mapping) and entry.get("name") == name:
            return i, entry
    listed = ", ".join(str(e.get("name")) for e in entries if isinstance(e, Mapping)) or "none"
    raise ValueError(
        f"spec.podGroups: no pod group {name!r} (pods name it in spec.workloadRef.podGroup; "
        f"the Workload has {listed})"
    )


def _positive(count: object, field: str) -> int:
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(f"{field}: must be a positive integer, got {count!r}")
    return count


def _claims(spec: Obj) -> tuple[GroupClaim, ...]:
    """`spec.resourceClaims`: each a unique `name` with exactly one of `resourceClaimName`,
    `resourceClaimTemplateName` (kube's `PodGroupResourceClaim`)."""
    entries = spec.get("resourceClaims") or []
    if not isinstance(entries, list):
        raise ValueError("spec.resourceClaims: must be a list")
    claims: list[GroupClaim] = []
    for i, entry in enumerate(entries):
        field = f"spec.resourceClaims[{i}]"
        name = entry.get("name") if isinstance(entry, Mapping) else None
        if not isinstance(name, str) or not name:
            raise ValueError(f"{field}.name: must name the claim, got {name!r}")
        if any(c.name == name for c in claims):
            raise ValueError(f"{field}.name: {name!r} named twice")
        direct, template = entry.get("resourceClaimName"), entry.get("resourceClaimTemplateName")
        if (direct is None) == (template is None):
            raise ValueError(
                f"{field}: must set exactly one of resourceClaimName, resourceClaimTemplateName"
            )
        if not isinstance(direct or template, str) or not (direct or template):
            raise ValueError(f"{field}: must name a ResourceClaim or ResourceClaimTemplate")
        claims.append(GroupClaim(name=name, claim_name=direct, template_name=template))
    return tuple(claims)


def _min_count(spec: Obj) -> int:
    gang = spec["schedulingPolicy"]["gang"]
    count = gang.get("minCount") if isinstance(gang, Mapping) else None
    return _positive(count, "spec.schedulingPolicy.gang.minCount")


def members_disagree(root: Obj, pods: Iterable[Obj]) -> str | None:
    """Why kube-scheduler refuses to try an upstream gang (`validatePodGroup`), in its words, or
    None: every pod of it (a tree's: of all its PodGroups) names the same `schedulerName`; on
    1.37 (any version of `root` but 1.36's `v1alpha2`) each also has the priority of `root` (the
    PodGroup, or the tree's root CompositePodGroup: its `spec.priority`, 0 when unset) and the
    same `preemptionPolicy` (the root's, when it sets one; PodGroupPreemptionPolicy)."""
    spec = root.get("spec") or {}
    names_only = str(root.get("apiVersion") or "").endswith("/v1alpha2")  # 1.36's check
    priority = spec.get("priority") or 0
    policy = spec.get("preemptionPolicy")
    pinned, first = policy is not None, None
    for pod in pods:
        pod_spec = pod.get("spec") or {}
        name = str(pod_spec.get("schedulerName") or "default-scheduler")
        first = first or name
        if name != first:
            return (
                f"{_SAME} .spec.schedulerName set, got: {json.dumps(name)} and {json.dumps(first)}"
            )
        if names_only:
            continue
        if (pod_priority := pod_spec.get("priority") or 0) != priority:
            return (
                f"{_SAME} priority as the pod group's priority, got {pod_priority} and {priority}"
            )
        own = str(pod_spec.get("preemptionPolicy") or "PreemptLowerPriority")
        policy = policy or own
        if own != policy:
            whose = " as the pod group's preemption policy" if pinned else ""
            return f"{_SAME} preemption policy{whose}, got {own} and {policy}"
    return None


_SAME = "all pods in a single pod group should have the same"


def initially_scheduled(
    group: GroupInfo, *, bound: int, complete: bool, waiting: str, now: str, refused: bool = False
) -> dict[str, Any] | None:
    """The condition kube-scheduler writes (`PodGroupInitiallyScheduled` on 1.37), as it stands
    now: True once `minCount` members were bound (and never turned back, as upstream: it tells
    the first success), False `Unschedulable` with why the gang waits, False `SchedulerError`
    for a group this scheduler cannot use (or, `refused`, whose pods it will not try together:
    `members_disagree`, said by `waiting`); None before the first attempt. `now` stamps a
    change of status or reason."""
    kind = condition_type(group.obj)
    current = _current(group.obj, kind)
    if current is not None and current.get("status") == "True":
        return current
    if complete:
        status, reason = "True", REASON_SCHEDULED
        message = f"{bound} pods bound ({group.min_field} {group.min_member})"
    elif group.error or (refused and waiting):
        status, reason, message = "False", REASON_SCHEDULER_ERROR, group.error or waiting
    elif waiting:
        status, reason, message = "False", REASON_UNSCHEDULABLE, waiting
    else:
        return current
    same = current is not None and (current.get("status"), current.get("reason")) == (
        status,
        reason,
    )
    stamp = str(current.get("lastTransitionTime")) if same and current is not None else now
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message[:32768],
        "lastTransitionTime": stamp,
    }


def _current(obj: Obj, kind: str) -> dict[str, Any] | None:
    for condition in (obj.get("status") or {}).get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            return dict(condition)
    return None


def status_with(obj: Obj, condition: Mapping[str, Any]) -> dict[str, Any]:
    """The status to merge: `condition` in place of its type's, the other conditions kept (a
    merge patch replaces the whole list)."""
    kept = [
        dict(c)
        for c in (obj.get("status") or {}).get("conditions") or ()
        if isinstance(c, Mapping) and c.get("type") != condition.get("type")
    ]
    return {"conditions": [*kept, dict(condition)]}


def status_patch(
    group: GroupInfo, *, bound: int, complete: bool, waiting: str, now: str, refused: bool = False
) -> dict[str, Any] | None:
    """The status to merge into an upstream PodGroup (`initially_scheduled`'s condition among
    the others), or None when the object already shows it."""
    condition = initially_scheduled(
        group, bound=bound, complete=complete, waiting=waiting, now=now, refused=refused
    )
    current = (group.obj.get("status") or {}).get("conditions") or []
    if condition is None or condition in current:
        return None
    return status_with(group.obj, condition)
