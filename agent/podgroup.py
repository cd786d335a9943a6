"""Fields of an upstream PodGroup (`scheduling.k8s.io`) read alike by the scheduler
(scheduler/runtime/cluster/upstream.py) and `kubectl gputopo gangs`
(agent/cli/kubectl_gangs.py), which runs on the base install and so cannot import the scheduler.
Pure, standard library only; each reader raises ValueError naming the field. Also the
`reservedFor` entry of a ResourceClaim reserved for a PodGroup (DRAWorkloadResourceClaims), which
the scheduler writes and the DRA driver reads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "TOPOLOGY_KEY_FIELD",
    "UPSTREAM_GROUP",
    "podgroup_consumer",
    "reserved_podgroup",
    "topology_key",
    "union_member",
]

TOPOLOGY_KEY_FIELD = "spec.schedulingConstraints.topology[0].key"
UPSTREAM_GROUP = "scheduling.k8s.io"
_PODGROUPS = "podgroups"


def podgroup_consumer(name: str, uid: str) -> dict[str, str]:
    """PodGroup `name` as an entry of a ResourceClaim's `status.reservedFor`."""
    return {"apiGroup": UPSTREAM_GROUP, "resource": _PODGROUPS, "name": name, "uid": uid}


def reserved_podgroup(entry: Mapping[str, Any]) -> str | None:
    """The PodGroup a `status.reservedFor` entry names (None: it names something else)."""
    if entry.get("apiGroup") != UPSTREAM_GROUP or entry.get("resource") != _PODGROUPS:
        return None
    name = entry.get("name")
    return name if isinstance(name, str) else None


def union_member(
    spec: Mapping[str, Any],
    field: str,
    members: tuple[str, ...],
    default: str = "",
    *,
    at: str = "spec",
) -> str:
    """The one member set in union `<at>.<field>` of `spec` (the object at path `at`), or
    `default` when the field is absent."""
    union = spec.get(field)
    if union is None and default:
        return default
    if not isinstance(union, Mapping):
        raise ValueError(f"{at}.{field}: must be an object with one of {', '.join(members)}")
    given = sorted(str(k) for k, v in union.items() if v is not None)
    if len(given) != 1 or given[0] not in members:
        shown = ", ".join(given) or "none"
        raise ValueError(
            f"{at}.{field}: must set exactly one of {', '.join(members)} (got {shown})"
        )
    return given[0]


def topology_key(spec: Mapping[str, Any]) -> tuple[bool, object]:
    """(whether `spec.schedulingConstraints.topology` holds a constraint, its `key` as written:
    None when absent); ValueError for a topology that is not a list or holds more than one."""
    constraints = (spec.get("schedulingConstraints") or {}).get("topology") or []
    if not isinstance(constraints, list):
        raise ValueError("spec.schedulingConstraints.topology: must be a list")
    if len(constraints) > 1:
        raise ValueError(
            "spec.schedulingConstraints.topology: at most one constraint is supported, "
            f"got {len(constraints)}"
        )
    if not constraints:
        return False, None
    return True, constraints[0].get("key") if isinstance(constraints[0], Mapping) else None
