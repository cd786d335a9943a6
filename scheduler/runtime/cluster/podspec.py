"""What a pod asks for, computed the way the stock kube-scheduler does, from the pod's JSON.

- `pod_requests` is the effective request: max(sum of app containers + restartable init containers
  ("sidecars"), the largest init container plus the sidecars started before it), with the
  pod-level requests of cpu, memory and hugepages in the place of the containers' when the pod
  sets them, + pod overhead. CPU is in millicores, everything else in whole units rounded up
  (the stock `MilliValue` / `Value`). A resource set only in a container's `limits` counts as
  its request, as the API server's defaulting does.
- `host_ports` reads the node ports a pod takes (`hostports` refuses the nodes where they are
  taken); `podrules` reads the inter-pod rules; `volume_problem` checks the pod's persistent
  volume claims.

Objects are plain JSON mappings (camelCase keys), as the API server sends them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agent.objkey import DEFAULT_NAMESPACE, ObjectKey, key_of
from agent.quantity import resource_units
from agent.resource_names import GPU_RESOURCE, mig_profile
from agent.shares import GPU_COMPUTE, GPU_MEMORY, ContainerShare, ShareRequestError, pod_shares
from scheduler.placement.nodeselector import node_selector_terms, requirements
from scheduler.placement.request import (
    CPU,
    EPHEMERAL_STORAGE,
    MEMORY,
    Effect,
    HostPort,
    NodeSelectorTerm,
    PodRequest,
    PreferredNodeTerm,
    Toleration,
)

from .podrules import inter_pod_rules

Obj = Mapping[str, Any]
ResourceList = dict[str, int]

_WFFC = "WaitForFirstConsumer"

# `Ei` is left to `resource_units`, which reads it as an exponent and rejects it: same answer.
_WHOLE = re.compile(r"([0-9]{1,18})(|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|m)")
_SCALE: dict[str, int] = {
    **{s: 1000**i for i, s in enumerate(("", "k", "M", "G", "T", "P", "E"))},
    **{s: 1024 ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi"))},
}


def units(resource: str, value: object) -> int:
    """`agent.quantity.resource_units`, in integer arithmetic for the spellings pods and nodes
    almost always use (`2`, `500m`, `16Gi`, an int), which are exact without fractions; any
    other spelling goes to `resource_units`."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value * 1000 if resource == CPU else value
    match = _WHOLE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        return resource_units(resource, value)
    number, suffix = int(match[1]), match[2]
    if suffix == "m":
        return number if resource == CPU else -(-number // 1000)
    return number * _SCALE[suffix] * (1000 if resource == CPU else 1)


def resource_list(raw: Obj | None, where: str) -> ResourceList:
    """Parse a `{name: quantity}` map; ValueError names `where` and the resource."""
    out: ResourceList = {}
    for name, value in (raw or {}).items():
        try:
            out[str(name)] = units(str(name), value)
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
    total.update(pod_level_requests(spec))
    _add(total, resource_list(spec.get("overhead"), "spec.overhead"))
    return {name: amount for name, amount in total.items() if amount}


def pod_level_requests(spec: Obj) -> ResourceList:
    """`spec.resources.requests` (pod-level resources, beta and on by default since 1.34) for
    the resources a pod may set there (cpu, memory, hugepages): each replaces what the
    containers ask in all, as kube-scheduler's `PodRequests` reads them; the others (GPUs,
    extended resources) are the containers' alone. Limits are not read: the API server has
    already defaulted requests from them."""
    raw = (spec.get("resources") or {}).get("requests") or {}
    supported = {
        name: value
        for name, value in raw.items()
        if name in (CPU, MEMORY) or name.startswith(HUGEPAGES_PREFIX)
    }
    return resource_list(supported, "spec.resources.requests")


_EVERY_ADDRESS = frozenset({"", "0.0.0.0", "::"})


def host_ports(spec: Obj) -> tuple[HostPort, ...]:
    """The node ports the pod takes: each `hostPort` of its containers and sidecars (init
    containers with `restartPolicy: Always`), as kube-scheduler's `NodePorts` reads them
    (protocol TCP when unset; an unset, `0.0.0.0` or `::` `hostIP` is every address). A
    `hostNetwork` pod's container ports already carry a `hostPort` (the API server's
    defaulting). ValueError names the field of a port outside 1-65535."""
    found: list[HostPort] = []
    for field in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(field) or ()):
            if field == "initContainers" and container.get("restartPolicy") != "Always":
                continue
            for j, entry in enumerate(container.get("ports") or ()):
                port = entry.get("hostPort")
                if not port:
                    continue
                if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
                    where = f"spec.{field}[{i}].ports[{j}].hostPort"
                    raise ValueError(f"{where}: {port!r} is not a port (1-65535)")
                ip = str(entry.get("hostIP") or "")
                found.append(
                    HostPort(
                        port=port,
                        protocol=str(entry.get("protocol") or "TCP"),
                        ip="" if ip in _EVERY_ADDRESS else ip,
                    )
                )
    return tuple(found)


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


