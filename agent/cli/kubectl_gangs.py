"""The gangs `kubectl gputopo gangs` shows, built from the PodGroups and pods as listed (pure).

Both kinds of gang, one row each: our PodGroups (`scheduling.x-k8s.io/v1alpha1`, members named by
the `scheduling.x-k8s.io/pod-group` label, or the legacy `pod-group.scheduling.sigs.k8s.io`) and
upstream ones (`scheduling.k8s.io`, in the version the server serves; members named by
`spec.schedulingGroup.podGroupName`), or on 1.35 the pod groups of `v1alpha1` Workloads, one row
per pod group and replica key (`<workload>/<podGroup>[/<replica key>]`, members named by
`spec.workloadRef`). The fields are read as the scheduler reads them
(scheduler/runtime/cluster/groups.py, upstream.py; the upstream unions through
agent/podgroup.py, which both use), without importing the scheduler (numpy): the base install
runs this.

MIN: `minMember` (ours, default 1) or `gang.minCount`; `-` for a `basic` group. PODS: the pods
naming the group; BOUND: those on a node and not Failed (what the scheduler counts as holding a
place); PENDING: those on no node and not finished. TOPOLOGY: the required topology key (the
`gputopo.io/topology-required` annotation, the upstream `schedulingConstraints.topology[0].key`),
a preferred one followed by ` (preferred)`. STATUS: `invalid: <field>: <why>` for a group the
scheduler cannot use, `PodGroup not found` for pods naming a group that does not exist, else the
reason of the upstream `PodGroupInitiallyScheduled` condition (`PodGroupScheduled` in
`v1alpha2`) or our PodGroup's `status.phase`, else `-` (no status written yet). `-o json|yaml`
also gives an upstream PodGroup's `parent` (its `parentCompositePodGroupName`: the tree of
CompositePodGroups it is scheduled with).

Where the server serves CompositePodGroups (`scheduling.k8s.io/v1alpha3`, 1.37 alpha), each is a
row too, its API `compositepodgroups.scheduling.k8s.io` (`kubectl get` takes that name): MIN its
`gang.minGroupCount` (`-` for `basic`: one child); PODS, BOUND and PENDING those of every PodGroup
below it; TOPOLOGY its own key; STATUS read from the pods bound, as the scheduler counts a tree
(kube-scheduler writes no status on it): `Satisfied` when enough of its children are (a PodGroup
with `minCount` pods bound, a CompositePodGroup satisfied), else `Waiting (<satisfied> of
<needed> groups)`. Nothing here raises on a malformed object.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.podgroup import TOPOLOGY_KEY_FIELD, topology_key, union_member

__all__ = [
    "COMPOSITE_API",
    "HEADER",
    "NOT_FOUND",
    "OURS",
    "POD_GROUP_LABELS",
    "UPSTREAM",
    "WORKLOAD_API",
    "Gang",
    "build_gangs",
    "gang_json",
    "gang_row",
]

Obj = Mapping[str, Any]
OURS = "scheduling.x-k8s.io"
UPSTREAM = "scheduling.k8s.io"
WORKLOAD_API = f"{UPSTREAM}/v1alpha1"  # Kubernetes 1.35: Workloads named by spec.workloadRef
POD_GROUP_LABELS = ("scheduling.x-k8s.io/pod-group", "pod-group.scheduling.sigs.k8s.io")
TOPOLOGY_REQUIRED = "gputopo.io/topology-required"
TOPOLOGY_PREFERRED = "gputopo.io/topology-preferred"
CONDITION_SCHEDULED = "PodGroupScheduled"  # v1alpha2 (Kubernetes 1.36)
CONDITION_INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"  # v1alpha3, v1beta1 (1.37)
NOT_FOUND = "PodGroup not found"
COMPOSITE_API = f"compositepodgroups.{UPSTREAM}"  # a tree's group: as `kubectl get` names it
_COMPOSITE = "composite"  # the row key's API part for a CompositePodGroup
HEADER = ("NAMESPACE", "NAME", "API", "MIN", "PODS", "BOUND", "PENDING", "TOPOLOGY", "STATUS")


@dataclass(slots=True, kw_only=True)
class Gang:
    """One gang; `min_count` None for a basic group (and for one not read: `problem` says why)."""

    namespace: str
    name: str
    api: str
    min_count: int | None = None
    basic: bool = False
    topology: str | None = None
    topology_required: bool = True
    status: str | None = None
    problem: str | None = None
    pods: int = 0
    bound: int = 0
    pending: int = 0
    members: list[str] = field(default_factory=list)
    parent: str | None = None
    composite: bool = False

    @property
    def upstream(self) -> bool:
        return self.api.startswith(UPSTREAM)


def _map(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def _identity(obj: Obj) -> tuple[str, str]:
    meta = _map(obj.get("metadata"))
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")


def _positive(value: Any, where: str, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        kind = "a positive" if minimum else "a non-negative"
        raise ValueError(f"{where}: must be {kind} integer, got {value!r}")
    return value


def _label(value: Any, where: str) -> str:
    text = value.strip() if isinstance(value, str) else ""
    if not text:
        raise ValueError(f"{where}: must name a node label")
    return text


def our_gang(obj: Obj) -> Gang:
    """Our PodGroup (`scheduling.x-k8s.io/v1alpha1`) as a gang."""
    namespace, name = _identity(obj)
    gang = Gang(namespace=namespace, name=name, api=OURS)
    gang.status = str(_map(obj.get("status")).get("phase") or "") or None
    try:
        spec = obj.get("spec") or {}
        if not isinstance(spec, Mapping):
            raise ValueError(f"spec: must be an object, got {spec!r}")
        gang.min_count = max(_positive(spec.get("minMember", 1), "spec.minMember", 0), 1)
        annotations = _map(_map(obj.get("metadata")).get("annotations"))
        for key, required in ((TOPOLOGY_REQUIRED, True), (TOPOLOGY_PREFERRED, False)):
            if key in annotations:
                where = f"metadata.annotations[{key}]"
                gang.topology = _label(annotations[key], where)
                gang.topology_required = required
                break
    except ValueError as exc:
        gang.min_count, gang.problem = None, str(exc)
    return gang


def _upstream_topology(spec: Obj) -> str | None:
    present, key = topology_key(spec)
    return _label(key, TOPOLOGY_KEY_FIELD) if present else None


def condition_for(api_version: str) -> str:
    """The condition kube-scheduler writes on an upstream PodGroup of `api_version`."""
    return (
        CONDITION_SCHEDULED if api_version.endswith("/v1alpha2") else CONDITION_INITIALLY_SCHEDULED
    )


def upstream_gang(obj: Obj, api_version: str | None) -> Gang:
    """An upstream PodGroup as a gang; `api_version`: the version it was listed in (a list's
    items need not carry their own)."""
    namespace, name = _identity(obj)
    api_version = api_version or str(obj.get("apiVersion") or UPSTREAM)
    gang = Gang(namespace=namespace, name=name, api=api_version)
    kind = condition_for(api_version)
    for condition in _map(obj.get("status")).get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            gang.status = str(condition.get("reason") or condition.get("status") or "") or None
    _read_tree_group(gang, obj, "minCount")
    return gang


def composite_gang(obj: Obj) -> Gang:
    """A CompositePodGroup as a row: its policy, topology and parent (its pods are counted from
    the PodGroups below it, `_tree_counts`)."""
    namespace, name = _identity(obj)
    gang = Gang(namespace=namespace, name=name, api=COMPOSITE_API, composite=True)
    _read_tree_group(gang, obj, "minGroupCount")
    return gang


def _read_tree_group(gang: Gang, obj: Obj, minimum: str) -> None:
    """What an upstream PodGroup or a CompositePodGroup says alike: its parent, topology and
    policy (`gang.<minimum>` its minimum, `basic` none); `problem` names a malformed field."""
    try:
        spec = obj.get("spec") or {}
        if not isinstance(spec, Mapping):
            raise ValueError(f"spec: must be an object, got {spec!r}")
        parent = spec.get("parentCompositePodGroupName")
        gang.parent = parent if isinstance(parent, str) and parent else None
        policy = union_member(spec, "schedulingPolicy", ("basic", "gang"))
        gang.topology = _upstream_topology(spec)
        if policy == "basic":  # a PodGroup's pods one by one, in the domain of those placed
            gang.basic = True
        else:
            count = _map(spec["schedulingPolicy"]["gang"]).get(minimum)
            gang.min_count = _positive(count, f"spec.schedulingPolicy.gang.{minimum}", 1)
    except (ValueError, KeyError, TypeError) as exc:
        gang.min_count, gang.problem = None, str(exc)


def workload_gangs(obj: Obj) -> list[Gang]:
    """A 1.35 Workload's pod groups, a gang each, named `<workload>/<podGroup>` (the scheduler
    reads each replica key's pods as a gang of its own: `build_gangs` adds a row per key)."""
    namespace, name = _identity(obj)
    entries = _map(obj.get("spec")).get("podGroups")
    if not isinstance(entries, list) or not entries:
        problem = "spec.podGroups: must be a list of pod groups"
        return [Gang(namespace=namespace, name=name, api=WORKLOAD_API, problem=problem)]
    gangs = []
    for i, entry in enumerate(entries):
        group = _map(entry).get("name")
        gang = Gang(namespace=namespace, name=f"{name}/{group}", api=WORKLOAD_API)
        at = f"spec.podGroups[{i}]"
        try:
            if union_member(_map(entry), "policy", ("basic", "gang"), at=at) == "basic":
                gang.basic = True
            else:
                count = _map(_map(entry)["policy"]["gang"]).get("minCount")
                gang.min_count = _positive(count, f"{at}.policy.gang.minCount", 1)
        except (ValueError, KeyError, TypeError) as exc:
            gang.problem = str(exc)
        gangs.append(gang)
    return gangs


