"""The resource types the fake API server serves: built-ins, and custom resources from CRDs."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.fakeapi.schema import rule_problems, version_schemas

NRT_GROUP = "topology.node.k8s.io"
PODGROUP_GROUP = "scheduling.x-k8s.io"
QUEUE_GROUP = "scheduling.gputopo.io"
APPROVAL_ANNOTATION = "api-approved.kubernetes.io"
PROTECTED_GROUP_SUFFIXES = (".k8s.io", ".kubernetes.io")

_POD_FIELDS = (
    "spec.nodeName",
    "spec.schedulerName",
    "spec.restartPolicy",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
)
_EVENT_FIELDS = (
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceType:
    """One REST resource: where it lives, what it is called, which subresources it has."""

    group: str
    versions: tuple[str, ...]
    plural: str
    kind: str
    namespaced: bool
    status_subresource: bool = False
    builtin: bool = True
    field_labels: frozenset[str] = frozenset()
    indexed_fields: tuple[str, ...] = ()
    gates: frozenset[str] = frozenset()  # the feature gates it is served with (see its module)
    # version -> openAPIV3Schema (custom resources only)
    schemas: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def qualified(self) -> str:
        """`pods`, or `noderesourcetopologies.topology.node.k8s.io`: the name in error messages."""
        return self.plural if not self.group else f"{self.plural}.{self.group}"

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    def api_version(self, version: str) -> str:
        return version if not self.group else f"{self.group}/{version}"

    def supports_field(self, label: str) -> bool:
        if label == "metadata.name" or (label == "metadata.namespace" and self.namespaced):
            return True
        return label in self.field_labels


def _core(plural: str, kind: str, namespaced: bool, **kw: Any) -> ResourceType:
    return ResourceType(
        group="", versions=("v1",), plural=plural, kind=kind, namespaced=namespaced, **kw
    )


def _grouped(group: str, plural: str, kind: str, namespaced: bool, **kw: Any) -> ResourceType:
    return ResourceType(
        group=group, versions=("v1",), plural=plural, kind=kind, namespaced=namespaced, **kw
    )


def builtin_types() -> list[ResourceType]:
    """The built-in resources; custom resources come from CRDs."""
    from tests.fakeapi.dra import dra_types  # here: tests.fakeapi.dra imports this module

    pods = _core(
        "pods",
        "Pod",
        True,
        status_subresource=True,
        field_labels=frozenset(_POD_FIELDS),
        indexed_fields=("spec.nodeName",),
    )
    status = {"status_subresource": True}
    return [
        _core("namespaces", "Namespace", False, field_labels=frozenset({"status.phase"}), **status),
        _core("nodes", "Node", False, field_labels=frozenset({"spec.unschedulable"}), **status),
        pods,
        _core("events", "Event", True, field_labels=frozenset(_EVENT_FIELDS)),
        _core("configmaps", "ConfigMap", True),
        _grouped("coordination.k8s.io", "leases", "Lease", True),
        _grouped("events.k8s.io", "events", "Event", True),
        _grouped("scheduling.k8s.io", "priorityclasses", "PriorityClass", False),
        _grouped("policy", "poddisruptionbudgets", "PodDisruptionBudget", True, **status),
        _grouped(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            False,
            **status,
        ),
        *dra_types(),
    ]


def crd_problems(crd: Mapping[str, Any]) -> list[str]:
    """What a real API server would reject in this CRD (an empty list when it is acceptable)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group = spec.get("group") or ""
    problems = []
    if not group:
        problems.append("spec.group: Required value")
    if not names.get("plural") or not names.get("kind"):
        problems.append("spec.names: Required value: plural and kind")
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        problems.append("spec.scope: Unsupported value: must be Namespaced or Cluster")
    if not [v for v in spec.get("versions") or [] if v.get("served")]:
        problems.append("spec.versions: Invalid value: must have at least one served version")
    expected = f"{names.get('plural')}.{group}"
    if (crd.get("metadata") or {}).get("name") != expected:
        problems.append(
            f"metadata.name: Invalid value: must be spec.names.plural+'.'+spec.group ({expected})"
        )
    for name, schema in version_schemas(crd).items():
        problems += [f"spec.versions[{name}].schema.{p}" for p in rule_problems(schema)]
    annotations = (crd.get("metadata") or {}).get("annotations") or {}
    protected = group.endswith(PROTECTED_GROUP_SUFFIXES) or group in ("k8s.io", "kubernetes.io")
    if protected and not annotations.get(APPROVAL_ANNOTATION):
        problems.append(
            f"metadata.annotations[{APPROVAL_ANNOTATION}]: Required value: protected groups must "
            "have "
            'approval annotation "api-approved.kubernetes.io", see '
            "https://github.com/kubernetes/enhancements/pull/1111"
        )
    return problems


