"""CompositePodGroups (`scheduling.k8s.io/v1alpha3`, Kubernetes 1.37 alpha, the
`CompositePodGroup` gate): a group of groups, read once when it arrives, and the tree of groups
a root holds, as kube-scheduler 1.37.2 schedules it (`gangscheduling.go`,
`schedule_one_podgroup.go`).

A PodGroup or CompositePodGroup names its parent in `spec.parentCompositePodGroupName` (same
namespace). A root (no parent) and everything below it is one scheduling unit. A PodGroup is
satisfied with `minCount` pods (a `basic` one with 1); a CompositePodGroup with
`schedulingPolicy.gang.minGroupCount` children satisfied (a `basic` one with 1). A
CompositePodGroup of `disruptionMode: all` is evicted whole: every running pod below it is one
victim unit (`whole`; the topmost such one above a PodGroup holds its pods). The tree is
held back until the root would be satisfied by the pods that exist, and placed all or nothing:
its pods bind only when the root is satisfied by the pods placed. Children are tried in order of
creation, then name, as kube-scheduler orders them. A topology constraint holds at its level: a
PodGroup's pods, or a CompositePodGroup's whole subtree, in one domain.

Read here, pure: `parse_composite` (never raises: `error` names the object and the field),
`build_tree` (the tree under a root, a placement `Tree` with `satisfied` and `minimum`, from
the groups and composites the cache holds, with the layout errors kube's API documents: a
cycle, a depth over 4, a missing parent).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from agent.objkey import DEFAULT_NAMESPACE, ObjectKey, object_key
from agent.podgroup import union_member
from scheduler.placement import TopologyConstraint, Tree
from scheduler.runtime.cluster.groups import (
    GroupInfo,
    parent_name,
    spec_preemption_policy,
    spec_priority,
    spec_topology,
)

__all__ = [
    "COMPOSITE_MARK",
    "MAX_DEPTH",
    "BuiltTree",
    "CompositeInfo",
    "build_tree",
    "composite_key",
    "parse_composite",
    "root_of",
]

Obj = Mapping[str, Any]
COMPOSITE_MARK = "@compositepodgroups.scheduling.k8s.io"
"""Appended to a CompositePodGroup's name in its key (no object name holds an `@`)."""
MAX_DEPTH = 4  # levels of CompositePodGroups above a PodGroup (kube's documented layout limit)


def composite_key(namespace: str, name: str) -> ObjectKey:
    """The key of CompositePodGroup `namespace/name` (also its tree's gang key, for a root)."""
    return object_key(namespace, name + COMPOSITE_MARK)


@dataclass(frozen=True, slots=True, kw_only=True)
class CompositeInfo:
    """A CompositePodGroup: `parent` its parent's name (None: a root), `min_groups` the children
    that must be satisfied (`basic`: 1), `created` its creationTimestamp (children's order)."""

    key: ObjectKey
    namespace: str
    name: str
    uid: str
    obj: Obj
    created: str = ""
    parent: str | None = None
    min_groups: int = 1
    basic: bool = False
    topology: TopologyConstraint | None = None
    priority: int | None = None
    never_preempts: bool = False
    whole: bool = False
    error: str | None = None

    @property
    def title(self) -> str:
        return f"CompositePodGroup {object_key(self.namespace, self.name)} (scheduling.k8s.io)"