def pod_groups(pod: Obj) -> list[tuple[str, str]]:
    """The groups a pod names: (`OURS`, `UPSTREAM` or `WORKLOAD_API`, name); each when it names
    several (the scheduler refuses such a pod, each row counts it). A 1.35 `spec.workloadRef` is
    named `<workload>/<podGroup>[/<replica key>]`."""
    meta, spec = _map(pod.get("metadata")), _map(pod.get("spec"))
    labels = _map(meta.get("labels"))
    named = [(OURS, str(labels[k])) for k in POD_GROUP_LABELS if labels.get(k)][:1]
    upstream = _map(spec.get("schedulingGroup")).get("podGroupName")
    if isinstance(upstream, str) and upstream:
        named.append((UPSTREAM, upstream))
    ref = _map(spec.get("workloadRef"))
    parts = [ref.get("name"), ref.get("podGroup"), ref.get("podGroupReplicaKey")]
    if ref:
        named.append((WORKLOAD_API, "/".join(str(p) for p in parts if p)))
    return named


def _count(gang: Gang, pod: Obj) -> None:
    spec, status = _map(pod.get("spec")), _map(pod.get("status"))
    phase = status.get("phase")
    gang.pods += 1
    gang.members.append(_identity(pod)[1])
    if spec.get("nodeName"):
        gang.bound += phase != "Failed"
    else:
        gang.pending += phase not in ("Succeeded", "Failed")


