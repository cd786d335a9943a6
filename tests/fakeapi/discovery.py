"""URL parsing and the discovery documents (/version, /api, /apis, /api/v1, /apis/<g>/<v>)."""

from __future__ import annotations

import re
from typing import Any

from tests.fakeapi.objects import Ref
from tests.fakeapi.resources import Registry, ResourceType

VERSION = {
    "major": "1",
    "minor": "28",
    "gitVersion": "v1.28.0-gputopo-fake",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2023-08-15T00:00:00Z",
    "goVersion": "go1.20.7",
    "compiler": "gc",
    "platform": "linux/amd64",
}
_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


def parse_ref(registry: Registry, segments: list[str]) -> Ref | None:
    """The resource a path addresses, or None (404) when it addresses nothing served."""
    if len(segments) >= 2 and segments[0] == "api":
        group, version, rest = "", segments[1], segments[2:]
    elif len(segments) >= 3 and segments[0] == "apis":
        group, version, rest = segments[1], segments[2], segments[3:]
    else:
        return None
    if not rest:
        return None
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in ("status", "finalize"):
        namespace, rest = rest[1], rest[2:]
    if len(rest) > 3:
        return None
    rt = registry.lookup(group, version, rest[0])
    if rt is None or (namespace and not rt.namespaced):
        return None
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    if rt.namespaced and name and not namespace:
        return None
    if sub and not _has_sub(rt, sub):
        return None
    return Ref(rt, version, namespace, name, sub)


def _has_sub(rt: ResourceType, sub: str) -> bool:
    if sub == "status":
        return rt.status_subresource
    return sub in ("binding", "eviction") and rt.builtin and rt.group == "" and rt.plural == "pods"


def answer(registry: Registry, segments: list[str]) -> dict[str, Any] | None:
    """A discovery document for the path, or None when the path is not a discovery path."""
    if segments in (["healthz"], ["readyz"], ["livez"]):
        return {"kind": "Status", "apiVersion": "v1", "status": "Success", "message": "ok"}
    if segments == ["version"]:
        return dict(VERSION)
    if segments == ["api"]:
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
    if segments == ["apis"]:
        return _group_list(registry)
    if len(segments) == 2 and segments[0] == "api":
        return _resource_list(registry, "", segments[1])
    if len(segments) == 3 and segments[0] == "apis":
        return _resource_list(registry, segments[1], segments[2])
    return None


def _group_list(registry: Registry) -> dict[str, Any]:
    versions: dict[str, list[str]] = {}
    for rt in registry.all():
        if rt.group:
            known = versions.setdefault(rt.group, [])
            known.extend(v for v in rt.versions if v not in known)
    groups = []
    for group, names in sorted(versions.items()):
        entries = [
            {"groupVersion": f"{group}/{v}", "version": v}
            for v in sorted(names, key=_version_order)
        ]
        groups.append({"name": group, "versions": entries, "preferredVersion": entries[0]})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def _version_order(version: str) -> tuple[int, int, int, str]:
    """Kubernetes' version priority: GA before beta before alpha, the higher number first
    (`v1` before `v1beta1` before `v1alpha3`); anything else last, by name."""
    found = re.fullmatch(r"v(\d+)(?:(beta|alpha)(\d+))?", version)
    if found is None:
        return (3, 0, 0, version)
    stage = {None: 0, "beta": 1, "alpha": 2}[found.group(2)]
    return (stage, -int(found.group(1)), -int(found.group(3) or 0), version)


def _resource_list(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    served = [rt for rt in registry.all() if rt.group == group and version in rt.versions]
    if not served:
        return None
    resources: list[dict[str, Any]] = []
    for rt in sorted(served, key=lambda r: r.plural):
        base = {
            "name": rt.plural,
            "singularName": rt.kind.lower(),
            "namespaced": rt.namespaced,
            "kind": rt.kind,
        }
        resources.append(dict(base, verbs=_VERBS))
        if rt.status_subresource:
            resources.append(
                dict(base, name=f"{rt.plural}/status", verbs=["get", "patch", "update"])
            )
        if _has_sub(rt, "binding"):
            resources.append(dict(base, name="pods/binding", kind="Binding", verbs=["create"]))
            resources.append(
                dict(
                    base,
                    name="pods/eviction",
                    group="policy",
                    version="v1",
                    kind="Eviction",
                    verbs=["create"],
                )
            )
    group_version = rt.api_version(version)
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }
