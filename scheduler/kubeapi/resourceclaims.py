"""resource.k8s.io/v1 (DRA) as the scheduler reads and writes it: the watched collections
(DeviceClasses, ResourceSlices, ResourceClaims, and DeviceTaintRules where served), whether the
server serves them, and the claim
writes a bind makes (the claim itself for its finalizer, its status for the allocation and
`reservedFor`), each a full update guarded by the object's resourceVersion, as kube-scheduler's
DynamicResources plugin writes them (a stale one is `ConflictError`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from agent.objkey import object_key
from scheduler.kubeapi.calls import Kind
from scheduler.kubeapi.client import KubeClient, Read, discovery_read

__all__ = [
    "DEVICE_CLASSES",
    "DEVICE_TAINT_RULES",
    "GROUP",
    "RESOURCE_CLAIMS",
    "RESOURCE_SLICES",
    "VERSION",
    "ClaimApi",
    "discovery",
    "served",
]

GROUP, VERSION = "resource.k8s.io", "v1"
DEVICE_CLASSES = Kind("deviceclasses", GROUP, VERSION, "deviceclasses")
RESOURCE_SLICES = Kind("resourceslices", GROUP, VERSION, "resourceslices")
RESOURCE_CLAIMS = Kind("resourceclaims", GROUP, VERSION, "resourceclaims")
KINDS = (DEVICE_CLASSES, RESOURCE_SLICES, RESOURCE_CLAIMS)
DEVICE_TAINT_RULES = Kind("devicetaintrules", GROUP, VERSION, "devicetaintrules")
"""GA in 1.37 (resource.k8s.io/v1); earlier servers serve it in v1beta2 behind a gate, or not."""

Obj = Mapping[str, Any]


def discovery() -> Read:
    """The read `served` makes (`scheduler.cli.run` sends it early)."""
    return discovery_read(GROUP, VERSION)


def served(kube: KubeClient) -> tuple[Kind, ...]:
    """The collections of resource.k8s.io/v1 to watch (discovery): `KINDS`, with
    `DEVICE_TAINT_RULES` where served; none unless every one of `KINDS` is (DRA off). ApiError
    when the server could not answer (not a 404)."""
    body = kube.resources(GROUP, VERSION) or {}
    names = {str(r.get("name")) for r in body.get("resources") or () if isinstance(r, Mapping)}
    if not all(kind.plural in names for kind in KINDS):
        return ()
    return (*KINDS, DEVICE_TAINT_RULES) if DEVICE_TAINT_RULES.plural in names else KINDS


def _claim_path(namespace: str, name: str, sub: str = "") -> str:
    ns, claim = quote(namespace, safe=""), quote(name, safe="")
    base = f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/resourceclaims/{claim}"
    return f"{base}/{sub}" if sub else base


class ClaimApi:
    """The ResourceClaim calls of a bind (`scheduler.runtime.binding.claimbind.ClaimWrites`)."""

    def __init__(self, kube: KubeClient) -> None:
        self._kube = kube

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The claim as the server has it now; None when it does not exist."""
        key = object_key(namespace, name)
        return self._kube.read(_claim_path(namespace, name), f"get resourceclaim {key}")

    def update(self, claim: Obj) -> dict[str, Any]:
        """Replace the claim (its metadata and spec; the server keeps its status)."""
        namespace, name = _named(claim)
        key = object_key(namespace, name)
        path = _claim_path(namespace, name)
        return self._kube.write("PUT", path, claim, f"update resourceclaim {key}")

    def update_status(self, claim: Obj) -> dict[str, Any]:
        """Replace the claim's status (`resourceclaims/status`)."""
        namespace, name = _named(claim)
        key = object_key(namespace, name)
        path = _claim_path(namespace, name, "status")
        return self._kube.write("PUT", path, claim, f"update resourceclaim {key} status")

    def create(self, claim: Obj) -> dict[str, Any]:
        """Create the claim (its `generateName` gives the name); the claim as created."""
        namespace = str((claim.get("metadata") or {}).get("namespace") or "")
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{quote(namespace, safe='')}/resourceclaims"
        return self._kube.write("POST", path, claim, f"create resourceclaim in {namespace}")

    def delete(self, namespace: str, name: str) -> None:
        """Delete the claim; gone already is done."""
        key = object_key(namespace, name)
        self._kube.delete(_claim_path(namespace, name), f"delete resourceclaim {key}")


def _named(claim: Obj) -> tuple[str, str]:
    meta = claim.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")
