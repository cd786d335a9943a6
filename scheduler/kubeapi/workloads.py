"""The upstream gang API (`scheduling.k8s.io` PodGroup, DESIGN §15): which version the API server
serves, the collection the informer watches, and the status write.

Kubernetes has moved the API quickly: 1.36 serves `v1alpha2`, 1.37 `v1beta1` (and `v1alpha3`
when alpha APIs are on). `discover` asks the server, newest first, and returns the first version
whose resource list holds `podgroups`; on 1.35, which serves only `v1alpha1` Workloads, those;
None when the server serves neither (an older cluster, or the `GenericWorkload` gate off): the
scheduler then watches only its own PodGroups.

The condition kube-scheduler writes on a PodGroup changed its name with the API: 1.36's
`v1alpha2` has `PodGroupScheduled`, 1.37 (`v1alpha3`, `v1beta1`) `PodGroupInitiallyScheduled`
(read from the 1.37.2 binaries): `condition_for` gives the one of an object's apiVersion.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.kubeapi.calls import Kind
from scheduler.kubeapi.client import KubeClient, Read, discovery_read

__all__ = [
    "COMPOSITES",
    "CONDITION_INITIALLY_SCHEDULED",
    "CONDITION_SCHEDULED",
    "GROUP",
    "KIND_NAME",
    "PLURAL",
    "VERSIONS",
    "WORKLOADS_KIND_NAME",
    "Served",
    "composites_served",
    "condition_for",
    "discover",
    "discovery",
    "patch_status",
]

GROUP, PLURAL = "scheduling.k8s.io", "podgroups"
KIND_NAME = f"{PLURAL}.{GROUP}"
"""The informer's name for the collection (our own PodGroups are plain `podgroups`)."""
WORKLOADS_PLURAL, WORKLOADS_VERSION = "workloads", "v1alpha1"
WORKLOADS_KIND_NAME = f"{WORKLOADS_PLURAL}.{GROUP}"
"""1.35's API (`v1alpha1`): no PodGroup objects; pods name a pod group of a Workload in
`spec.workloadRef`, and the scheduler watches the Workloads instead."""
COMPOSITES = Kind("compositepodgroups.scheduling.k8s.io", GROUP, "v1alpha3", "compositepodgroups")
"""1.37's CompositePodGroups (alpha: the `CompositePodGroup` gate and alpha APIs on)."""
CONDITION_SCHEDULED = "PodGroupScheduled"  # v1alpha2 (Kubernetes 1.36)
CONDITION_INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"  # v1alpha3, v1beta1 (1.37)
VERSIONS: tuple[tuple[str, str], ...] = (
    ("v1beta1", CONDITION_INITIALLY_SCHEDULED),
    ("v1alpha3", CONDITION_INITIALLY_SCHEDULED),
    ("v1alpha2", CONDITION_SCHEDULED),
)
"""The versions read, newest first, and the condition kube-scheduler writes in each."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Served:
    """The served version of upstream PodGroups (the informer's `kind`) and the condition
    kube-scheduler writes in it."""

    version: str
    condition: str
    plural: str = PLURAL

    @property
    def kind(self) -> Kind:
        return Kind(f"{self.plural}.{GROUP}", GROUP, self.version, self.plural)

    @property
    def api_version(self) -> str:
        return f"{GROUP}/{self.version}"

    def describe(self) -> str:
        """What the scheduler watches, for its start-up line."""
        return f"{self.plural} {self.api_version}"


def condition_for(api_version: str) -> str:
    """The condition kube-scheduler writes on a PodGroup of `api_version` (a version this module
    does not know: the newest one's)."""
    version = api_version.rpartition("/")[2]
    return next((c for v, c in VERSIONS if v == version), CONDITION_INITIALLY_SCHEDULED)


def _resources(kube: KubeClient, version: str) -> list[str]:
    """The resource names `GROUP/version` serves; [] when the server does not serve it."""
    body = kube.resources(GROUP, version) or {}
    return [str(r.get("name")) for r in body.get("resources") or () if isinstance(r, Mapping)]


def discovery() -> list[Read]:
    """The reads `discover` may make, newest version first (`scheduler.cli.run` sends them
    early)."""
    versions = [version for version, _ in VERSIONS]
    return [discovery_read(GROUP, version) for version in (*versions, WORKLOADS_VERSION)]


def discover(kube: KubeClient) -> Served | None:
    """The newest served version that holds PodGroups; else, on a 1.35 server with the
    `GenericWorkload` gate, its `v1alpha1` Workloads (no condition is written there); else None.
    ApiError when the server could not answer (not a 404)."""
    for version, condition in VERSIONS:
        if PLURAL in _resources(kube, version):
            return Served(version=version, condition=condition)
    if WORKLOADS_PLURAL in _resources(kube, WORKLOADS_VERSION):
        return Served(version=WORKLOADS_VERSION, condition="", plural=WORKLOADS_PLURAL)
    return None


def composites_served(kube: KubeClient, served: Served | None) -> bool:
    """Whether the server serves CompositePodGroups (never without PodGroups)."""
    if served is None or served.plural != PLURAL:
        return False
    return COMPOSITES.plural in _resources(kube, COMPOSITES.version)


def patch_status(
    kube: KubeClient, api_version: str, namespace: str, name: str, status: Mapping[str, Any]
) -> None:
    """Merge `status` into the upstream PodGroup's status subresource, in the object's own
    `api_version` (`scheduling.k8s.io/<version>`, as it was read)."""
    version = api_version.rpartition("/")[2]
    kube.patch_status(Kind(KIND_NAME, GROUP, version, PLURAL), namespace, name, status)
