"""RBAC from both ends: what the rendered install grants a ServiceAccount, and what a component
really asked the fake API server for (`FakeApiServer.authorization_checks`).

A permission is `(scope, apiGroup, resource[/subresource], verb)`; `scope` is `CLUSTER` for a
ClusterRoleBinding, or the namespace of a RoleBinding. A component's calls map to a namespace
scope only when every call of that kind stayed in the component's own namespace (its Lease);
anything it does across namespaces or on cluster-scoped objects needs the cluster scope.
"""

from __future__ import annotations

from collections.abc import Iterable

from tests.builders import manifests as checks
from tests.builders import render as r
from tests.fakeapi.authz import Attributes

CLUSTER = "cluster"

Permission = tuple[str, str, str, str]


def _role(objects: Iterable[r.Obj], ref: r.Obj, namespace: str | None) -> r.Obj:
    kind = ref["kind"]
    matches = [
        o
        for o in r.by_kind(objects, kind)
        if o["metadata"]["name"] == ref["name"]
        and (kind == "ClusterRole" or o["metadata"].get("namespace") == namespace)
    ]
    assert len(matches) == 1, f"{kind} {ref['name']} referenced but not rendered"
    role: r.Obj = matches[0]
    return role


def _binds(binding: r.Obj, sa_name: str, sa_namespace: str) -> bool:
    return any(
        s["kind"] == "ServiceAccount"
        and s["name"] == sa_name
        and s.get("namespace", binding["metadata"].get("namespace")) == sa_namespace
        for s in binding.get("subjects") or []
    )


def effective_permissions(
    objects: tuple[r.Obj, ...], sa_name: str, sa_namespace: str
) -> set[Permission]:
    """Everything the bindings in `objects` grant the ServiceAccount, by scope."""
    objects = tuple(objects)
    granted: set[Permission] = set()
    for binding in [*r.by_kind(objects, "ClusterRoleBinding"), *r.by_kind(objects, "RoleBinding")]:
        if not _binds(binding, sa_name, sa_namespace):
            continue
        namespace = binding["metadata"].get("namespace")
        role = _role(objects, binding["roleRef"], namespace)
        scope = CLUSTER if binding["kind"] == "ClusterRoleBinding" else namespace
        granted |= checks.expand_rules(role["rules"], str(scope))
    return granted


def used_permissions(
    calls: Iterable[Attributes], own_namespace: str, *other_namespaces: str
) -> set[Permission]:
    """The least set of permissions that allows every call, with the narrowest scope that does:
    one namespace when every call of a kind stayed in `own_namespace` or in one of
    `other_namespaces` (granted there by a RoleBinding, e.g. the scheduler's share Leases)."""
    narrow = {own_namespace, *other_namespaces}
    scopes: dict[tuple[str, str, str], set[str]] = {}
    for call in calls:
        key = (call.group, call.rbac_resource, call.verb)
        scopes.setdefault(key, set()).add(call.namespace)
    return {
        (_scope(namespaces, narrow), group, resource, verb)
        for (group, resource, verb), namespaces in scopes.items()
    }


def _scope(namespaces: set[str], narrow: set[str]) -> str:
    """The one namespace every call stayed in when a RoleBinding may grant it, else CLUSTER."""
    return next(iter(namespaces)) if len(namespaces) == 1 and namespaces <= narrow else CLUSTER


def service_account_namespace(objects: Iterable[r.Obj], sa_name: str) -> str:
    """The namespace the install puts the ServiceAccount `sa_name` in."""
    found = [o for o in r.by_kind(objects, "ServiceAccount") if o["metadata"]["name"] == sa_name]
    assert len(found) == 1, f"expected one ServiceAccount {sa_name}, found {len(found)}"
    namespace: str = found[0]["metadata"]["namespace"]
    return namespace


def describe(permissions: Iterable[Permission]) -> list[str]:
    """Sorted `scope group/resource verb` lines, for readable assertion messages."""
    return sorted(f"{s} {g or 'core'}/{res} {v}" for s, g, res, v in permissions)
