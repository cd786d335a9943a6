"""PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902), strategic merge patch."""

from __future__ import annotations

from typing import Any

from tests.fakeapi.errors import ApiError, bad_request
from tests.fakeapi.store import clone

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

# Lists that strategic merge patch merges by a key (Kubernetes' patchMergeKey tags), by field name.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "conditions": "type",
    "addresses": "type",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "schedulingGates": "name",
    "resourceClaims": "name",
    "topologySpreadConstraints": "topologyKey",
}
# Primitive lists that strategic merge patch merges as sets.
SET_LISTS = frozenset({"finalizers"})


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: maps merge recursively, `null` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return clone(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge(target: Any, patch: Any) -> Any:
    """Strategic merge patch for built-in types, with the `$patch`/`$retainKeys` directives."""
    if not isinstance(patch, dict) or not isinstance(target, dict):
        return _strip_directives(clone(patch))
    directive = patch.get("$patch")
    if directive == "replace":
        return _strip_directives(clone({k: v for k, v in patch.items() if k != "$patch"}))
    if directive == "delete":
        return None
    result = dict(target)
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$patch", "$retainKeys"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            result[field] = [v for v in result.get(field) or [] if v not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list):
            result[key] = _merge_list(key, result.get(key), value)
        else:
            merged = strategic_merge(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
    if isinstance(patch.get("$retainKeys"), list):
        result = {k: v for k, v in result.items() if k in patch["$retainKeys"]}
    return result


def _merge_list(field: str, current: Any, patch: list[Any]) -> list[Any]:
    current_list = current if isinstance(current, list) else []
    if field in SET_LISTS:
        return current_list + [v for v in patch if v not in current_list]
    key = MERGE_KEYS.get(field)
    if key is None:
        return [_strip_directives(clone(v)) for v in patch]
    if any(isinstance(i, dict) and i.get("$patch") == "replace" for i in patch):
        return [_strip_directives(clone(i)) for i in patch if i.get("$patch") != "replace"]
    result = list(current_list)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise bad_request(f"map: {item!r} does not contain declared merge key: {key}")
        index = next((n for n, cur in enumerate(result) if cur.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if index is not None:
                del result[index]
        elif index is None:
            result.append(_strip_directives(clone(item)))
        else:
            result[index] = strategic_merge(result[index], item)
    return result


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise _patch_error(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _patch_error(message: str) -> ApiError:
    return ApiError(
        422, f"the server rejected our request due to an error in our request: {message}"
    )


def _parent(doc: Any, parts: list[str], path: str) -> Any:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise _patch_error(f"doc is missing path: {path!r}")
    return node


def _get(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        return doc
    parent, last = _parent(doc, parts, path), parts[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent[int(last)]
    raise _patch_error(f"doc is missing path: {path!r}")


def _remove(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    parent, last = _parent(doc, parts, path), parts[-1]
    value = _get(doc, path)
    if isinstance(parent, dict):
        del parent[last]
    else:
        del parent[int(last)]
    return value


def _add(doc: Any, path: str, value: Any, replace: bool) -> Any:
    parts = _pointer(path)
    if not parts:
        return clone(value)
    if replace:
        _get(doc, path)
    parent, last = _parent(doc, parts, path), parts[-1]
    if isinstance(parent, dict):
        parent[last] = clone(value)
    elif isinstance(parent, list) and last == "-" and not replace:
        parent.append(clone(value))
    elif isinstance(parent, list) and last.isdigit() and int(last) <= len(parent):
        if replace:
            parent[int(last)] = clone(value)
        else:
            parent.insert(int(last), clone(value))
    else:
        raise _patch_error(f"unable to add to path {path!r}")
    return doc


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902 on a copy of `target`: add, remove, replace, move, copy, test."""
    if not isinstance(ops, list):
        raise bad_request("json patch body must be a list of operations")
    doc = clone(target)
    for op in ops:
        if not isinstance(op, dict) or "path" not in op:
            raise bad_request(f"invalid json patch operation {op!r}")
        kind, path = op.get("op"), op["path"]
        if kind in ("add", "replace"):
            doc = _add(doc, path, op.get("value"), replace=kind == "replace")
        elif kind == "remove":
            _remove(doc, path)
        elif kind in ("move", "copy"):
            value = _remove(doc, op["from"]) if kind == "move" else clone(_get(doc, op["from"]))
            doc = _add(doc, path, value, replace=False)
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise _patch_error(f"testing value {path!r} failed")
        else:
            raise bad_request(f"unknown json patch operation {kind!r}")
    return doc
