"""A small OpenAPI v3 (structural CRD schema) validator: the subset our NRT CRD uses.

Unknown fields fail (as `kubectl --validate=strict` reports them; the API server would prune
them). Supported: type (object, array, string, integer, boolean), properties, required, items,
pattern, anyOf of types, x-kubernetes-int-or-string. An object schema without `properties` is
free-form (like `metadata`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

CRD_PATH = Path(__file__).resolve().parents[2] / "daemonset" / "crds" / "noderesourcetopology.yaml"

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "boolean": (bool,),
}


def load_crd() -> dict[str, Any]:
    crd: dict[str, Any] = yaml.safe_load(CRD_PATH.read_text(encoding="utf-8"))
    return crd


def version_schema(crd: dict[str, Any], version: str) -> dict[str, Any]:
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            schema: dict[str, Any] = entry["schema"]["openAPIV3Schema"]
            return schema
    raise KeyError(version)


def _type_ok(value: Any, kind: str) -> bool:
    if kind in {"integer", "string", "array", "object"} and isinstance(value, bool):
        return False
    return isinstance(value, _TYPES[kind])


def problems(schema: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """Every way `value` breaks `schema`, as `path: reason` lines ([] when valid)."""
    where = path or "<root>"
    if schema.get("x-kubernetes-int-or-string"):
        if not (_type_ok(value, "integer") or _type_ok(value, "string")):
            return [f"{where}: expected an integer or a string, got {type(value).__name__}"]
        if (
            isinstance(value, str)
            and "pattern" in schema
            and not re.search(schema["pattern"], value)
        ):
            return [f"{where}: {value!r} does not match the quantity pattern"]
        return []
    kind = schema.get("type")
    if kind is not None and not _type_ok(value, kind):
        return [f"{where}: expected {kind}, got {type(value).__name__}"]
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        return [f"{where}: {value!r} does not match {schema['pattern']}"]
    if kind == "array":
        return [
            p
            for i, item in enumerate(value)
            for p in problems(schema.get("items", {}), item, f"{path}[{i}]")
        ]
    if kind == "object" and "properties" in schema:
        return _object_problems(schema, value, path)
    return []


def _object_problems(schema: dict[str, Any], value: dict[str, Any], path: str) -> list[str]:
    props: dict[str, Any] = schema["properties"]
    out = [
        f"{path}.{k}: required" if path else f"{k}: required"
        for k in schema.get("required", [])
        if k not in value
    ]
    for key, item in value.items():
        sub = f"{path}.{key}" if path else key
        if key not in props:
            out.append(f"{sub}: unknown field")
            continue
        out += problems(props[key], item, sub)
    return out
