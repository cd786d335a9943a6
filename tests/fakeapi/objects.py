"""Plain helpers on objects and requests: references, metadata checks, pages, patch bodies."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import yaml

from tests.fakeapi import patch as patches
from tests.fakeapi.errors import bad_request, invalid, unsupported_media_type
from tests.fakeapi.resources import ResourceType
from tests.fakeapi.store import Obj, clone

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@dataclass(frozen=True, slots=True)
class Ref:
    """What a request addresses: a collection (`name` empty), an object, or a subresource of one."""

    rt: ResourceType
    version: str
    namespace: str = ""
    name: str = ""
    sub: str = ""


def format_time(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> float:
    """The seconds since the epoch of an RFC 3339 time as the server writes it (`format_time`)."""
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def upsert_condition(conditions: list[Obj], wanted: Obj) -> list[Obj]:
    """`conditions` with `wanted` in place of the one of its type (or appended); the transition
    time stays when the condition's status does not change, as Kubernetes' helpers keep it."""
    result = list(conditions)
    for n, current in enumerate(result):
        if current.get("type") == wanted.get("type"):
            if current.get("status") == wanted.get("status") and "lastTransitionTime" in current:
                wanted = dict(wanted, lastTransitionTime=current["lastTransitionTime"])
            result[n] = wanted
            return result
    return [*result, wanted]


def success_status(code: int, details: dict[str, Any] | None = None) -> Obj:
    status: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    if details is not None:
        status["details"] = details
    status["code"] = code
    return status


def check_body(ref: Ref, body: Any) -> Obj:
    """A copy of a create/update body, or 400 when it does not fit the request."""
    if not isinstance(body, dict) or not isinstance(body.get("metadata", {}), dict):
        raise bad_request("the request body must be a JSON object with a metadata object")
    if body.get("kind") not in (None, "", ref.rt.kind):
        raise bad_request(f"the kind of the object ({body['kind']}) does not match {ref.rt.kind}")
    body_ns = (body.get("metadata") or {}).get("namespace")
    if ref.rt.namespaced and body_ns not in (None, "", ref.namespace):
        raise bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    return clone(body)


def check_meta(rt: ResourceType, meta: Obj) -> None:
    """422 for an invalid name, label value or annotation."""
    name = str(meta.get("name", ""))
    problems = []
    if len(name) > 253 or not _SUBDOMAIN.match(name):
        problems.append(
            f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 subdomain must "
            "consist of lower case alphanumeric characters, '-' or '.'"
        )
    for value in (meta.get("labels") or {}).values():
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            problems.append(f"metadata.labels: Invalid value: {value!r}: a valid label value")
    for key, value in (meta.get("annotations") or {}).items():
        if not isinstance(value, str):
            problems.append(f"metadata.annotations: Invalid value: {key}: must be a string")
    if problems:
        raise invalid(rt, name, problems)


def sort_key(obj: Obj) -> tuple[str, str]:
    meta = obj["metadata"]
    return meta.get("namespace", ""), meta["name"]


def spec_part(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def paginate(
    items: list[Obj], meta: Obj, query: Mapping[str, str], rv: int
) -> tuple[list[Obj], Obj]:
    token = query.get("continue")
    if token:
        try:
            start = tuple(json.loads(base64.urlsafe_b64decode(token.encode())))
        except ValueError as exc:
            raise bad_request(f"continue key is not valid: {exc}") from exc
        items = [o for o in items if sort_key(o) > start]
    limit = int(query.get("limit") or 0)
    if limit > 0 and len(items) > limit:
        last = sort_key(items[limit - 1])
        meta["continue"] = base64.urlsafe_b64encode(json.dumps(list(last)).encode()).decode()
        meta["remainingItemCount"] = len(items) - limit
        items = items[:limit]
    return items, meta


def parse_patch(raw: bytes, kind: str, rt: ResourceType) -> Any:
    accepted = [patches.JSON_PATCH, patches.MERGE_PATCH, patches.APPLY_PATCH]
    if rt.builtin:
        accepted.insert(2, patches.STRATEGIC_PATCH)
    if kind not in accepted:
        raise unsupported_media_type(kind, accepted)
    try:
        if kind == patches.APPLY_PATCH:
            return yaml.safe_load(raw.decode() or "null")
        return json.loads(raw or b"null")
    except (ValueError, yaml.YAMLError) as exc:
        raise bad_request(f"error decoding patch: {exc}") from exc