def build_gangs(
    ours: Iterable[Obj] | None,
    upstream: Iterable[Obj] | None,
    upstream_api: str | None,
    pods: Iterable[Obj],
    composites: Iterable[Obj] | None = None,
) -> list[Gang]:
    """Every gang, sorted by namespace, name and API: the listed PodGroups (None: that API is
    not served), with their member pods counted, and a `PodGroup not found` row for pods that
    name a group not listed; then a row per listed CompositePodGroup, counted from its tree."""
    gangs: dict[tuple[str, str, str], Gang] = {}
    for obj in ours or ():
        gang = our_gang(obj)
        gangs[(gang.namespace, gang.name, OURS)] = gang
    for obj in upstream or ():
        if upstream_api == WORKLOAD_API:  # 1.35: Workloads, not PodGroups, were listed
            for gang in workload_gangs(obj):
                gangs[(gang.namespace, gang.name, WORKLOAD_API)] = gang
            continue
        gang = upstream_gang(obj, upstream_api)
        gangs[(gang.namespace, gang.name, UPSTREAM)] = gang
    templates = dict(gangs)
    for pod in pods:
        namespace = _identity(pod)[0]
        for api, name in pod_groups(pod):
            key = (namespace, name, api)
            if key not in gangs:
                gangs[key] = _replica(templates, key)
            _count(gangs[key], pod)
    replicated = {_template_key(k) for k in gangs if k not in templates}
    rows = {k: g for k, g in gangs.items() if k not in replicated or g.pods}
    for obj in composites or ():
        gang = composite_gang(obj)
        rows[(gang.namespace, gang.name, _COMPOSITE)] = gang
    _tree_counts(rows)
    return [rows[k] for k in sorted(rows)]


