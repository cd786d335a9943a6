"""The key of a namespaced Kubernetes object: `namespace/name`, built by one constructor.

Pods and PodGroups are keyed this way in the scheduler's cache, queue and reports, in logs and in
placement's `PodRequest.key`. `ObjectKey` is a `NewType` over `str`, so a key costs what a string
costs and reads the same in logs, messages and JSON. An object read without a namespace is in
`default`, as the API server would have put it. `name_problem` checks a name the API server
would reject (node names, spec.schedulerName, Lease names are DNS-1123 subdomains) before a
command connects.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NewType

__all__ = ["DEFAULT_NAMESPACE", "ObjectKey", "key_of", "name_problem", "object_key", "split_key"]

_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_SUBDOMAIN_MAX = 253
_LABEL_MAX = 63

ObjectKey = NewType("ObjectKey", str)

DEFAULT_NAMESPACE = "default"


def object_key(namespace: str, name: str) -> ObjectKey:
    """`namespace/name`."""
    return ObjectKey(f"{namespace}/{name}")


def key_of(obj: Mapping[str, Any]) -> ObjectKey:
    """The key of an API object, from its `metadata` (namespace `default` when it has none)."""
    meta = obj.get("metadata") or {}
    return object_key(str(meta.get("namespace") or DEFAULT_NAMESPACE), str(meta.get("name") or ""))


def split_key(key: str) -> tuple[str, str]:
    """`(namespace, name)` of a key made by `object_key`."""
    namespace, _, name = key.partition("/")
    return namespace, name


def name_problem(name: str, *, label: bool = False) -> str | None:
    """Why the API server would reject `name` as an object name: a DNS-1123 subdomain (RFC 1123),
    or with `label` a DNS-1123 label (namespaces: at most 63 characters, no dots); None when it
    is valid."""
    limit = _LABEL_MAX if label else _SUBDOMAIN_MAX
    if len(name) > limit:
        return f"{len(name)} characters, at most {limit} allowed"
    if not _SUBDOMAIN.fullmatch(name) or (label and "." in name):
        dots = "" if label else ", '.'"
        return (
            f"not a valid name (RFC 1123: lowercase letters, digits{dots} and '-', starting and "
            "ending with a letter or digit)"
        )
    return None
