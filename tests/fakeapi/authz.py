"""What each request asks the authorizer, derived as kube-apiserver derives it.

A real server turns the URL and method into request attributes (its `RequestInfoResolver`) and asks
RBAC about (verb, apiGroup, resource, subresource, namespace, name) before it handles the request:

- `/api/<v>/...` is the core group, `/apis/<group>/<v>/...` a named group; anything shorter
  (`/api`, `/api/v1`, `/apis/<g>/<v>`, `/version`, `/healthz`) is a non-resource URL (None here:
  discovery is granted to every authenticated user by the default `system:discovery` roles);
- the verb comes from the method: GET is `get`, or `list` / `watch` (`watch=true`) without a
  name; POST `create`, PUT `update`, PATCH `patch`, DELETE `delete`, or `deletecollection`
  without a name; a `/watch/` path segment is `watch`;
- `/namespaces/<ns>/<resource>/...` is namespaced; `/namespaces/<ns>` and its `status` and
  `finalize` subresources address the Namespace object itself;
- a list or watch whose fieldSelector is `metadata.name=<name>` carries that name;
- the user is the bearer token as sent (`Authorization: Bearer <token>`; "" without one): the
  fake authenticates nothing, it only tells clients apart.

Two more checks happen while a request runs: a PUT or PATCH that creates its object (server-side
apply of an object that does not exist, answered 201) is also authorized as `create`; a write of a
ResourceClaim's status that changes `allocation` or `reservedFor` is also authorized on the
synthetic subresource `resourceclaims/binding` with the same verb (1.36+, granular status
authorization, on by default).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

_METHOD_VERBS = {
    "GET": "get",
    "POST": "create",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}
_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})


@dataclass(frozen=True, slots=True)
class Attributes:
    """One authorization check of a resource request."""

    verb: str
    group: str
    resource: str
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    user: str = ""  # the bearer token the client sent: the fake authenticates it as that user

    @property
    def rbac_resource(self) -> str:
        """The resource as an RBAC rule names it: `pods` or `pods/status`."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


def resolve(method: str, path: str, query: Mapping[str, str], user: str = "") -> Attributes | None:
    """The attributes RBAC sees for a request by `user`; None for a non-resource URL."""
    parts = [p for p in path.split("/") if p]
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return None
    group = ""
    if parts[0] == "apis":
        if len(parts) < 4:
            return None
        group, parts = parts[1], parts[2:]
    else:
        parts = parts[1:]
    rest = parts[1:]  # after the version
    verb = _METHOD_VERBS.get(method.upper(), "")
    if rest[0] == "watch" and len(rest) > 1:
        verb, rest = "watch", rest[1:]
    namespace, rest = _namespace(rest)
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if not name:
        verb, name = _collection_verb(verb, query)
    return Attributes(verb, group, resource, subresource, namespace, name, user)


def _namespace(rest: list[str]) -> tuple[str, list[str]]:
    if rest[0] != "namespaces" or len(rest) < 2:
        return "", rest
    if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
        return rest[1], rest[2:]
    return rest[1], rest


def _collection_verb(verb: str, query: Mapping[str, str]) -> tuple[str, str]:
    """A nameless GET is list or watch, a nameless DELETE deletecollection."""
    if verb == "delete":
        return "deletecollection", ""
    if verb != "get":
        return verb, ""
    watch = query.get("watch", "").lower() in ("true", "1")
    return ("watch" if watch else "list"), _selected_name(query.get("fieldSelector", ""))


def _selected_name(selector: str) -> str:
    """The name an exact `metadata.name=` (or `==`) field selector requires, else ""."""
    terms = [t.strip() for t in selector.split(",") if t.strip()]
    for term in terms:
        field, op, value = term.partition("==") if "==" in term else term.partition("=")
        if op and field.strip() == "metadata.name" and not field.endswith("!"):
            return value.strip()
    return ""


def created(check: Attributes) -> Attributes:
    """The extra `create` check of a PUT or PATCH that created its object."""
    return replace(check, verb="create")


_BINDING_FIELDS = ("allocation", "reservedFor")


def claim_binding(
    check: Attributes, body: object, stored: Mapping[str, object] | None
) -> Attributes | None:
    """The `resourceclaims/binding` check of a claim status write (`check`) with `body` (a full
    object for an update, the patch document for a patch) over the claim as `stored`."""
    if (check.group, check.resource, check.subresource) != (
        "resource.k8s.io",
        "resourceclaims",
        "status",
    ):
        return None
    if check.verb == "update" and isinstance(body, Mapping):
        new = body.get("status") or {}
        old = (stored or {}).get("status") or {}
        if not isinstance(new, Mapping) or not isinstance(old, Mapping):
            return None
        changed = any(new.get(f) != old.get(f) for f in _BINDING_FIELDS)
    elif check.verb == "patch":
        changed = any(f in str(body) for f in _BINDING_FIELDS)
    else:
        return None
    return replace(check, subresource="binding") if changed else None
