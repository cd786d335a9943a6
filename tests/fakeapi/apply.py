"""Server-side apply, simplified: field ownership per Apply manager in `metadata.managedFields`.

Each Apply manager owns the leaf fields of the configuration it last applied (lists are atomic
leaves); each Update manager (create, PUT, non-apply PATCH; named by `fieldManager` or the
User-Agent's first word, as a real server does) owns the fields it last changed. Applying removes
the fields the manager applied before and no longer sends (unless another manager owns them), sets
every field it sends, and answers 409 Conflict when another manager owns a field it would change
to a different value, unless `force=true` (then that manager loses the field).
"""

from __future__ import annotations

from typing import Any

from tests.fakeapi.errors import ApiError
from tests.fakeapi.store import Obj, clone

Path = tuple[str, ...]
_MISSING = object()
_UNOWNED = {
    ("apiVersion",),
    ("kind",),
    ("metadata", "name"),
    ("metadata", "namespace"),
    ("metadata", "resourceVersion"),
    ("metadata", "managedFields"),
    ("metadata", "uid"),
    ("metadata", "creationTimestamp"),
    ("metadata", "generation"),
}


def field_paths(value: Any, prefix: Path = ()) -> set[Path]:
    """Leaf paths of a configuration: scalars, lists and empty maps."""
    if prefix in _UNOWNED:
        return set()
    if not isinstance(value, dict) or not value:
        return {prefix} if prefix else set()
    paths: set[Path] = set()
    for key, sub in value.items():
        paths |= field_paths(sub, (*prefix, key))
    return paths


def to_fields_v1(paths: set[Path]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for path in sorted(paths):
        node = root
        for part in path:
            node = node.setdefault(f"f:{part}", {})
    return root


def from_fields_v1(fields: Any, prefix: Path = ()) -> set[Path]:
    if not isinstance(fields, dict) or not any(k.startswith("f:") for k in fields):
        return {prefix} if prefix else set()
    paths: set[Path] = set()
    for key, sub in fields.items():
        if key.startswith("f:"):
            paths |= from_fields_v1(sub, (*prefix, key[2:]))
    return paths


def _get(obj: Any, path: Path) -> Any:
    for part in path:
        if not isinstance(obj, dict) or part not in obj:
            return _MISSING
        obj = obj[part]
    return obj


def _set(obj: Obj, path: Path, value: Any) -> None:
    for part in path[:-1]:
        if not isinstance(obj.get(part), dict):
            obj[part] = {}
        obj = obj[part]
    obj[path[-1]] = clone(value)


def _delete(obj: Obj, path: Path) -> None:
    parents = []
    node: Any = obj
    for part in path[:-1]:
        if not isinstance(node, dict) or part not in node:
            return
        parents.append((node, part))
        node = node[part]
    if isinstance(node, dict):
        node.pop(path[-1], None)
    for parent, part in reversed(parents[1:]):
        if parent[part] == {}:
            del parent[part]


Owned = list[tuple[Obj, set[Path]]]


def _ownership(entries: list[Obj], manager: str) -> tuple[set[Path], Owned]:
    """What `manager` applied before, and each other entry (Apply or Update) with what it owns."""
    mine: set[Path] = set()
    others: Owned = []
    for entry in entries:
        owned = from_fields_v1(entry.get("fieldsV1"))
        if entry.get("manager") == manager and entry.get("operation") == "Apply":
            mine = owned
        else:
            others.append((entry, owned))
    return mine, others


def _conflicts(existing: Obj, config: Obj, paths: set[Path], others: Owned) -> list[set[Path]]:
    """Per other entry: the fields it owns that this apply would change."""
    return [
        {p for p in paths & owned if _get(existing, p) != _get(config, p)} for _, owned in others
    ]


def _conflict_error(others: Owned, conflicts: list[set[Path]], api_version: str) -> ApiError:
    found = [
        f'conflict with "{entry.get("manager")}" using {api_version}: .{".".join(path)}'
        for (entry, _), paths in zip(others, conflicts, strict=True)
        for path in sorted(paths)
    ]
    plural = "s" if len(found) > 1 else ""
    return ApiError(409, f"Apply failed with {len(found)} conflict{plural}: " + "; ".join(found))


def _rebuilt(entries: Owned, losses: list[set[Path]]) -> list[Obj]:
    """Entries with `losses` removed from what they own; entries left owning nothing go."""
    result = []
    for (entry, owned), lost in zip(entries, losses, strict=True):
        left = owned - lost
        if left == owned:
            result.append(entry)
        elif left:
            result.append(dict(entry, fieldsV1=to_fields_v1(left)))
    return result


def apply(existing: Obj | None, config: Obj, manager: str, force: bool, now: str) -> Obj:
    """The object after `manager` applies `config` to `existing` (None: create)."""
    base = clone(existing) if existing is not None else {}
    meta = base.setdefault("metadata", {})
    entries = [e for e in meta.get("managedFields") or [] if isinstance(e, dict)]
    new_paths = field_paths(config)
    old_paths, others = _ownership(entries, manager)
    conflicts = _conflicts(base, config, new_paths, others)
    if any(conflicts) and not force:
        raise _conflict_error(others, conflicts, str(config.get("apiVersion", "")))
    kept_by_others: set[Path] = set().union(*(owned for _, owned in others))
    for path in old_paths - new_paths - kept_by_others:
        _delete(base, path)
    for path in new_paths:
        _set(base, path, _get(config, path))
    for key in ("apiVersion", "kind"):
        if key in config:
            base[key] = config[key]
    mine = [_entry(manager, "Apply", new_paths, config, now)] if new_paths else []
    meta["managedFields"] = mine + _rebuilt(others, conflicts)
    return base


def record_update(old: Obj | None, new: Obj, manager: str, now: str) -> None:
    """managedFields after a non-apply write (create, PUT, patch): `manager` owns its changes."""
    new_paths = field_paths(new)
    if old is None:
        changed, removed = new_paths, set()
    else:
        changed = {p for p in new_paths if _get(old, p) != _get(new, p)}
        removed = field_paths(old) - new_paths
    if not changed and not removed:
        return
    meta = new["metadata"]
    mine: set[Path] = set()
    others: Owned = []
    for entry in meta.get("managedFields") or []:
        owned = from_fields_v1(entry.get("fieldsV1"))
        if entry.get("manager") == manager and entry.get("operation") == "Update":
            mine = owned
        else:
            others.append((entry, owned))
    kept = _rebuilt(others, [changed | removed] * len(others))
    mine = (mine | changed) - removed
    meta["managedFields"] = kept + ([_entry(manager, "Update", mine, new, now)] if mine else [])


def _entry(manager: str, operation: str, paths: set[Path], obj: Obj, now: str) -> dict[str, Any]:
    return {
        "manager": manager,
        "operation": operation,
        "apiVersion": obj.get("apiVersion", ""),
        "time": now,
        "fieldsType": "FieldsV1",
        "fieldsV1": to_fields_v1(paths),
    }
