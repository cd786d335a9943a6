"""Per-kind rules on create, update and delete, dispatched by resource type."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tests.fakeapi import disruption, dra, pods, priority, workloads
from tests.fakeapi.errors import invalid
from tests.fakeapi.resources import ResourceType, crd_problems
from tests.fakeapi.store import DELETE, Delete, Obj, clone

Classes = Callable[[], Sequence[Obj]]
NOT_READY_TAINT = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
_NODE_INFO_FIELDS = [
    "architecture",
    "bootID",
    "containerRuntimeVersion",
    "kernelVersion",
    "kubeProxyVersion",
    "kubeletVersion",
    "machineID",
    "operatingSystem",
    "osImage",
    "systemUUID",
]


def empty_node_status() -> dict[str, Any]:
    """The status of a node object nobody has reported for (what a real server shows)."""
    return {
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
        "nodeInfo": dict.fromkeys(_NODE_INFO_FIELDS, ""),
    }


def _create_node(node: Obj) -> Obj:
    node["status"] = empty_node_status()
    taints = node.setdefault("spec", {}).setdefault("taints", [])
    if not any(
        t.get("key") == NOT_READY_TAINT["key"] and t.get("effect") == "NoSchedule" for t in taints
    ):
        taints.append(dict(NOT_READY_TAINT))
    return node


def _create_namespace(ns: Obj) -> Obj:
    name = ns["metadata"]["name"]
    ns["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
    ns.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    ns["status"] = {"phase": "Active"}
    return ns


def _create_crd(rt: ResourceType, crd: Obj) -> Obj:
    problems = crd_problems(crd)
    if problems:
        raise invalid(rt, crd["metadata"].get("name", ""), problems)
    spec = crd["spec"]
    names = dict(spec["names"])
    names.setdefault("singular", names["kind"].lower())
    names.setdefault("listKind", names["kind"] + "List")
    spec["names"] = names
    stored = [v["name"] for v in spec["versions"] if v.get("storage")]
    crd["status"] = {
        "acceptedNames": names,
        "storedVersions": stored,
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "reason": "NoConflicts",
                "message": "no conflicts found",
            },
            {
                "type": "Established",
                "status": "True",
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
            },
        ],
    }
    return crd


def _is(rt: ResourceType, group: str, plural: str) -> bool:
    return rt.builtin and rt.group == group and rt.plural == plural


def prepare_create(rt: ResourceType, obj: Obj, classes: Classes) -> Obj:
    """Kind-specific defaults and checks on a new object (status subresource already dropped);
    `classes` lists the stored PriorityClasses."""
    if _is(rt, priority.GROUP, "priorityclasses"):
        return priority.prepare_class_create(rt, obj, classes())
    if rt.builtin and rt.group == "" and rt.plural == "pods":
        return pods.prepare_create(obj)
    if _is(rt, disruption.GROUP, disruption.PLURAL):
        return disruption.prepare_create(rt, obj)
    if workloads.handles(rt):
        return workloads.prepare_create(rt, obj, classes())
    if rt.builtin and rt.group == "" and rt.plural == "nodes":
        return _create_node(obj)
    if rt.builtin and rt.group == "" and rt.plural == "namespaces":
        return _create_namespace(obj)
    if rt.builtin and rt.plural == "customresourcedefinitions":
        return _create_crd(rt, obj)
    if dra.is_dra(rt):
        return dra.prepare_create(rt, obj)
    return obj


def _status_update(rt: ResourceType, old: Obj, new: Obj, sub: str) -> Obj:
    """A write of the status subresource: only `status` (and the write's metadata) changes."""
    merged = clone(old)
    merged["status"] = new.get("status") or {}
    merged["metadata"]["resourceVersion"] = new["metadata"].get("resourceVersion")
    if "managedFields" in new["metadata"]:
        merged["metadata"]["managedFields"] = new["metadata"]["managedFields"]
    if _is(rt, disruption.GROUP, disruption.PLURAL):
        return disruption.check_update(rt, merged, sub)
    if dra.is_dra(rt):
        return dra.check_status_update(rt, old, merged)
    if _is(rt, "", "pods"):
        pods.check_status_update(merged)
    if workloads.handles(rt) and rt.plural == workloads.PODGROUPS:
        return workloads.check_status_update(rt, old, merged)
    return merged


def prepare_update(rt: ResourceType, old: Obj, new: Obj, sub: str, classes: Classes) -> Obj:
    """Carry over what this endpoint may not change; 422 for forbidden changes."""
    if sub == "status":
        return _status_update(rt, old, new, sub)
    if rt.status_subresource:
        if "status" in old:
            new["status"] = clone(old["status"])
        else:
            new.pop("status", None)
    if _is(rt, "", "pods"):
        priority.carry_over(old, new)
        pods.check_update(old, new)
    if _is(rt, priority.GROUP, "priorityclasses"):
        return priority.check_class_update(rt, old, new, classes())
    if _is(rt, disruption.GROUP, disruption.PLURAL):
        return disruption.check_update(rt, new, sub)
    if workloads.handles(rt):
        return workloads.check_update(rt, old, new)
    if dra.is_dra(rt):
        return dra.check_update(rt, old, new)
    if rt.builtin and rt.plural == "customresourcedefinitions":
        problems = crd_problems(new)
        if problems:
            raise invalid(rt, new["metadata"]["name"], problems)
    return new


def delete(
    rt: ResourceType, obj: Obj, grace: int | None, now_s: float, fmt: Callable[[float], str]
) -> Obj | Delete:
    """DELETE or the object left behind (Terminating pod, or finalizers still pending)."""
    if _is(rt, priority.GROUP, "priorityclasses"):
        priority.check_class_delete(rt, obj["metadata"]["name"])
    if rt.builtin and rt.group == "" and rt.plural == "pods":
        return pods.delete(obj, grace, now_s, fmt)
    if not obj["metadata"].get("finalizers"):
        return DELETE
    if obj["metadata"].get("deletionTimestamp"):
        return obj
    new = clone(obj)
    new["metadata"]["deletionTimestamp"] = fmt(now_s)
    new["metadata"]["deletionGracePeriodSeconds"] = 0
    return new


def finalized(obj: Obj) -> bool:
    """An object marked for deletion with no finalizers left (and, for a pod, no grace left)."""
    meta = obj["metadata"]
    if not meta.get("deletionTimestamp") or meta.get("finalizers"):
        return False
    return bool(meta.get("deletionGracePeriodSeconds", 0) == 0)
