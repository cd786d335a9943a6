"""Extended resources backed by DRA (KEP-5004, `DRAExtendedResource`, GA in Kubernetes 1.37): a
pod that asks an extended resource (`nvidia.com/gpu: 2`) which a DeviceClass maps, on a node that
does not offer it in its allocatable, gets its devices from one ResourceClaim the scheduler makes
for it. Pure: which names the classes map, the claim's requests and which container uses each,
and the pod as the claim machinery reads it (the resource out of its containers, the claim in
`spec.resourceClaims`).

As kube-scheduler 1.37.2 has it (`dynamicresources/extendeddynamicresources.go`,
`dynamic-resource-allocation/deviceclass/extendedresourcecache`):
- A class maps its `spec.extendedResourceName` and, always, `deviceclass.resource.kubernetes.io/
  <class name>`. Where two classes map one name, the newer (`creationTimestamp`) wins, then the
  lower name.
- One request per container and resource: `container-<i>-request-<j>` (`i` the container's index
  in init containers then containers, `j` the resource's index among the container's sorted
  request names), `ExactCount` of the class, the container's quantity. An init container that
  runs before the others (not a sidecar) first uses the requests of the long-lived containers
  from its own index on; what it still needs is one request, the largest such of all of them,
  which every one of them maps to. Requests are sorted by name.
- The claim: `generateName: <pod>-extended-resources-`, the annotation
  `resource.kubernetes.io/extended-resource-claim: "true"`, the pod its controller owner; the
  pod's `status.extendedResourceClaimStatus` names it and maps each container and resource to
  the requests it uses (what the kubelet reads).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.quantity import parse_quantity
from scheduler.claims.model import DeviceClass

__all__ = [
    "CLAIM_ANNOTATION",
    "CLASS_PREFIX",
    "POD_CLAIM_NAME",
    "ExtendedAsk",
    "RequestMapping",
    "claim_body",
    "extended_ask",
    "mapped_names",
    "pod_with_claim",
]

CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"
CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
POD_CLAIM_NAME = "<extended-resources>"
"""The pod's `spec.resourceClaims` entry the claim is read as (not a valid name, so never a
user's): only in the scheduler's own reading of the pod, never written."""

Obj = Mapping[str, Any]


def mapped_names(classes: Iterable[DeviceClass]) -> dict[str, DeviceClass]:
    """Each extended-resource name a class maps, to that class."""
    found: dict[str, DeviceClass] = {}
    for cls in sorted(classes, key=lambda c: c.name):
        found[CLASS_PREFIX + cls.name] = cls
        name = cls.extended_resource_name
        if not name:
            continue
        held = found.get(name)
        if held is None or _newer(cls, held):
            found[name] = cls
    return found


def _newer(one: DeviceClass, other: DeviceClass) -> bool:
    return one.created > other.created or (one.created == other.created and one.name < other.name)


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestMapping:
    """One entry of `status.extendedResourceClaimStatus.requestMappings`."""

    container: str
    resource: str
    request: str

    def wire(self) -> dict[str, str]:
        return {
            "containerName": self.container,
            "resourceName": self.resource,
            "requestName": self.request,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ExtendedAsk:
    """What a pod asks through DRA: the claim's requests (`spec.devices.requests`, sorted by
    name), which container uses which, and the resources taken out of the pod's containers."""

    requests: tuple[Mapping[str, Any], ...]
    mappings: tuple[RequestMapping, ...]
    resources: frozenset[str]


def _containers(spec: Obj) -> tuple[list[Obj], int]:
    inits = [c for c in spec.get("initContainers") or () if isinstance(c, Mapping)]
    mains = [c for c in spec.get("containers") or () if isinstance(c, Mapping)]
    return [*inits, *mains], len(inits)


def _requests(container: Obj) -> Mapping[str, Any]:
    resources = container.get("resources") or {}
    requests = resources.get("requests")
    if isinstance(requests, Mapping) and requests:
        return requests
    limits = resources.get("limits")  # extended resources: the server copies limits to requests
    return limits if isinstance(limits, Mapping) else {}


def _count(value: object) -> int:
    """An extended resource's quantity as a count (0 for one that is not a whole number)."""
    try:
        amount = parse_quantity(value)
    except (ValueError, TypeError):
        return 0
    return int(amount) if amount.denominator == 1 and amount > 0 else 0


