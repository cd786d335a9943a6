"""The PodGroups a gang is made from, read once when they arrive (`GroupInfo`).

Two APIs name a gang. Our own PodGroup (`scheduling.x-k8s.io/v1alpha1`, scheduler-plugins'
coscheduling: `minMember`, `minResources`, `scheduleTimeoutSeconds`, the topology annotations) is
read by `parse_group`; the upstream one (`scheduling.k8s.io`, DESIGN §15) by
`upstream.parse_upstream_group`, into the same `GroupInfo`. The two live side by side in the
cache under different keys (`group_key`): the upstream group's name carries `UPSTREAM_MARK`, so
`default/train` (ours) and `default/train@scheduling.k8s.io` (upstream) are two gangs. A 1.35
Workload (`scheduling.k8s.io/v1alpha1`) holds pod groups that pods name in `spec.workloadRef`;
each pod group and replica key is a gang (`upstream.parse_workload_group`), keyed
`default/<workload>/<podGroup>[/<replica key>]@workloads.scheduling.k8s.io`. A reader
never raises: a malformed group comes back with `error` naming the object and the field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from agent.objkey import DEFAULT_NAMESPACE, ObjectKey, object_key, split_key
from agent.podgroup import TOPOLOGY_KEY_FIELD, topology_key
from scheduler.config import DEFAULT_GANG_TIMEOUT_SECONDS
from scheduler.placement import TopologyConstraint, Tree
from scheduler.runtime.cluster.podspec import (
    UPSTREAM_GROUP_MARK,
    WORKLOAD_GROUP_MARK,
    resource_list,
    workload_gang_name,
)

__all__ = [
    "TOPOLOGY_PREFERRED",
    "TOPOLOGY_REQUIRED",
    "UPSTREAM_GROUP",
    "UPSTREAM_MARK",
    "WORKLOAD_API",
    "WORKLOAD_MARK",
    "GroupClaim",
    "GroupInfo",
    "WorkloadGang",
    "check_level",
    "gang_priority",
    "group_key",
    "not_found",
    "parent_name",
    "parse_group",
    "spec_preemption_policy",
    "spec_priority",
    "spec_topology",
    "workload_gang",
]

Obj = Mapping[str, Any]
TOPOLOGY_REQUIRED = "gputopo.io/topology-required"
TOPOLOGY_PREFERRED = "gputopo.io/topology-preferred"
UPSTREAM_MARK = UPSTREAM_GROUP_MARK
"""Appended to an upstream PodGroup's name in its gang key (no object name holds an `@`)."""
UPSTREAM_GROUP = UPSTREAM_MARK.removeprefix("@")
WORKLOAD_MARK = WORKLOAD_GROUP_MARK
"""Ends the gang key of a 1.35 Workload's pod group: `ns/<workload>/<podGroup>[/<replica>]`."""
WORKLOAD_API = "scheduling.k8s.io/v1alpha1"


@dataclass(frozen=True, slots=True)
class WorkloadGang:
    """Which pod group of which 1.35 Workload a gang key names (`workload_gang`)."""

    namespace: str
    workload: str
    pod_group: str
    replica_key: str

    @property
    def workload_key(self) -> ObjectKey:
        return object_key(self.namespace, self.workload)

    @property
    def key(self) -> ObjectKey:
        """The gang key (its members' `group_key`)."""
        return object_key(
            self.namespace, workload_gang_name(self.workload, self.pod_group, self.replica_key)
        )

    def describe(self) -> str:
        replica = f", replica key {self.replica_key}" if self.replica_key else ""
        return (
            f"pod group {self.pod_group} of Workload {self.workload_key} ({WORKLOAD_API}{replica})"
        )


def workload_gang(gkey: ObjectKey) -> WorkloadGang | None:
    """The Workload pod group a gang key names (None: another kind of gang)."""
    namespace, name = split_key(gkey)
    if not name.endswith(WORKLOAD_MARK):
        return None
    workload, pod_group, replica = [*name.removesuffix(WORKLOAD_MARK).split("/", 2), ""][:3]
    return WorkloadGang(namespace, workload, pod_group, replica)


