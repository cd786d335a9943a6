"""Which ResourceClaims a pod uses: its `spec.resourceClaims`, each a claim named directly
(`resourceClaimName`) or the claim the resourceclaim controller made from a template, which the
pod's `status.resourceClaimStatuses` names (an entry without a claim name: no claim is needed).
Until that entry appears the pod waits, as kube-scheduler's DynamicResources PreEnqueue has it.
An entry equal to one of its upstream PodGroup's `spec.resourceClaims` (`GroupClaim.matches`)
names a claim of the group (DRAWorkloadResourceClaims): reserved for the PodGroup, and when made
from a template, owned by the PodGroup, not the pod (the controller records its name in the pod's
status as well).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.objkey import DEFAULT_NAMESPACE
from scheduler.claims.model import ClaimKey
from scheduler.runtime.cluster.groups import GroupClaim

__all__ = ["ClaimRefs", "claim_refs", "has_claims"]

Obj = Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimRefs:
    """The pod's claims in `spec.resourceClaims` order, or why it must wait for them."""

    keys: tuple[ClaimKey, ...] = ()
    waiting: str | None = None
    made: frozenset[ClaimKey] = frozenset()  # made from a template: the pod (or group) owns them
    for_group: frozenset[ClaimKey] = frozenset()  # the PodGroup's claims among them


def has_claims(pod: Obj) -> bool:
    return bool((pod.get("spec") or {}).get("resourceClaims"))


def claim_refs(pod: Obj, group_claims: Sequence[GroupClaim] = ()) -> ClaimRefs:
    """The pod's claims; `group_claims`: its upstream PodGroup's (`GroupInfo.claims`)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    namespace = str(meta.get("namespace") or DEFAULT_NAMESPACE)
    made = {
        str(s.get("name")): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()
        if isinstance(s, Mapping)
    }
    keys: list[ClaimKey] = []
    owned: set[ClaimKey] = set()
    grouped: set[ClaimKey] = set()
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
        else:
            continue
        if any(c.matches(entry) for c in group_claims):
            grouped.add(keys[-1])
    return ClaimRefs(keys=tuple(keys), made=frozenset(owned), for_group=frozenset(grouped))
