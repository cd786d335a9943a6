"""The pods fingerprint `pfp0v001` of the NodeResourceTopology attributes.

Each pod is hashed as xxhash64(name, seed = xxhash64(namespace)); the sorted 64-bit values are fed,
as 8 little-endian bytes each, into one xxhash64 with seed 0; the result is `pfp0` + `v001` + the
digest in hex (big-endian). Pods are identified by namespace and name only, so the producer (this
agent) and a consumer (a scheduler counting the pods it has on the node) agree when they count the
same pods. The scheduler imports this module too.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import xxhash

PREFIX = "pfp0"
VERSION = "v001"
METHOD_ALL = "all"
METHOD_WITH_EXCLUSIVE_RESOURCES = "with-exclusive-resources"

_U64 = struct.Struct("<Q")


def pod_hash(namespace: str, name: str) -> int:
    """One pod's 64-bit hash."""
    seed = xxhash.xxh64_intdigest(namespace.encode("utf-8"))
    value: int = xxhash.xxh64_intdigest(name.encode("utf-8"), seed=seed)
    return value


def pods_fingerprint(pods: Iterable[tuple[str, str]]) -> str:
    """The fingerprint of a set of `(namespace, name)` pods; order does not matter."""
    digest = xxhash.xxh64()
    for value in sorted(pod_hash(ns, name) for ns, name in pods):
        digest.update(_U64.pack(value))
    hexdigest: str = digest.hexdigest()
    return PREFIX + VERSION + hexdigest


def is_compatible(fingerprint: str) -> bool:
    """True for a well-formed fingerprint of this version (`pfp0v001` + 16 hex digits)."""
    head, body = fingerprint[:8], fingerprint[8:]
    return (
        head == PREFIX + VERSION and len(body) == 16 and all(c in "0123456789abcdef" for c in body)
    )