def group_key(namespace: str, name: str, *, upstream: bool = False) -> ObjectKey:
    """The gang key of PodGroup `namespace/name` (ours, or with `upstream` the
    scheduling.k8s.io one): what pods' `group_key` and the cache's `groups` use."""
    return object_key(namespace, name + UPSTREAM_MARK if upstream else name)


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupClaim:
    """One entry of an upstream PodGroup's `spec.resourceClaims` (DRAWorkloadResourceClaims): a
    claim reserved for the group, not its pods. A member uses it by an entry of its own
    `spec.resourceClaims` equal to this one (the same `name` and the same `resourceClaimName` or
    `resourceClaimTemplateName`); exactly one of `claim_name`, `template_name` is set."""

    name: str
    claim_name: str | None = None
    template_name: str | None = None

    def matches(self, entry: Mapping[str, Any]) -> bool:
        """Whether a pod's `spec.resourceClaims` entry is this one (kube's `BindTo`)."""
        return (
            entry.get("name") == self.name
            and entry.get("resourceClaimName") == self.claim_name
            and entry.get("resourceClaimTemplateName") == self.template_name
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupInfo:
    """A PodGroup as a gang; `error` says why it is unusable (pods then wait with it).

    `upstream`: a scheduling.k8s.io PodGroup; `basic`: its `schedulingPolicy.basic` (members
    placed one by one, no gang); `priority`: the group's own (its `priorityClassName`'s), else
    None and the members' count; `whole`: `disruptionMode.all`, evicted whole, never member by
    member; `never_preempts`: `preemptionPolicy: Never`; `parent`: an upstream group's
    `parentCompositePodGroupName` (its pods are scheduled with the tree above it). With `tree`
    set, the GroupInfo is a root CompositePodGroup's whole tree, one gang (`cache.tree_group`):
    `min_member` is then its `minGroupCount`, the rest the root's.
    """

    key: ObjectKey
    namespace: str
    name: str
    uid: str
    obj: Obj
    min_member: int = 1
    min_resources: Mapping[str, int] | None = None
    timeout: float = DEFAULT_GANG_TIMEOUT_SECONDS
    topology: TopologyConstraint | None = None
    error: str | None = None
    upstream: bool = False
    basic: bool = False
    priority: int | None = None
    whole: bool = False
    never_preempts: bool = False
    claims: tuple[GroupClaim, ...] = ()
    workload: WorkloadGang | None = None
    parent: str | None = None
    tree: Tree | None = None

    @property
    def title(self) -> str:
        """How messages name the group: `pod group ns/name`, for an upstream one
        `PodGroup ns/name (scheduling.k8s.io)`, for a 1.35 Workload's
        `pod group g of Workload ns/name (scheduling.k8s.io/v1alpha1)`."""
        if self.workload is not None:
            return self.workload.describe()
        if self.tree is not None:
            return f"CompositePodGroup {object_key(self.namespace, self.name)} ({UPSTREAM_GROUP})"
        if self.upstream:
            return f"PodGroup {object_key(self.namespace, self.name)} ({UPSTREAM_GROUP})"
        return f"pod group {self.key}"

    @property
    def kind(self) -> str:
        """The kind of the object `obj` (what Events about the gang name)."""
        if self.tree is not None:
            return "CompositePodGroup"
        return "Workload" if self.workload is not None else "PodGroup"

    @property
    def min_field(self) -> str:
        """The name of the minimum in the group's own API."""
        if self.tree is not None:
            return "minGroupCount"
        return "minCount" if self.upstream or self.workload is not None else "minMember"


def base_group(obj: Obj, *, upstream: bool = False) -> GroupInfo:
    """The group's identity, nothing read from its spec yet."""
    meta = obj.get("metadata") or {}
    namespace = str(meta.get("namespace") or DEFAULT_NAMESPACE)
    name = str(meta.get("name") or "")
    return GroupInfo(
        key=group_key(namespace, name, upstream=upstream),
        namespace=namespace,
        name=name,
        uid=str(meta.get("uid") or ""),
        obj=obj,
        upstream=upstream,
    )


def parse_group(
    obj: Obj,
    *,
    default_timeout: float = DEFAULT_GANG_TIMEOUT_SECONDS,
    levels: Iterable[str] | None = None,
) -> GroupInfo:
    """Read our PodGroup; a malformed one comes back with `error` set (never raises).

    `levels`: the configured topology levels a topology annotation may name (None: any label).
    """
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    base = base_group(obj)
    try:
        min_member = spec.get("minMember", 1)
        timeout = spec.get("scheduleTimeoutSeconds", default_timeout)
        if not isinstance(min_member, int) or isinstance(min_member, bool) or min_member < 0:
            raise ValueError(f"spec.minMember: must be a non-negative integer, got {min_member!r}")
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
            raise ValueError(
                f"spec.scheduleTimeoutSeconds: must be a positive number, got {timeout!r}"
            )
        resources = resource_list(spec.get("minResources"), "spec.minResources") or None
        return replace(
            base,
            min_member=max(min_member, 1),
            min_resources=resources,
            timeout=float(timeout),
            topology=_topology(meta.get("annotations") or {}, levels),
        )
    except (ValueError, TypeError, AttributeError) as exc:
        return replace(base, error=f"invalid PodGroup {base.key}: {exc}")


def check_level(field: str, label: object, levels: Iterable[str] | None) -> str:
    """`label` as a topology level named at `field`; ValueError when it is empty or not one of
    the configured `levels` (None: any label)."""
    text = str(label or "").strip() if isinstance(label, str) else ""
    if not text:
        raise ValueError(f"{field}: must name a node label")
    if levels is not None and text not in set(levels):
        known = ", ".join(levels) or "none"
        raise ValueError(
            f"{field}: {text} is not a configured topology level (topologyLevels: {known})"
        )
    return text


def _topology(
    annotations: Mapping[str, Any], levels: Iterable[str] | None
) -> TopologyConstraint | None:
    for key, required in ((TOPOLOGY_REQUIRED, True), (TOPOLOGY_PREFERRED, False)):
        if key in annotations:
            field = f"metadata.annotations[{key}]"
            return TopologyConstraint(
                label=check_level(field, annotations[key], levels), required=required
            )
    return None


def not_found(gkey: ObjectKey) -> str:
    """Why a gang whose PodGroup does not exist waits, naming the PodGroup's API."""
    namespace, name = split_key(gkey)
    workload = workload_gang(gkey)
    if workload is not None:
        return f'Workload "{workload.workload_key}" ({WORKLOAD_API}) not found'
    if name.endswith(UPSTREAM_MARK):
        shown = object_key(namespace, name.removesuffix(UPSTREAM_MARK))
        return f'PodGroup "{shown}" ({UPSTREAM_GROUP}) not found'
    return f'pod group "{gkey}" not found'


def gang_priority(group: GroupInfo | None, members: Iterable[int]) -> int:
    """A gang's priority: its group's own (an upstream group naming a class), else the highest
    of its `members`' priorities."""
    if group is not None and group.priority is not None and not group.error:
        return group.priority
    return max(members)


# -- fields the upstream PodGroup and CompositePodGroup share (`upstream`, `composite`) --------
_PREEMPTION_POLICIES = ("PreemptLowerPriority", "Never")


def spec_topology(spec: Obj, levels: Iterable[str] | None) -> TopologyConstraint | None:
    """`spec.schedulingConstraints.topology[0].key` as a required constraint (None: none)."""
    present, key = topology_key(spec)
    if not present:
        return None
    return TopologyConstraint(label=check_level(TOPOLOGY_KEY_FIELD, key, levels), required=True)


def spec_priority(spec: Obj) -> int | None:
    """The group's priority when it names a class (the API server resolved `priority` for it);
    None otherwise: the members' own priorities count, as for our PodGroups."""
    if not spec.get("priorityClassName"):
        return None
    value = spec.get("priority")
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"spec.priority: must be an integer, got {value!r}")
    return value


def spec_preemption_policy(spec: Obj) -> str:
    """`spec.preemptionPolicy`, `PreemptLowerPriority` when unset."""
    policy = spec.get("preemptionPolicy") or "PreemptLowerPriority"
    if policy not in _PREEMPTION_POLICIES:
        raise ValueError(
            f"spec.preemptionPolicy: must be one of {', '.join(_PREEMPTION_POLICIES)}, "
            f"got {policy!r}"
        )
    return str(policy)


def parent_name(spec: Obj) -> str | None:
    """`spec.parentCompositePodGroupName` of a PodGroup or CompositePodGroup (None: no parent)."""
    parent = spec.get("parentCompositePodGroupName")
    if parent is None or parent == "":
        return None
    if not isinstance(parent, str):
        raise ValueError(f"spec.parentCompositePodGroupName: must be a name, got {parent!r}")
    return parent