def _tree_counts(rows: Mapping[tuple[str, str, str], Gang]) -> None:
    """Each CompositePodGroup row's pods (those of the PodGroups below it) and its status."""
    children: dict[tuple[str, str], list[Gang]] = {}
    for gang in rows.values():
        if gang.parent is not None and (gang.composite or gang.upstream):
            children.setdefault((gang.namespace, gang.parent), []).append(gang)

    def satisfied(gang: Gang, seen: frozenset[str]) -> bool:
        """Counts `gang`'s pods (a composite's: its tree's) and says whether it is satisfied;
        a cycle (`seen`) counts nothing again."""
        if not gang.composite:
            return gang.bound >= (1 if gang.basic else gang.min_count or 1)
        below = [c for c in children.get((gang.namespace, gang.name), []) if c.name not in seen]
        done = sum(satisfied(c, seen | {gang.name}) for c in below)
        gang.pods = sum(c.pods for c in below)
        gang.bound = sum(c.bound for c in below)
        gang.pending = sum(c.pending for c in below)
        need = 1 if gang.basic else gang.min_count or 1
        if gang.problem is None:
            gang.status = "Satisfied" if done >= need else f"Waiting ({done} of {need} groups)"
        return done >= need

    for gang in rows.values():
        if gang.composite:
            satisfied(gang, frozenset())


def _template_key(key: tuple[str, str, str]) -> tuple[str, str, str]:
    """A 1.35 replica's row key -> its pod group's (`w/g/0` -> `w/g`); other keys unchanged."""
    namespace, name, api = key
    return (namespace, "/".join(name.split("/")[:2]), api) if api == WORKLOAD_API else key


def _replica(templates: Mapping[tuple[str, str, str], Gang], key: tuple[str, str, str]) -> Gang:
    """The row of a gang no listed object names: a 1.35 replica key of a listed pod group (its
    policy), else `NOT_FOUND`."""
    namespace, name, api = key
    template = templates.get(_template_key(key))
    if template is None or template.name == name:
        return Gang(namespace=namespace, name=name, api=api, problem=NOT_FOUND)
    return Gang(
        namespace=namespace,
        name=name,
        api=api,
        min_count=template.min_count,
        basic=template.basic,
        problem=template.problem,
    )


def _status(gang: Gang) -> str:
    if gang.problem == NOT_FOUND:
        return NOT_FOUND
    if gang.problem is not None:
        return f"invalid: {gang.problem}"
    return gang.status or "-"


def _topology(gang: Gang) -> str:
    if gang.topology is None:
        return "-"
    return gang.topology if gang.topology_required else f"{gang.topology} (preferred)"


def gang_row(gang: Gang) -> tuple[str, ...]:
    minimum = "?" if gang.min_count is None else str(gang.min_count)
    return (
        gang.namespace,
        gang.name,
        gang.api,
        "-" if gang.basic else minimum,
        str(gang.pods),
        str(gang.bound),
        str(gang.pending),
        _topology(gang),
        _status(gang),
    )


def gang_json(gang: Gang) -> dict[str, Any]:
    """One gang as `-o json|yaml` lists it."""
    topology = None
    if gang.topology is not None:
        topology = {"key": gang.topology, "required": gang.topology_required}
    return {
        "namespace": gang.namespace,
        "name": gang.name,
        "api": gang.api,
        "minCount": gang.min_count,
        "basic": gang.basic,
        "pods": gang.pods,
        "bound": gang.bound,
        "pending": gang.pending,
        "members": sorted(gang.members),
        "topology": topology,
        "status": gang.status,
        "problem": gang.problem,
        "parent": gang.parent,
    }