def crd_to_type(crd: Mapping[str, Any]) -> ResourceType:
    """The resource type an (acceptable) CRD defines."""
    spec = crd["spec"]
    versions = [v for v in spec["versions"] if v.get("served")]
    return ResourceType(
        group=spec["group"],
        versions=tuple(v["name"] for v in versions),
        plural=spec["names"]["plural"],
        kind=spec["names"]["kind"],
        namespaced=spec["scope"] == "Namespaced",
        status_subresource=any("status" in (v.get("subresources") or {}) for v in versions),
        builtin=False,
        schemas=version_schemas(crd),
    )


def _crd(
    group: str,
    plural: str,
    kind: str,
    scope: str,
    versions: list[dict[str, Any]],
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}", "annotations": annotations or {}},
        "spec": {
            "group": group,
            "names": {
                "plural": plural,
                "singular": kind.lower(),
                "kind": kind,
                "listKind": kind + "List",
            },
            "scope": scope,
            "versions": versions,
        },
    }


def _version(name: str, storage: bool, status: bool = False) -> dict[str, Any]:
    schema = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    version: dict[str, Any] = {"name": name, "served": True, "storage": storage, "schema": schema}
    if status:
        version["subresources"] = {"status": {}}
    return version


def nrt_crd() -> dict[str, Any]:
    """noderesourcetopologies.topology.node.k8s.io: cluster-scoped, v1alpha1 + v1alpha2."""
    crd = _crd(
        NRT_GROUP,
        "noderesourcetopologies",
        "NodeResourceTopology",
        "Cluster",
        [_version("v1alpha1", False), _version("v1alpha2", True)],
        {APPROVAL_ANNOTATION: "https://github.com/kubernetes/enhancements/pull/1870"},
    )
    crd["spec"]["names"]["shortNames"] = ["node-res-topo"]
    return crd


def podgroup_crd() -> dict[str, Any]:
    """podgroups.scheduling.x-k8s.io: namespaced, v1alpha1, with a status subresource."""
    crd = _crd(
        PODGROUP_GROUP,
        "podgroups",
        "PodGroup",
        "Namespaced",
        [_version("v1alpha1", True, status=True)],
    )
    crd["spec"]["names"]["shortNames"] = ["pg", "pgs"]
    return crd


def queue_crd() -> dict[str, Any]:
    """queues.scheduling.gputopo.io: cluster-scoped, v1alpha1, with a status subresource.

    The schema keeps every field (as for the NRT and PodGroup CRDs here), so malformed queues
    reach the scheduler; register `daemonset/crds/queue.yaml` for the shipped schema.
    """
    crd = _crd(QUEUE_GROUP, "queues", "Queue", "Cluster", [_version("v1alpha1", True, status=True)])
    crd["spec"]["names"]["shortNames"] = ["q"]
    return crd


def elasticquota_crd() -> dict[str, Any]:
    """elasticquotas.scheduling.x-k8s.io (scheduler-plugins' CapacityScheduling): namespaced,
    v1alpha1, with a status subresource."""
    crd = _crd(
        PODGROUP_GROUP,
        "elasticquotas",
        "ElasticQuota",
        "Namespaced",
        [_version("v1alpha1", True, status=True)],
    )
    crd["spec"]["names"]["shortNames"] = ["eq", "eqs"]
    return crd


class Registry:
    """The served resource types, by (group, version, plural) or by a short key. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._types: dict[tuple[str, str], ResourceType] = {}

    def add(self, rt: ResourceType) -> None:
        with self._lock:
            self._types[(rt.group, rt.plural)] = rt

    def remove(self, group: str, plural: str) -> None:
        with self._lock:
            self._types.pop((group, plural), None)

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        with self._lock:
            rt = self._types.get((group, plural))
        return rt if rt is not None and version in rt.versions else None

    def all(self) -> list[ResourceType]:
        with self._lock:
            return list(self._types.values())

    def resolve(self, key: str) -> ResourceType:
        """`pods`, `leases`, `noderesourcetopologies` or a qualified `events.events.k8s.io`."""
        with self._lock:
            types = list(self._types.values())
        exact = [rt for rt in types if rt.qualified == key]
        if exact:
            return exact[0]
        by_plural = [rt for rt in types if rt.plural == key]
        if len(by_plural) == 1:
            return by_plural[0]
        if not by_plural:
            raise KeyError(f"fake API server: no resource type {key!r} is served")
        raise KeyError(f"fake API server: resource type {key!r} is ambiguous; qualify it")
