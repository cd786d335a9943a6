"""A queue as the quota tree needs it, read from a `Queue` or an `ElasticQuota` object.

Reading never raises: a malformed object comes back as a `QueueSpec` with `problem` set (naming
the object and the field), so the scheduler flags that queue and keeps serving the others.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from scheduler.quota.amounts import Amounts, parse_amount
from scheduler.quota.models import MODEL_SEP, base_of, check_key

__all__ = [
    "DEFAULT_QUEUE",
    "ELASTIC_PREFIX",
    "QUEUE_LABEL",
    "ROOT",
    "QueueSpec",
    "read_elastic_quota",
    "read_queue",
]

ROOT = "root"
DEFAULT_QUEUE = "default"
ELASTIC_PREFIX = "ns/"
QUEUE_LABEL = "gputopo.io/queue"
_NONE: Amounts = MappingProxyType({})


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueSpec:
    """One queue. `parent` is None under the root; `max` lacks a resource when unlimited;
    `source` is `Queue`, `ElasticQuota` or `implicit` (root, default)."""

    name: str
    parent: str | None = None
    min: Amounts = field(default_factory=lambda: _NONE)
    max: Amounts = field(default_factory=lambda: _NONE)
    weight: int = 1
    paused: bool = False
    namespaces: tuple[str, ...] = ()
    source: str = "Queue"
    problem: str = ""


def _amounts(raw: object, where: str) -> dict[str, int]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: must be a map of resource to quantity, got {raw!r}")
    out: dict[str, int] = {}
    for name, value in raw.items():
        try:
            check_key(str(name))
            out[str(name)] = parse_amount(str(name), value)
        except ValueError as exc:
            raise ValueError(f"{where}[{name}]: {exc}") from None
    return out


def _min_max(spec: Mapping[str, Any]) -> tuple[dict[str, int], dict[str, int]]:
    low, high = _amounts(spec.get("min"), "spec.min"), _amounts(spec.get("max"), "spec.max")
    for name, amount in low.items():
        if name in high and amount > high[name]:
            raise ValueError(f"spec.min[{name}] is above spec.max[{name}]")
        plain = base_of(name)
        for bound, limits in (("min", low), ("max", high)):
            if MODEL_SEP in name and plain in limits and amount > limits[plain]:
                raise ValueError(f"spec.min[{name}] is above spec.{bound}[{plain}]")
    return low, high


def _weight(raw: object) -> int:
    if raw is None:
        return 1
    if not isinstance(raw, int) or isinstance(raw, bool) or raw < 1:
        raise ValueError(f"spec.weight: must be an integer >= 1, got {raw!r}")
    return raw


def _namespaces(raw: object) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(n, str) and n for n in raw):
        raise ValueError(f"spec.namespaces: must be a list of namespace names, got {raw!r}")
    return tuple(raw)


def _paused(raw: object) -> bool:
    if raw is None:
        return False
    if not isinstance(raw, bool):
        raise ValueError(f"spec.paused: must be true or false, got {raw!r}")
    return raw


def read_queue(obj: Mapping[str, Any]) -> QueueSpec:
    """A `Queue` (scheduling.gputopo.io/v1alpha1, cluster-scoped)."""
    name = str((obj.get("metadata") or {}).get("name") or "")
    spec = obj.get("spec") or {}
    try:
        if not isinstance(spec, Mapping):
            raise ValueError("spec: must be an object")
        parent = spec.get("parent")
        if parent is not None and (not isinstance(parent, str) or not parent):
            raise ValueError(f"spec.parent: must be a queue name, got {parent!r}")
        low, high = _min_max(spec)
        return QueueSpec(
            name=name,
            parent=parent or None,
            min=low,
            max=high,
            weight=_weight(spec.get("weight")),
            paused=_paused(spec.get("paused")),
            namespaces=_namespaces(spec.get("namespaces")),
        )
    except ValueError as exc:
        return QueueSpec(name=name, problem=f"Queue {name}: {exc}")


def read_elastic_quota(obj: Mapping[str, Any]) -> QueueSpec:
    """An `ElasticQuota` (scheduling.x-k8s.io/v1alpha1): a leaf under root named `ns/<namespace>`
    serving its namespace."""
    meta = obj.get("metadata") or {}
    namespace = str(meta.get("namespace") or "default")
    name = ELASTIC_PREFIX + namespace
    where = f"ElasticQuota {namespace}/{meta.get('name') or ''}"
    spec = obj.get("spec") or {}
    try:
        if not isinstance(spec, Mapping):
            raise ValueError("spec: must be an object")
        low, high = _min_max(spec)
    except ValueError as exc:
        return QueueSpec(name=name, source="ElasticQuota", problem=f"{where}: {exc}")
    return QueueSpec(name=name, min=low, max=high, namespaces=(namespace,), source="ElasticQuota")
