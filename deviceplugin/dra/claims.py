"""What a ResourceClaim asks of this node's driver, read from the claim as the API server has it.

The kubelet's request names a claim only (namespace, name, UID); `ClaimReader` (the agent's
Kubernetes I/O) GETs it. `allocated_devices` takes the allocation results whose driver is ours and
refuses, with a `ClaimError` naming the claim and the field, a claim that is gone or was replaced
(another UID), not allocated, reserved for no pod on this node, or allocated a device this node's
driver does not publish. A claim reserved for an upstream PodGroup (`{apiGroup:
scheduling.k8s.io, resource: podgroups, name}`, DRAWorkloadResourceClaims) serves the pods of the
claim's namespace that name that group in `spec.schedulingGroup.podGroupName`, as the kubelet's
`IsReservedForPod` has it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.dra import DRIVER
from agent.podgroup import reserved_podgroup
from deviceplugin.errors import ClaimError


class ClaimReader(Protocol):
    """Reads claims and this node's pods from the API server; failures raise `AgentError`."""

    def read_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The claim as JSON, or None when there is none."""
        ...

    def node_pods(self) -> tuple[Mapping[str, Any], ...]:
        """The pods bound to this node, as JSON."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"ResourceClaim {self.namespace}/{self.name} (uid {self.uid})"


@dataclass(frozen=True, slots=True, kw_only=True)
class AllocatedDevice:
    """One device of our driver in a claim's allocation, with the requests it serves."""

    requests: tuple[str, ...]
    pool: str
    device: str
    share_id: str | None = None
    consumed: Mapping[str, str] = field(default_factory=dict)  # the result's consumedCapacity


def reserved_pods(
    claim: Mapping[str, Any], node_pods: Sequence[Mapping[str, Any]]
) -> tuple[Mapping[str, Any], ...]:
    """The pods of this node the claim's `status.reservedFor` names, by UID or by their
    PodGroup."""
    reserved = [
        r for r in (claim.get("status") or {}).get("reservedFor") or [] if isinstance(r, Mapping)
    ]
    uids = {r.get("uid") for r in reserved if r.get("resource") == "pods"}
    groups = {reserved_podgroup(r) for r in reserved} - {None}
    namespace = (claim.get("metadata") or {}).get("namespace")
    return tuple(
        p
        for p in node_pods
        if (p.get("metadata") or {}).get("uid") in uids
        or (groups and _group_of(p, namespace) in groups)
    )


def _group_of(pod: Mapping[str, Any], namespace: object) -> object:
    """The upstream PodGroup a pod of `namespace` names (None: none, or another namespace)."""
    if (pod.get("metadata") or {}).get("namespace") != namespace:
        return None
    return ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")


def allocated_devices(
    claim: Mapping[str, Any] | None,
    ref: ClaimRef,
    node_pods: Sequence[Mapping[str, Any]],
    published: Mapping[str, str],
) -> tuple[AllocatedDevice, ...]:
    """Our devices in the claim's allocation; `published` maps a device name of this node's
    pool to the pool name; `node_pods`: the pods bound to this node. Raises ClaimError when the
    claim may not be prepared here."""
    _check_claim(claim, ref, node_pods)
    assert claim is not None
    results = claim["status"]["allocation"].get("devices", {}).get("results") or []
    merged: dict[tuple[str, str, str | None], list[str]] = {}
    consumed: dict[tuple[str, str, str | None], dict[str, str]] = {}
    for i, result in enumerate(results):
        if not isinstance(result, Mapping) or result.get("driver") != DRIVER:
            continue
        where = f"status.allocation.devices.results[{i}]"
        device, pool = result.get("device"), result.get("pool")
        if (
            not isinstance(device, str)
            or not isinstance(pool, str)
            or published.get(device) != pool
        ):
            raise ClaimError(
                f"{ref}: {where}: device {pool}/{device} is not published by {DRIVER} on this node"
            )
        share = result.get("shareID")
        key = (pool, device, share if isinstance(share, str) else None)
        merged.setdefault(key, []).append(str(result.get("request", "")))
        capacity = result.get("consumedCapacity")
        if isinstance(capacity, Mapping):
            consumed.setdefault(key, {k: str(v) for k, v in capacity.items()})
    return tuple(
        AllocatedDevice(
            requests=tuple(reqs),
            pool=pool,
            device=device,
            share_id=share,
            consumed=consumed.get((pool, device, share), {}),
        )
        for (pool, device, share), reqs in merged.items()
    )


def _check_claim(
    claim: Mapping[str, Any] | None, ref: ClaimRef, node_pods: Sequence[Mapping[str, Any]]
) -> None:
    if claim is None:
        raise ClaimError(f"{ref}: not found")
    uid = (claim.get("metadata") or {}).get("uid")
    if uid != ref.uid:
        raise ClaimError(f"{ref}: metadata.uid is {uid!r}: the claim was replaced")
    status = claim.get("status") or {}
    if not isinstance(status.get("allocation"), Mapping):
        raise ClaimError(f"{ref}: status.allocation: not allocated")
    if not reserved_pods(claim, node_pods):
        reserved = [r for r in status.get("reservedFor") or [] if isinstance(r, Mapping)]
        names = ", ".join(_consumer(r) for r in reserved) or "no pod"
        raise ClaimError(f"{ref}: status.reservedFor names {names}, none of them on this node")


def _consumer(entry: Mapping[str, Any]) -> str:
    """A `reservedFor` entry as a message names it: a pod by name, a PodGroup as such."""
    group = reserved_podgroup(entry)
    return str(entry.get("name")) if group is None else f"PodGroup {group} (no pod of it)"
