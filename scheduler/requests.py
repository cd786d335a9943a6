"""What a pod asks for, computed the way the stock kube-scheduler does, from the pod's JSON.

- `pod_requests` is the effective request: max(sum of app containers + restartable init containers
  ("sidecars"), the largest init container plus the sidecars started before it) + pod overhead. CPU
  is in millicores, everything else in whole units rounded up (the stock `MilliValue` / `Value`).
  A resource set only in `limits` counts as its request, as the API server's defaulting does.
- `unsupported_feature` names a feature the scheduler does not implement (inter-pod affinity,
  topology spread); `volume_problem` checks the pod's persistent volume claims.

Objects are plain JSON mappings (camelCase keys), as the API server sends them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.quantity import to_int, to_milli

Obj = Mapping[str, Any]
ResourceList = dict[str, int]

CPU = "cpu"
MEMORY = "memory"
_WFFC = "WaitForFirstConsumer"


def quantity_units(name: str, value: object) -> int:
    """Integer units of `name`: millicores for cpu, whole units (rounded up) otherwise."""
    return to_milli(value) if name == CPU else to_int(value)


def resource_list(raw: Obj | None, where: str) -> ResourceList:
    """Parse a `{name: quantity}` map; ValueError names `where` and the resource."""
    out: ResourceList = {}
    for name, value in (raw or {}).items():
        try:
            out[str(name)] = quantity_units(str(name), value)
        except ValueError as exc:
            raise ValueError(f"{where}[{name}]: {exc}") from None
    return out


def _add(into: ResourceList, extra: Mapping[str, int]) -> None:
    for name, amount in extra.items():
        into[name] = into.get(name, 0) + amount


def _max_into(into: ResourceList, other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        into[name] = max(into.get(name, 0), amount)


def container_requests(container: Obj, where: str) -> ResourceList:
    """Requests of one container; a limit without a request counts as the request."""
    resources = container.get("resources") or {}
    limits = resource_list(resources.get("limits"), f"{where}.resources.limits")
    requests = resource_list(resources.get("requests"), f"{where}.resources.requests")
    return {**limits, **requests}


def pod_requests(pod: Obj) -> ResourceList:
    """The pod's effective request (see the module docstring); ValueError on a bad quantity."""
    spec = pod.get("spec") or {}
    total: ResourceList = {}
    for i, container in enumerate(spec.get("containers") or ()):
        _add(total, container_requests(container, f"spec.containers[{i}]"))
    sidecars: ResourceList = {}
    init_peak: ResourceList = {}
    for i, container in enumerate(spec.get("initContainers") or ()):
        own = container_requests(container, f"spec.initContainers[{i}]")
        if container.get("restartPolicy") == "Always":
            _add(total, own)
            _add(sidecars, own)
            _max_into(init_peak, sidecars)
        else:
            step = dict(own)
            _add(step, sidecars)
            _max_into(init_peak, step)
    _max_into(total, init_peak)
    _add(total, resource_list(spec.get("overhead"), "spec.overhead"))
    return {name: amount for name, amount in total.items() if amount}


def unsupported_feature(pod: Obj) -> str | None:
    """`unsupported: <feature>` for a pod using something this scheduler does not implement."""
    spec = pod.get("spec") or {}
    affinity = spec.get("affinity") or {}
    if affinity.get("podAffinity"):
        return "unsupported: inter-pod affinity"
    if affinity.get("podAntiAffinity"):
        return "unsupported: inter-pod anti-affinity"
    if spec.get("topologySpreadConstraints"):
        return "unsupported: topology spread constraints"
    if spec.get("resourceClaims"):
        return "unsupported: dynamic resource claims"
    return None


def claim_names(pod: Obj) -> list[str]:
    """Names of the PVCs the pod's volumes use (generic ephemeral volumes included)."""
    meta = pod.get("metadata") or {}
    names: list[str] = []
    for volume in (pod.get("spec") or {}).get("volumes") or ():
        claim = volume.get("persistentVolumeClaim")
        if claim and claim.get("claimName"):
            names.append(str(claim["claimName"]))
        elif volume.get("ephemeral"):
            names.append(f"{meta.get('name', '')}-{volume.get('name', '')}")
    return names


def volume_problem(
    pod: Obj, claims: Mapping[str, Obj | None], class_modes: Mapping[str, str]
) -> str | None:
    """Why the pod's claims stop it from being placed, or None.

    `claims` maps each claim name to the PVC read from the API (None when it does not exist);
    `class_modes` maps storage class names to their `volumeBindingMode`.
    """
    unbound_immediate = False
    for name in claim_names(pod):
        pvc = claims.get(name)
        if pvc is None:
            return f'persistentvolumeclaim "{name}" not found'
        if (pvc.get("spec") or {}).get("volumeName"):
            continue
        storage_class = (pvc.get("spec") or {}).get("storageClassName") or ""
        if class_modes.get(storage_class) == _WFFC:
            return "unsupported: unbound WaitForFirstConsumer volume"
        unbound_immediate = True
    if unbound_immediate:
        return "pod has unbound immediate PersistentVolumeClaims"
    return None