def extended_ask(pod: Obj, mapped: Mapping[str, DeviceClass]) -> ExtendedAsk | None:
    """The pod's ask of the extended resources a class maps (None when it asks none)."""
    spec = pod.get("spec") or {}
    if not _asks_any(spec, mapped):
        return None  # most pods: one pass over their containers' request names
    containers, inits = _containers(spec)
    names = sorted(
        {n for c in containers for n, v in _requests(c).items() if n in mapped and _count(v)}
    )
    if not names:
        return None
    long_lived = [
        i for i, c in enumerate(containers) if i >= inits or c.get("restartPolicy") == "Always"
    ]
    short_lived = [i for i in range(inits) if i not in long_lived]
    requests: list[dict[str, Any]] = []
    mappings: list[RequestMapping] = []
    for resource in names:
        class_name = mapped[resource].name
        kept: list[dict[str, Any] | None] = [None] * len(containers)
        for i in long_lived:
            kept[i], made = _container_request(i, containers[i], resource, class_name, ())
            mappings.extend(made)
        largest: dict[str, Any] | None = None
        short_names: set[str] = set()
        short_mappings: list[RequestMapping] = []
        for i in short_lived:
            request, made = _container_request(i, containers[i], resource, class_name, kept[i:])
            if request is not None:
                short_names.add(request["name"])
                if largest is None or _amount(largest) < _amount(request):
                    largest = request
            short_mappings.extend(made)
        if largest is not None and len(short_names) > 1:
            short_mappings = [
                RequestMapping(container=m.container, resource=m.resource, request=largest["name"])
                if m.request in short_names
                else m
                for m in short_mappings
            ]
        if largest is not None:
            requests.append(largest)
        requests.extend(r for r in kept if r is not None)
        mappings.extend(short_mappings)
    requests.sort(key=lambda r: str(r["name"]))
    return ExtendedAsk(
        requests=tuple(requests), mappings=tuple(mappings), resources=frozenset(names)
    )


def _asks_any(spec: Obj, mapped: Mapping[str, DeviceClass]) -> bool:
    for field in ("containers", "initContainers"):
        for container in spec.get(field) or ():
            resources = container.get("resources") if isinstance(container, Mapping) else None
            if not isinstance(resources, Mapping):
                continue
            for part in ("requests", "limits"):
                names = resources.get(part)
                if names and not mapped.keys().isdisjoint(names):
                    return True
    return False


def _amount(request: Mapping[str, Any]) -> int:
    return int(request["exactly"]["count"])


def _container_request(
    index: int,
    container: Obj,
    resource: str,
    class_name: str,
    reusable: Sequence[Mapping[str, Any] | None],
) -> tuple[dict[str, Any] | None, list[RequestMapping]]:
    """The request container `index` adds for `resource` (None: it needs none of its own) and
    the requests it maps to: first those of `reusable` (long-lived containers from its index
    on), then its own for the rest."""
    asked = _requests(container)
    wanted = _count(asked.get(resource)) if resource in asked else 0
    if not wanted:
        return None, []
    name = str(container.get("name") or "")
    mappings: list[RequestMapping] = []
    covered = 0
    for other in reusable:
        if other is None:
            continue
        covered += _amount(other)
        mappings.append(RequestMapping(container=name, resource=resource, request=other["name"]))
        if covered >= wanted:
            return None, mappings
    position = sorted(str(k) for k in asked).index(resource)
    request_name = f"container-{index}-request-{position}"
    request = {
        "name": request_name,
        "exactly": {
            "deviceClassName": class_name,
            "allocationMode": "ExactCount",
            "count": wanted - covered,
        },
    }
    mappings.append(RequestMapping(container=name, resource=resource, request=request_name))
    return request, mappings


def claim_body(pod: Obj, ask: ExtendedAsk, name: str | None = None) -> dict[str, Any]:
    """The ResourceClaim for `ask`: as created (`generateName`), or as the scheduler reads it
    before it exists (`name`)."""
    meta = pod.get("metadata") or {}
    pod_name = str(meta.get("name") or "")
    claim_meta: dict[str, Any] = {
        "namespace": str(meta.get("namespace") or "default"),
        "generateName": f"{pod_name}-extended-resources-",
        "annotations": {CLAIM_ANNOTATION: "true"},
        "ownerReferences": [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod_name,
                "uid": str(meta.get("uid") or ""),
                "controller": True,
            }
        ],
    }
    if name is not None:
        claim_meta["name"] = name
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": claim_meta,
        "spec": {"devices": {"requests": [dict(r) for r in ask.requests]}},
    }


def pod_with_claim(
    pod: Obj, claim_name: str, mappings: Iterable[tuple[str, str]]
) -> dict[str, Any]:
    """The pod as the claim machinery reads it: each (container, resource) of `mappings` out of
    that container's requests and limits, and `claim_name` in `spec.resourceClaims`."""
    taken: dict[str, set[str]] = {}
    for container, resource in mappings:
        taken.setdefault(container, set()).add(resource)
    spec = dict(pod.get("spec") or {})
    for field in ("initContainers", "containers"):
        if spec.get(field):
            spec[field] = [
                _without(c, taken.get(str(c.get("name") or ""), set())) for c in spec[field]
            ]
    entry = {"name": POD_CLAIM_NAME, "resourceClaimName": claim_name}
    spec["resourceClaims"] = [*(spec.get("resourceClaims") or ()), entry]
    return {**pod, "spec": spec}


def _without(container: Obj, resources: set[str]) -> Obj:
    if not resources or not isinstance(container, Mapping):
        return container
    held = dict(container.get("resources") or {})
    for part in ("requests", "limits"):
        if isinstance(held.get(part), Mapping):
            held[part] = {k: v for k, v in held[part].items() if k not in resources}
    return {**container, "resources": held}
