"""Custom resources against their CRD's structural schema: pruning and type checks.

As kube-apiserver does for `apiextensions.k8s.io/v1` CRDs: fields the schema does not declare are
dropped silently (unless `x-kubernetes-preserve-unknown-fields`), `null` in a non-nullable field is
dropped, a declared property that is absent gets its `default`, and a value of the wrong type, a
missing `required` field, a value outside `enum`, `pattern`, `minimum`, `maximum` or
`maxProperties`, or one for which an `x-kubernetes-validations` rule is not true makes the write 422
Invalid. `apiVersion`, `kind` and `metadata` are always kept.

Validation rules are CEL, evaluated on the pruned value as `self` by the `cel` package (Python
bindings of a CEL implementation whose `matches` is RE2-like, as cel-go's); a rule with fields
beyond `rule` and `message`, or one reading `oldSelf` (a transition rule), is not modelled
(NotImplementedError). The API server's cost estimate is not modelled either.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping
from typing import Any

import cel

Obj = dict[str, Any]
_ROOT_KEPT = ("apiVersion", "kind", "metadata")
_DROP = object()


def _type_problem(value: Any, schema: Mapping[str, Any], path: str) -> str | None:
    if schema.get("x-kubernetes-int-or-string"):
        ok = isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
        expected = "integer or string"
    else:
        expected = str(schema.get("type", ""))
        ok = {
            "": True,
            "object": isinstance(value, dict),
            "array": isinstance(value, list),
            "string": isinstance(value, str),
            "integer": isinstance(value, int) and not isinstance(value, bool),
            "number": isinstance(value, int | float) and not isinstance(value, bool),
            "boolean": isinstance(value, bool),
        }.get(expected, True)
    if ok:
        return None
    return f"{path}: Invalid value: {value!r}: {path} in body must be of type {expected}"


def _value_problems(value: Any, schema: Mapping[str, Any], path: str) -> list[str]:
    """enum, pattern, minimum and maximum."""
    problems = []
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(repr(v) for v in schema["enum"])
        problems.append(f"{path}: Unsupported value: {value!r}: supported values: {allowed}")
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        problems.append(
            f"{path}: Invalid value: {value!r}: {path} in body should match '{schema['pattern']}'"
        )
    if isinstance(value, dict) and len(value) > schema.get("maxProperties", len(value)):
        problems.append(
            f"{path}: Too many: {len(value)}: must have at most {schema['maxProperties']} items"
        )
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            problems.append(
                f"{path}: Invalid value: {value}: {path} in body should be greater than or equal "
                f"to {schema['minimum']}"
            )
        if "maximum" in schema and value > schema["maximum"]:
            problems.append(
                f"{path}: Invalid value: {value}: {path} in body should be less than or equal to "
                f"{schema['maximum']}"
            )
    return problems


def _walk(value: Any, schema: Mapping[str, Any], path: str, problems: list[str]) -> Any:
    if value is None:
        return None if schema.get("nullable") else _DROP
    problem = _type_problem(value, schema, path)
    if problem is not None:
        problems.append(problem)
        return value
    problems.extend(_value_problems(value, schema, path))
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        walked = [_walk(v, schema["items"], f"{path}[{n}]", problems) for n, v in enumerate(value)]
        value = [v for v in walked if v is not _DROP]
    elif isinstance(value, dict):
        value = _walk_object(value, schema, path, problems)
    problems.extend(_rule_problems(value, schema, path))
    return value


def _rules(schema: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    rules = list(schema.get("x-kubernetes-validations") or ())
    for rule in rules:
        if set(rule) - {"rule", "message"} or "oldSelf" in str(rule.get("rule")):
            raise NotImplementedError(f"validation rule not modelled by the fake: {rule}")
    return rules


def _rule_problems(value: Any, schema: Mapping[str, Any], path: str) -> list[str]:
    """The `x-kubernetes-validations` rules that are not true of `value`, as the API server
    words them (`<path>: Invalid value: "object": <message>`)."""
    problems = []
    for rule in _rules(schema):
        if cel.evaluate(rule["rule"], {"self": value}) is not True:
            kind = {dict: "object", list: "array"}.get(type(value), type(value).__name__)
            message = rule.get("message") or f"failed rule: {rule['rule']}"
            problems.append(f'{path}: Invalid value: "{kind}": {message}')
    return problems


def rule_problems(schema: Mapping[str, Any], path: str = "openAPIV3Schema") -> Iterator[str]:
    """Every validation rule under `schema` that does not compile (a CRD the API server
    refuses), with where it is."""
    for rule in _rules(schema):
        try:
            cel.compile(str(rule["rule"]))
        except ValueError as exc:
            yield f"{path}.x-kubernetes-validations: Invalid value: {rule['rule']!r}: {exc}"
    for key, sub in (schema.get("properties") or {}).items():
        yield from rule_problems(sub, f"{path}.properties[{key}]")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), Mapping):
            yield from rule_problems(schema[key], f"{path}.{key}")


def _walk_object(
    value: Mapping[str, Any], schema: Mapping[str, Any], path: str, problems: list[str]
) -> dict[str, Any]:
    props = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    keep_unknown = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    result: dict[str, Any] = {}
    for key, sub in value.items():
        where = f"{path}.{key}" if path else key
        if not path and key in _ROOT_KEPT:
            walked = sub
        elif key in props:
            walked = _walk(sub, props[key], where, problems)
        elif isinstance(extra, Mapping):
            walked = _walk(sub, extra, where, problems)
        elif keep_unknown or extra is True:
            walked = sub
        else:
            walked = _DROP
        if walked is not _DROP:
            result[key] = walked
    for key, sub in props.items():
        if key not in result and isinstance(sub, Mapping) and "default" in sub:
            where = f"{path}.{key}" if path else key
            result[key] = _walk(copy.deepcopy(sub["default"]), sub, where, problems)
    for key in schema.get("required") or []:
        if key not in result:
            problems.append(f"{path + '.' if path else ''}{key}: Required value")
    return result


def prune(obj: Obj, schema: Mapping[str, Any] | None) -> tuple[Obj, list[str]]:
    """The object with undeclared fields dropped, and what is invalid in it (empty when valid)."""
    if not schema:
        return obj, []
    problems: list[str] = []
    pruned = _walk_object(obj, schema, "", problems)
    return pruned, problems


def version_schemas(crd: Mapping[str, Any]) -> dict[str, Any]:
    """version name -> openAPIV3Schema, for the served versions of a CRD."""
    schemas: dict[str, Any] = {}
    for version in (crd.get("spec") or {}).get("versions") or []:
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        if version.get("served") and isinstance(schema, Mapping):
            schemas[version["name"]] = schema
    return schemas