POD_GROUP_LABELS = ("scheduling.x-k8s.io/pod-group", "pod-group.scheduling.sigs.k8s.io")
HUGEPAGES_PREFIX = "hugepages-"


UPSTREAM_GROUP_MARK = "@scheduling.k8s.io"  # `groups.UPSTREAM_MARK` (podspec sits below it)
WORKLOAD_GROUP_MARK = "@workloads.scheduling.k8s.io"  # `groups.WORKLOAD_MARK`
"""Ends the gang name of a 1.35 Workload's pod group: `<workload>/<podGroup>[/<replica key>]`
(no object name holds a `/` or an `@`)."""


def pod_group_name(pod: Obj) -> str | None:
    """The PodGroup the pod joins, or None: ours by its label (the current one, then the legacy
    one), an upstream one by `spec.schedulingGroup.podGroupName`, as its name with
    `UPSTREAM_GROUP_MARK` (see `groups.group_key`), or a 1.35 Workload's pod group by
    `spec.workloadRef` (`workload_gang_name`). ValueError for a pod that names two, or a
    malformed reference."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    ours = next((str(labels[key]) for key in POD_GROUP_LABELS if labels.get(key)), None)
    spec = pod.get("spec") or {}
    group = spec.get("schedulingGroup")
    upstream = group.get("podGroupName") if isinstance(group, Mapping) else None
    if group is not None and not (isinstance(upstream, str) and upstream):
        raise ValueError(f"spec.schedulingGroup.podGroupName: must name a PodGroup, got {group!r}")
    ref = spec.get("workloadRef")
    given = [f"{ours} (label {_label_of(labels)}, scheduling.x-k8s.io)"] if ours else []
    if upstream:
        given.append(f"{upstream} (spec.schedulingGroup.podGroupName, scheduling.k8s.io)")
    workload = _workload_ref(ref) if ref is not None else None
    if workload is not None:
        shown = "/".join(p for p in workload if p)
        given.append(f"{shown} (spec.workloadRef, scheduling.k8s.io/v1alpha1)")
    if len(given) > 1:
        raise ValueError(
            f"names two pod groups, {given[0]} and {given[1]}: a pod joins one gang; remove one"
        )
    if ours is not None:
        return ours
    if upstream:
        return f"{upstream}{UPSTREAM_GROUP_MARK}"
    return None if workload is None else workload_gang_name(*workload)


def _workload_ref(ref: object) -> tuple[str, str, str]:
    """`spec.workloadRef` as (workload, pod group, replica key); ValueError naming the field
    when it is malformed."""
    if not isinstance(ref, Mapping):
        raise ValueError(f"spec.workloadRef: must be an object, got {ref!r}")
    parts = []
    for field in ("name", "podGroup"):
        value = ref.get(field)
        if not isinstance(value, str) or not value:
            raise ValueError(f"spec.workloadRef.{field}: must be a name, got {value!r}")
        parts.append(value)
    replica = ref.get("podGroupReplicaKey") or ""
    if not isinstance(replica, str):
        raise ValueError(f"spec.workloadRef.podGroupReplicaKey: must be a string, got {replica!r}")
    return parts[0], parts[1], replica


def workload_gang_name(workload: str, pod_group: str, replica_key: str = "") -> str:
    """The gang name of the pods whose `spec.workloadRef` names these (one gang per Workload,
    pod group and replica key, as kube-scheduler 1.35 groups them)."""
    parts = (workload, pod_group, replica_key) if replica_key else (workload, pod_group)
    return "/".join(parts) + WORKLOAD_GROUP_MARK


def _label_of(labels: Mapping[str, Any]) -> str:
    return next(key for key in POD_GROUP_LABELS if labels.get(key))


def is_guaranteed(pod: Obj) -> bool:
    """Guaranteed QoS: every container sets cpu and memory limits equal to its requests."""
    spec = pod.get("spec") or {}
    containers = [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]
    if not containers:
        return False
    for container in containers:
        resources = container.get("resources") or {}
        limits = resource_list(resources.get("limits"), "limits")
        requests = {**limits, **resource_list(resources.get("requests"), "requests")}
        for name in (CPU, MEMORY):
            if name not in limits or requests.get(name) != limits[name]:
                return False
    return True


def _tolerations(spec: Obj) -> tuple[Toleration, ...]:
    out = []
    for tol in spec.get("tolerations") or ():
        effect = tol.get("effect") or None
        out.append(
            Toleration(
                key=str(tol.get("key") or ""),
                operator=str(tol.get("operator") or "Equal"),
                value=str(tol.get("value") or ""),
                effect=Effect(effect) if effect else None,
            )
        )
    return tuple(out)


def _affinity_terms(spec: Obj) -> tuple[NodeSelectorTerm, ...]:
    """Required node affinity terms (`matchFields` on the node's name). ValueError names the
    field of an unknown operator or a field other than `metadata.name`."""
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return ()
    where = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    return node_selector_terms(required, where)


def preferred_node_terms(spec: Obj) -> tuple[PreferredNodeTerm, ...]:
    """The pod's `preferredDuringSchedulingIgnoredDuringExecution` node affinity terms, each
    with its weight. ValueError names the field of a weight outside 1-100 or an unknown
    operator."""
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    preferred = node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
    terms = []
    for i, entry in enumerate(preferred):
        where = f"spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
        weight = entry.get("weight")
        if not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= 100:
            raise ValueError(f"{where}.weight: {weight!r} is not a weight (1-100)")
        preference = entry.get("preference") or {}
        terms.append(
            PreferredNodeTerm(
                weight=weight,
                expressions=requirements(
                    preference.get("matchExpressions"), f"{where}.preference.matchExpressions"
                ),
                fields=requirements(
                    preference.get("matchFields"), f"{where}.preference.matchFields"
                ),
            )
        )
    return tuple(terms)


def _split_resources(requests: Mapping[str, int]) -> dict[str, Any]:
    fields: dict[str, Any] = {"hugepages": {}, "extended": {}, "mig": {}}
    simple = {CPU: "cpu_milli", MEMORY: "memory", EPHEMERAL_STORAGE: "ephemeral_storage"}
    for name, amount in requests.items():
        if name in simple:
            fields[simple[name]] = amount
        elif name == GPU_RESOURCE:
            fields["gpus"] = amount
        elif (profile := mig_profile(name)) is not None:
            fields["mig"][profile] = amount
        elif name.startswith(HUGEPAGES_PREFIX):
            fields["hugepages"][name] = amount
        else:
            fields["extended"][name] = amount
    return fields


def _share_fields(pod: Obj, fields: dict[str, Any]) -> None:
    """The pod's share containers (DESIGN §12) into `fields`: explicit shares take the place of
    whole GPUs (their replicas stay in the resource check as extended resources) and the
    never-advertised gpu-memory / gpu-compute leave it; a plain GPU request also gets its
    equal-split reading for nodes whose `nvidia.com/gpu` is shared. ShareRequestError (a
    ValueError) names the container and field of a malformed request."""
    extended = fields["extended"]
    extended.pop(GPU_MEMORY, None)
    extended.pop(GPU_COMPUTE, None)
    shares = pod_shares(pod)
    if shares:
        _no_whole_beside(pod, shares)
        if fields.get("gpus"):
            extended[GPU_RESOURCE] = fields.pop("gpus")
        fields["shares"] = shares
        fields["share_reuse"] = _reuse(pod, shares)
    elif fields.get("gpus"):
        try:
            fields["split"] = pod_shares(pod, (GPU_RESOURCE,))
        except ShareRequestError:
            fields["split"] = ()  # GPUs beside MIG devices: never equal splits


def _reuse(pod: Obj, shares: tuple[ContainerShare, ...]) -> tuple[int, ...]:
    """Which share container's replica each one runs on, as the kubelet's device manager hands
    devices out: an init container's (not a sidecar's) go to the later init containers and to
    the first app container asking that resource. One-replica shares only (a sized share is
    one); () when every container holds its own."""
    spec = pod.get("spec") or {}
    sidecars = {
        str(c.get("name") or "")
        for c in spec.get("initContainers") or ()
        if c.get("restartPolicy") == "Always"
    }
    pool: dict[str, int] = {}  # resource -> the share holding the reusable replica
    out: list[int] = []
    for i, share in enumerate(shares):
        held = pool.get(share.resource)
        if share.replicas != 1 or (share.init and share.container in sidecars) or held is None:
            out.append(i)
            if share.init and share.replicas == 1 and share.container not in sidecars:
                pool[share.resource] = i
            continue
        out.append(held)
        if not share.init:
            del pool[share.resource]
    return tuple(out) if any(j != i for i, j in enumerate(out)) else ()


def _no_whole_beside(pod: Obj, shares: tuple[ContainerShare, ...]) -> None:
    named = {(s.init, s.container) for s in shares}
    spec = pod.get("spec") or {}
    for field, init in (("initContainers", True), ("containers", False)):
        for i, container in enumerate(spec.get(field) or ()):
            if (init, str(container.get("name") or "")) in named:
                continue
            asks = container_requests(container, f"spec.{field}[{i}]")
            devices = sorted(n for n in asks if n == GPU_RESOURCE or mig_profile(n) is not None)
            if devices:
                raise ShareRequestError(
                    f"spec.{field}[{i}] ({container.get('name', '')}): whole GPUs or MIG devices "
                    f"({', '.join(devices)}) beside a share in another container of the pod"
                )


def pod_request(pod: Obj, key: ObjectKey | None = None) -> PodRequest:
    """The placement view of a pod, under `key` (default: the pod's own key). ValueError (naming
    the field) for a malformed pod."""
    spec = pod.get("spec") or {}
    key = key_of(pod) if key is None else key
    try:
        fields = _split_resources(pod_requests(pod))
        _share_fields(pod, fields)
        terms = _affinity_terms(spec)
        read = inter_pod_rules(pod)
        meta = pod.get("metadata") or {}
        return PodRequest(
            key=key,
            **fields,
            node_selector={str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()},
            affinity=terms,
            tolerations=_tolerations(spec),
            priority=int(spec.get("priority") or 0),
            guaranteed=is_guaranteed(pod),
            pod_group=pod_group_name(pod),
            namespace=str(meta.get("namespace") or DEFAULT_NAMESPACE),
            labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
            inter_pod=read.rules,
            preferences=read.preferences,
            host_ports=host_ports(spec),
            preferred_affinity=preferred_node_terms(spec),
        )
    except ShareRequestError as exc:
        text = str(exc)
        raise ValueError(text if text.startswith("pod ") else f"pod {key}: {text}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"pod {key}: {exc}") from None
