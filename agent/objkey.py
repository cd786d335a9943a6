"""The key of a namespaced Kubernetes object: `namespace/name`, built by one constructor.

Pods and PodGroups are keyed this way in the scheduler's cache, queue and reports, in logs and in
placement's `PodRequest.key`. `ObjectKey` is a `NewType` over `str`, so a key costs what a string
costs and reads the same in logs, messages and JSON. An object read without a namespace is in
`default`, as the API server would have put it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NewType

__all__ = ["DEFAULT_NAMESPACE", "ObjectKey", "key_of", "object_key", "split_key"]

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
