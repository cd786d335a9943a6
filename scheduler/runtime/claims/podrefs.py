"""Which ResourceClaims a pod uses: its `spec.resourceClaims`, each a claim named directly
(`resourceClaimName`) or the claim the resourceclaim controller made from a template, which the
pod's `status.resourceClaimStatuses` names (an entry without a claim name: no claim is needed).
Until that entry appears the pod waits, as kube-scheduler's DynamicResources PreEnqueue has it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.objkey import DEFAULT_NAMESPACE
from scheduler.claims.model import ClaimKey

__all__ = ["ClaimRefs", "claim_refs", "has_claims"]

Obj = Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimRefs:
    """The pod's claims in `spec.resourceClaims` order, or why it must wait for them."""

    keys: tuple[ClaimKey, ...] = ()
    waiting: str | None = None
    made: frozenset[ClaimKey] = frozenset()  # those made from a template (the pod owns them)


def has_claims(pod: Obj) -> bool:
    return bool((pod.get("spec") or {}).get("resourceClaims"))


def claim_refs(pod: Obj) -> ClaimRefs:
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    namespace = str(meta.get("namespace") or DEFAULT_NAMESPACE)
    made = {
        str(s.get("name")): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()
        if isinstance(s, Mapping)
    }
    keys: list[ClaimKey] = []
    owned: set[ClaimKey] = set()
    for entry in spec.get("resourceClaims") or ():
        name = str(entry.get("name") or "")
        direct, template = entry.get("resourceClaimName"), entry.get("resourceClaimTemplateName")
        if direct:
            keys.append(ClaimKey(namespace, str(direct)))
        elif template and name not in made:
            return ClaimRefs(
                waiting=f"waiting for the resourceclaim controller to create the ResourceClaim "
                f"of pod claim {name!r} from template {template!r}"
            )
        elif made.get(name):
            keys.append(ClaimKey(namespace, str(made[name])))
            owned.add(keys[-1])
    return ClaimRefs(keys=tuple(keys), made=frozenset(owned))
