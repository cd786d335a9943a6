"""Pod rules of a real API server: defaults, validation, immutable spec, binding, deletion."""

from __future__ import annotations

import re
from typing import Any

from tests.fakeapi.errors import ApiError, conflict, invalid
from tests.fakeapi.objects import parse_time
from tests.fakeapi.resources import ResourceType
from tests.fakeapi.store import DELETE, Delete, Obj, clone

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|[KMGTPE]i|[numkMGTPE])?$")
_NATIVE = ("cpu", "memory", "ephemeral-storage", "storage", "pods")
_UPDATABLE = (
    "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
    "`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)
_DEFAULT_TOLERATIONS = [
    {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
]


def _is_extended(resource: str) -> bool:
    if resource in _NATIVE or resource.startswith(("hugepages-", "requests.")):
        return False
    domain = resource.split("/", 1)[0] if "/" in resource else ""
    return bool(domain) and not domain.endswith("kubernetes.io")


def _container_problems(field: str, container: Any) -> list[str]:
    if not isinstance(container, dict):
        return [f"{field}: Invalid value: must be an object"]
    problems = []
    if not _DNS_LABEL.match(str(container.get("name", ""))):
        problems.append(
            f"{field}.name: Invalid value: {container.get('name')!r}: a lowercase RFC 1123 label"
        )
    if not container.get("image"):
        problems.append(f"{field}.image: Required value")
    resources = container.get("resources") or {}
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    for kind, values in (("limits", limits), ("requests", requests)):
        for res, qty in values.items():
            if not _QUANTITY.match(str(qty)):
                problems.append(
                    f"{field}.resources.{kind}[{res}]: Invalid value: {qty!r}: quantities must "
                    "match the regular expression"
                )
    for res, qty in requests.items():
        if not _is_extended(res):
            continue
        if res not in limits:
            problems.append(
                f"{field}.resources.limits: Required value: Limit must be set for non "
                "overcommitable resources"
            )
        elif str(limits[res]) != str(qty):
            problems.append(
                f"{field}.resources.requests[{res}]: Invalid value: {qty!r}: must be equal to "
                f"{res} limit of {limits[res]}"
            )
    return problems


def validate(pod: Obj) -> list[str]:
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return ["spec: Required value"]
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        return ["spec.containers: Required value"]
    problems = []
    for list_name in ("initContainers", "containers"):
        for n, container in enumerate(spec.get(list_name) or []):
            problems += _container_problems(f"spec.{list_name}[{n}]", container)
    names = [c.get("name") for c in containers if isinstance(c, dict)]
    if len(names) != len(set(names)):
        problems.append("spec.containers: Duplicate value: container names must be unique")
    if spec.get("nodeName") and spec.get("schedulingGates"):
        problems.append(
            "spec.nodeName: Forbidden: cannot be set until all schedulingGates have been cleared"
        )
    return problems


def _default_container(container: Obj, host_network: bool) -> None:
    for port in container.get("ports") or ():
        port.setdefault("protocol", "TCP")
        if host_network:  # the container's port is the node's: `hostPort` defaults to it
            port.setdefault("hostPort", port.get("containerPort"))
    resources = container.setdefault("resources", {})
    limits = resources.get("limits") or {}
    if limits:
        requests = resources.setdefault("requests", {})
        for res, qty in limits.items():
            requests.setdefault(res, qty)
    image = str(container.get("image", ""))
    latest = ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest")
    container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")


def qos_class(spec: Obj) -> str:
    containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
    guaranteed, empty = True, True
    for container in containers:
        resources = container.get("resources") or {}
        limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
        if limits or requests:
            empty = False
        for res in ("cpu", "memory"):
            if res not in limits or str(requests.get(res, limits[res])) != str(limits[res]):
                guaranteed = False
    if empty:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def prepare_create(pod: Obj) -> Obj:
    """Defaults and validation of a new pod; the status sent is dropped, as by the pod strategy."""
    problems = validate(pod)
    if problems:
        raise invalid(_pods(), pod["metadata"].get("name", ""), problems)
    spec = pod["spec"]
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    for container in list(spec["containers"]) + list(spec.get("initContainers") or []):
        _default_container(container, bool(spec.get("hostNetwork")))
    tolerations = spec.setdefault("tolerations", [])
    for default in _DEFAULT_TOLERATIONS:
        if not any(
            t.get("key") == default["key"] and t.get("effect") in ("NoExecute", None, "")
            for t in tolerations
        ):
            tolerations.append(dict(default))
    pod["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}
    return pod


def _mutable_view(spec: Obj) -> Obj:
    view = clone(spec)
    for key in (
        "activeDeadlineSeconds",
        "tolerations",
        "terminationGracePeriodSeconds",
        "schedulingGates",
    ):
        view.pop(key, None)
    for list_name in ("containers", "initContainers"):
        for container in view.get(list_name) or []:
            container.pop("image", None)
    return view


def check_update(old: Obj, new: Obj) -> None:
    """422 for spec changes a real server forbids (schedulerName and nodeName included)."""
    name = old["metadata"]["name"]
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    if _mutable_view(old_spec) != _mutable_view(new_spec):
        raise invalid(
            _pods(),
            name,
            [f"spec: Forbidden: pod updates may not change fields other than {_UPDATABLE}"],
        )
    old_gates = {g.get("name") for g in old_spec.get("schedulingGates") or []}
    for gate in new_spec.get("schedulingGates") or []:
        if gate.get("name") not in old_gates:
            raise invalid(
                _pods(),
                name,
                [
                    "spec.schedulingGates: Forbidden: only deletion is allowed, but found new "
                    f"scheduling gate '{gate.get('name')}'"
                ],
            )
    old_tol = old_spec.get("tolerations") or []
    if any(t not in (new_spec.get("tolerations") or []) for t in old_tol):
        raise invalid(
            _pods(),
            name,
            [
                "spec.tolerations: Forbidden: existing toleration can not be modified except its "
                "tolerationSeconds"
            ],
        )


def _pods() -> ResourceType:
    return ResourceType(group="", versions=("v1",), plural="pods", kind="Pod", namespaced=True)


def bind(pod: Obj | None, binding: Obj, name: str, now: str) -> Obj:
    """The pod after a `pods/binding` POST; 409 when it is already bound (a lost bind race)."""
    rt = _pods()
    if pod is None:
        raise ApiError(404, f'pods "{name}" not found', details={"name": name, "kind": "pods"})
    target = binding.get("target") or {}
    if not target.get("name"):
        raise invalid(rt, name, ["target.name: Required value"])
    if target.get("kind") not in (None, "", "Node"):
        raise invalid(rt, name, [f"target.kind: Unsupported value: {target.get('kind')!r}"])
    if pod["metadata"].get("deletionTimestamp"):
        raise conflict(
            rt, name, f"pod {name} is being deleted, cannot be assigned to a host", "binding"
        )
    node = (pod.get("spec") or {}).get("nodeName")
    if node:
        raise conflict(rt, name, f'pod {name} is already assigned to node "{node}"', "binding")
    new = clone(pod)
    new["spec"]["nodeName"] = target["name"]
    annotations = (binding.get("metadata") or {}).get("annotations") or {}
    if annotations:
        new["metadata"].setdefault("annotations", {}).update(annotations)
    status = new.setdefault("status", {})
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
    conditions.append(
        {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
    )
    status["conditions"] = conditions
    return new


def delete(pod: Obj, grace: int | None, now_s: float, fmt: Any) -> Obj | Delete:
    """Graceful deletion (`BeforeDelete` + the pod strategy's `CheckGracefulDelete`).

    `grace` is the request's `gracePeriodSeconds` (None: the pod's own
    `terminationGracePeriodSeconds`; negative: 1). A bound, unfinished pod stays Terminating with
    `deletionTimestamp` = now + grace (no kubelet here); unbound or finished pods go at once. A
    second delete may only shorten the grace, counted from the first request.
    """
    meta = pod["metadata"]
    if grace is not None and grace < 0:
        grace = 1
    if meta.get("deletionTimestamp"):
        return _shortened(pod, grace, fmt)
    spec = pod.get("spec") or {}
    if grace is None:
        grace = int(spec.get("terminationGracePeriodSeconds", 30))
        grace = 1 if grace < 0 else grace
    phase = (pod.get("status") or {}).get("phase")
    if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
        grace = 0
    if grace == 0 and not meta.get("finalizers"):
        return DELETE
    new = clone(pod)
    new["metadata"]["deletionTimestamp"] = fmt(now_s + grace)
    new["metadata"]["deletionGracePeriodSeconds"] = grace
    return new


def _shortened(pod: Obj, grace: int | None, fmt: Any) -> Obj | Delete:
    """A pod already Terminating: a shorter grace moves `deletionTimestamp` earlier (from the
    first request's time); anything else leaves it pending."""
    meta = pod["metadata"]
    current = meta.get("deletionGracePeriodSeconds")
    if not current:
        return pod if meta.get("finalizers") else DELETE
    if grace is None or grace >= current:
        return pod
    if grace == 0 and not meta.get("finalizers"):
        return DELETE
    requested = parse_time(meta["deletionTimestamp"]) - current
    new = clone(pod)
    new["metadata"]["deletionTimestamp"] = fmt(requested + grace)
    new["metadata"]["deletionGracePeriodSeconds"] = grace
    return new


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def check_status_update(new: Obj) -> None:
    """422 for a `status.extendedResourceClaimStatus` (KEP-5004) the real server refuses
    (`validatePodExtendedResourceClaimStatus`): at least one request mapping, each naming a
    container of the pod whose requests hold the resource and a DNS-1123 label as request,
    none twice, and a claim name."""
    status = (new.get("status") or {}).get("extendedResourceClaimStatus")
    if status is None:
        return
    spec = new.get("spec") or {}
    containers = {
        c.get("name"): (c.get("resources") or {}).get("requests") or {}
        for field in ("initContainers", "containers")
        for c in spec.get(field) or ()
    }
    path = "status.extendedResourceClaimStatus"
    causes: list[str] = []
    mappings = status.get("requestMappings") or []
    if not mappings:
        causes.append(
            f"{path}.requestMappings: Required value: at least one request mapping is required"
        )
    seen = set()
    for i, m in enumerate(mappings):
        at = f"{path}.requestMappings[{i}]"
        container, resource, request = (
            m.get("containerName"),
            m.get("resourceName"),
            m.get("requestName"),
        )
        if container not in containers:
            causes.append(
                f'{at}.containerName: Invalid value: "{container}": must match the name of an '
                "entry in spec.initContainers.name or spec.containers.name"
            )
        elif resource not in containers[container]:
            causes.append(
                f'{at}.resourceName: Invalid value: "{resource}": must match the extended '
                "resource name of an entry in spec.initContainers.resources.requests or "
                "spec.containers.resources.requests"
            )
        if not isinstance(request, str) or len(request) > 63 or not _DNS_LABEL.match(request):
            causes.append(
                f'{path}.requestName: Invalid value: "{request}": a lowercase RFC 1123 label '
                "must consist of lower case alphanumeric characters or '-'"
            )  # the real server names the field without the mapping's index
        if (container, resource, request) in seen:
            causes.append(f'{at}.containerName: Duplicate value: "{container}"')
        seen.add((container, resource, request))
    if not status.get("resourceClaimName"):
        causes.append(f"{path}.resourceClaimName: Required value")
    if causes:
        raise invalid(_pods(), new["metadata"]["name"], causes)
