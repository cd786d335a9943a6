"""Server-side apply, simplified: field ownership per Apply manager in `metadata.managedFields`.

Each manager owns the leaf fields of the configuration it last applied (lists are atomic leaves).
Applying removes the fields the manager applied before and no longer sends (unless someone else owns
them), sets every field it sends, and answers 409 Conflict when another Apply manager owns a field
it would change, unless `force=true`. Update (PUT/merge patch) managers are not tracked.
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


def _conflicts(
    existing: Obj, config: Obj, mine: set[Path], others: list[tuple[str, set[Path]]]
) -> list[str]:
    found = []
    for manager, owned in others:
        for path in sorted(mine & owned):
            if _get(existing, path) != _get(config, path):
                found.append(f'conflict with "{manager}": .{".".join(path)}')
    return found


def _ownership(entries: list[Obj], manager: str) -> tuple[set[Path], list[tuple[str, set[Path]]]]:
    """What `manager` applied before, and what every other Apply manager owns."""
    mine: set[Path] = set()
    others: list[tuple[str, set[Path]]] = []
    for entry in entries:
        if entry.get("operation") != "Apply":
            continue
        owned = from_fields_v1(entry.get("fieldsV1"))
        if entry.get("manager") == manager:
            mine = owned
        else:
            others.append((str(entry.get("manager")), owned))
    return mine, others


def _new_entries(
    entries: list[Obj], manager: str, paths: set[Path], config: Obj, now: str
) -> list[Obj]:
    """managedFields after the apply: ours replaced, fields we took removed from other managers."""
    result = [_entry(manager, paths, config, now)] if paths else []
    for entry in entries:
        if entry.get("operation") != "Apply":
            result.append(entry)
            continue
        if entry.get("manager") == manager:
            continue
        owned = from_fields_v1(entry.get("fieldsV1")) - paths
        if owned:
            result.append(dict(entry, fieldsV1=to_fields_v1(owned)))
    return result


def apply(existing: Obj | None, config: Obj, manager: str, force: bool, now: str) -> Obj:
    """The object after `manager` applies `config` to `existing` (None: create)."""
    base = clone(existing) if existing is not None else {}
    meta = base.setdefault("metadata", {})
    entries = [e for e in meta.get("managedFields") or [] if isinstance(e, dict)]
    new_paths = field_paths(config)
    old_paths, others = _ownership(entries, manager)
    conflicts = _conflicts(base, config, new_paths, others)
    if conflicts and not force:
        message = f"Apply failed with {len(conflicts)} conflict(s): " + ", ".join(conflicts)
        raise ApiError(409, message)
    kept_by_others: set[Path] = set().union(*(owned for _, owned in others))
    for path in old_paths - new_paths - kept_by_others:
        _delete(base, path)
    for path in new_paths:
        _set(base, path, _get(config, path))
    for key in ("apiVersion", "kind"):
        if key in config:
            base[key] = config[key]
    meta["managedFields"] = _new_entries(entries, manager, new_paths, config, now)
    return base


def _entry(manager: str, paths: set[Path], config: Obj, now: str) -> dict[str, Any]:
    return {
        "manager": manager,
        "operation": "Apply",
        "apiVersion": config.get("apiVersion", ""),
        "time": now,
        "fieldsType": "FieldsV1",
        "fieldsV1": to_fields_v1(paths),
    }
