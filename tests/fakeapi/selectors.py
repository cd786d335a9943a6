"""Label and field selectors, parsed as kube-apiserver does (400 BadRequest when malformed)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tests.fakeapi.errors import bad_request
from tests.fakeapi.resources import ResourceType

Matcher = Callable[[Mapping[str, Any]], bool]
_KEY = re.compile(
    r"^([a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?/)?[a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?$"
)
_SET_OP = re.compile(r"^(?P<key>\S+)\s+(?P<op>in|notin)\s*\((?P<values>[^)]*)\)$")
_EQ_OP = re.compile(r"^(?P<key>[^=!\s]+)\s*(?P<op>==|=|!=)\s*(?P<value>\S*)$")


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    parts.append("".join(current).strip())
    return [p for p in parts if p]


def _check_key(key: str, selector: str) -> str:
    if not _KEY.match(key):
        raise bad_request(f"unable to parse requirement: invalid label key {key!r} in {selector!r}")
    return key


def _label_requirement(req: str, selector: str) -> Callable[[Mapping[str, str]], bool]:
    if m := _SET_OP.match(req):
        key = _check_key(m["key"], selector)
        values = {v.strip() for v in m["values"].split(",") if v.strip()}
        if m["op"] == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if m := _EQ_OP.match(req):
        key, value = _check_key(m["key"], selector), m["value"]
        if m["op"] == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if req.startswith("!"):
        key = _check_key(req[1:].strip(), selector)
        return lambda labels: key not in labels
    key = _check_key(req, selector)
    return lambda labels: key in labels


def label_matcher(selector: str | None) -> Matcher:
    """A predicate on whole objects for a `labelSelector` query value."""
    if not selector:
        return lambda obj: True
    reqs = [_label_requirement(r, selector) for r in _split_top(selector)]

    def match(obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(r(labels) for r in reqs)

    return match


def _path(label: str) -> tuple[str, ...]:
    return tuple(("source.component" if label == "source" else label).split("."))


def _value_at(obj: Mapping[str, Any], path: tuple[str, ...]) -> str:
    value: Any = obj
    for part in path:
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def field_value(obj: Mapping[str, Any], label: str) -> str:
    """The string a field selector compares for `label` (missing fields read as empty)."""
    return _value_at(obj, _path(label))


@dataclass(frozen=True, slots=True)
class FieldSelector:
    """A parsed `fieldSelector`: call it on an object; `equalities` lets the store use an index."""

    requirements: tuple[tuple[str, bool, str], ...] = ()

    def __call__(self, obj: Mapping[str, Any]) -> bool:
        return all(
            (_value_at(obj, _path(label)) == value) == equal
            for label, equal, value in self.requirements
        )

    @property
    def equalities(self) -> dict[str, str]:
        return {label: value for label, equal, value in self.requirements if equal}


def field_matcher(selector: str | None, rt: ResourceType) -> FieldSelector:
    """A predicate for a `fieldSelector`; only the fields the real server supports for `rt`."""
    if not selector:
        return FieldSelector()
    reqs: list[tuple[str, bool, str]] = []
    for req in _split_top(selector):
        m = _EQ_OP.match(req) or re.match(r"^(?P<key>[^=!]+)(?P<op>==|=|!=)(?P<value>.*)$", req)
        if m is None:
            raise bad_request(f"invalid selector: {selector!r}; can't understand {req!r}")
        if not rt.supports_field(m["key"]):
            raise bad_request(f"field label not supported: {m['key']}")
        reqs.append((m["key"], m["op"] != "!=", m["value"]))
    return FieldSelector(tuple(reqs))


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether `labels` satisfy a LabelSelector object (`matchLabels`, `matchExpressions`);
    `{}` matches everything."""
    wanted = selector.get("matchLabels") or {}
    if any(labels.get(k) != v for k, v in wanted.items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if (op == "Exists") != present and op in ("Exists", "DoesNotExist"):
            return False
    return True