def parse_composite(obj: Obj, *, levels: Iterable[str] | None = None) -> CompositeInfo:
    """Read a CompositePodGroup; a malformed or unsupported one comes back with `error` naming
    the object and the field (never raises). `levels`: as `groups.parse_group`'s."""
    meta = obj.get("metadata") or {}
    namespace = str(meta.get("namespace") or DEFAULT_NAMESPACE)
    name = str(meta.get("name") or "")
    base = CompositeInfo(
        key=composite_key(namespace, name),
        namespace=namespace,
        name=name,
        uid=str(meta.get("uid") or ""),
        obj=obj,
        created=str(meta.get("creationTimestamp") or ""),
    )
    spec = obj.get("spec")
    try:
        if not isinstance(spec, Mapping):
            raise ValueError(f"spec: must be an object, got {spec!r}")
        policy = union_member(spec, "schedulingPolicy", ("basic", "gang"))
        mode = union_member(spec, "disruptionMode", ("single", "all"), default="single")
        return replace(
            base,
            parent=parent_name(spec),
            min_groups=_min_groups(spec) if policy == "gang" else 1,
            basic=policy == "basic",
            topology=spec_topology(spec, levels),
            priority=spec_priority(spec),
            never_preempts=spec_preemption_policy(spec) == "Never",
            whole=mode == "all",
        )
    except (ValueError, TypeError, AttributeError) as exc:
        return replace(base, error=f"invalid {base.title}: {exc}")


def _min_groups(spec: Obj) -> int:
    gang = spec["schedulingPolicy"]["gang"]
    count = gang.get("minGroupCount") if isinstance(gang, Mapping) else None
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(
            f"spec.schedulingPolicy.gang.minGroupCount: must be a positive integer, got {count!r}"
        )
    return count


@dataclass(frozen=True, slots=True)
class BuiltTree:
    """`build_tree`'s answer: the tree under the root, or why it cannot be scheduled."""

    root: CompositeInfo | None
    tree: Tree | None
    error: str = ""


def root_of(
    composites: Mapping[ObjectKey, CompositeInfo], namespace: str, parent: str
) -> tuple[CompositeInfo | None, str]:
    """The root above a group whose parent is `parent`: (root, "") or (None, why not)."""
    seen: list[str] = []
    name = parent
    while True:
        if name in seen:
            path = " -> ".join([*seen, name])
            return None, f"CompositePodGroups of {namespace} form a cycle ({path})"
        seen.append(name)
        if len(seen) > MAX_DEPTH:
            return None, (
                f"CompositePodGroup {object_key(namespace, parent)}: more than {MAX_DEPTH} levels "
                "of CompositePodGroups above a PodGroup"
            )
        found = composites.get(composite_key(namespace, name))
        if found is None:
            return None, f'CompositePodGroup "{object_key(namespace, name)}" not found'
        if found.parent is None:
            return found, ""
        name = found.parent


def build_tree(
    root: CompositeInfo,
    composites: Mapping[ObjectKey, CompositeInfo],
    groups: Mapping[ObjectKey, GroupInfo],
    children: Mapping[ObjectKey, Iterable[ObjectKey]],
) -> BuiltTree:
    """The tree under `root`: `children` maps a CompositePodGroup's key to its children's keys
    (PodGroups' gang keys, CompositePodGroups' keys). An error anywhere in it (a malformed group)
    makes the whole tree wait, named."""

    def build(info: CompositeInfo, depth: int) -> Tree:
        if info.error:
            raise ValueError(info.error)
        if depth > MAX_DEPTH:
            raise ValueError(f"{info.title}: deeper than {MAX_DEPTH} levels")
        kids: list[tuple[str, str, Tree]] = []
        for key in children.get(info.key, ()):
            group = groups.get(key)
            if group is not None:
                if group.error:
                    raise ValueError(group.error)
                created = str((group.obj.get("metadata") or {}).get("creationTimestamp") or "")
                leaf = Tree(key, group.min_member, leaf=True, topology=group.topology)
                kids.append((created, group.name, leaf))
                continue
            composite = composites.get(key)
            if composite is not None:
                kids.append((composite.created, composite.name, build(composite, depth + 1)))
        kids.sort(key=lambda k: (k[0], k[1]))
        return Tree(info.key, info.min_groups, tuple(k[2] for k in kids), topology=info.topology)

    try:
        return BuiltTree(root, build(root, 1))
    except ValueError as exc:
        return BuiltTree(root, None, str(exc))
