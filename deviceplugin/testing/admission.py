"""The kubelet's pod admission, as its device manager does it, on top of the `KubeletEmulator`.

What a device plugin can observe of a real kubelet (v1.28's `HandlePodAdditions` and device
manager), and what share allocation (DESIGN §12) depends on, so that wrong code fails here too:

- `admit(*pods)` is one batch of new pods: admitted one at a time, oldest first (creation time;
  ties keep the batch's order), as the kubelet sorts a batch; separate calls are separate batches,
  admitted in call order.
- A pod enters the PodResources `List` (every app container, no devices) the moment its own
  admission starts, before any `Allocate`; the batch's later pods are not listed yet. Init
  containers are never listed. An app container's devices are listed once its `Allocate` answered.
- Containers are allocated init containers first, then app containers, in spec order; per
  container and device resource, one `Allocate` naming that container alone. Devices come first
  from the pod's reusable set (what its init containers got: an app container asking the same
  resource is handed the init container's devices again, without `GetPreferredAllocation`), then
  from healthy minus in use, through `GetPreferredAllocation` when the plugin offers it.
- A failed `Allocate` rejects the pod (`UnexpectedAdmissionError`): it leaves the `List` and its
  devices are free again. `remove(pod)` deletes an admitted pod the same way.
- `reallocate(pod)`: the device manager re-issuing `Allocate` for a running pod's containers with
  the devices its checkpoint holds (the node-restart path of `GetDeviceRunContainerOptions`).

Extended resources no plugin registered are skipped, as the kubelet drops resources its node does
not advertise before admission (`removeMissingExtendedResources`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import grpc

from agent.availability import ContainerGrant, DeviceGrant, PodGrant
from deviceplugin._pb import deviceplugin_pb2 as pb
from deviceplugin.testing.kubelet import KubeletEmulator
from deviceplugin.testing.podresources_server import FakePodResourcesServer

UNEXPECTED_ADMISSION_ERROR = "UnexpectedAdmissionError"


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerAsk:
    """One container's device requests (resource -> count), as its limits say them."""

    name: str
    devices: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class EmulatedPod:
    namespace: str
    name: str
    uid: str
    created: float = 0.0  # creationTimestamp, seconds
    init_containers: tuple[ContainerAsk, ...] = ()
    containers: tuple[ContainerAsk, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def from_manifest(cls, pod: Mapping[str, Any]) -> EmulatedPod:
        """From a Pod object as the API server returns it (its limits' extended resources)."""
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        stamp = meta.get("creationTimestamp")
        created = datetime.fromisoformat(str(stamp).replace("Z", "+00:00")) if stamp else None
        return cls(
            namespace=meta.get("namespace", "default"),
            name=meta["name"],
            uid=meta.get("uid", ""),
            created=created.timestamp() if created else 0.0,
            init_containers=tuple(_ask(c) for c in spec.get("initContainers") or ()),
            containers=tuple(_ask(c) for c in spec.get("containers") or ()),
        )


def _ask(container: Mapping[str, Any]) -> ContainerAsk:
    limits = (container.get("resources") or {}).get("limits") or {}
    devices = {
        name: int(str(value))
        for name, value in limits.items()
        if "/" in name and "kubernetes.io/" not in name and str(value).isdigit()
    }
    return ContainerAsk(name=container["name"], devices=devices)


@dataclass(slots=True)
class Admission:
    """One pod's admission: per container, resource -> the device IDs and the plugin's answer."""

    pod: EmulatedPod
    devices: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)
    responses: dict[str, dict[str, pb.ContainerAllocateResponse]] = field(default_factory=dict)
    error: str | None = None  # why the pod was rejected (UnexpectedAdmissionError)
    allocate_calls: int = 0
    allocate_seconds: list[float] = field(
        default_factory=list
    )  # each Allocate, as the kubelet waited

    @property
    def admitted(self) -> bool:
        return self.error is None

    def env(self, container: str, resource: str) -> dict[str, str]:
        return dict(self.responses[container][resource].envs)


class PodAdmitter:
    """Admits pods through `kubelet`'s plugins and lists them on `podresources`."""

    def __init__(self, kubelet: KubeletEmulator, podresources: FakePodResourcesServer) -> None:
        self.kubelet = kubelet
        self.podresources = podresources
        self.admissions: dict[str, Admission] = {}  # by pod key, in admission order
        self._lock = threading.Lock()  # one admission at a time, as the kubelet's sync loop

    def admit(self, *pods: EmulatedPod) -> list[Admission]:
        """One batch: oldest first; each pod's result in admission order."""
        with self._lock:
            ordered = sorted(pods, key=lambda p: p.created)
            return [self._admit(pod) for pod in ordered]

    def remove(self, pod: EmulatedPod) -> None:
        """The pod was deleted: unlisted, its devices free."""
        with self._lock:
            admission = self.admissions.pop(pod.key, None)
            if admission is not None:
                self._release(admission)
            self.podresources.remove_pod(pod.namespace, pod.name)

    def reallocate(self, pod: EmulatedPod) -> Admission:
        """Allocate again, per container, with the devices the checkpoint holds."""
        with self._lock:
            admission = self.admissions[pod.key]
            for container, by_resource in admission.devices.items():
                for resource, ids in by_resource.items():
                    response = self.kubelet.allocate(resource, ids).container_responses[0]
                    admission.responses[container][resource] = response
                    admission.allocate_calls += 1
            return admission

    def _admit(self, pod: EmulatedPod) -> Admission:
        admission = Admission(pod=pod)
        self.admissions[pod.key] = admission
        self._list(admission)
        reusable: dict[str, set[str]] = {}
        try:
            for ask in pod.init_containers:
                self._container(admission, ask, reusable, init=True)
            for ask in pod.containers:
                self._container(admission, ask, reusable, init=False)
        except (grpc.RpcError, ValueError) as exc:
            admission.error = f"{UNEXPECTED_ADMISSION_ERROR}: {_reason(exc)}"
            self._release(admission)
            del self.admissions[pod.key]
            self.podresources.remove_pod(pod.namespace, pod.name)
        return admission

    def _container(
        self, admission: Admission, ask: ContainerAsk, reusable: dict[str, set[str]], *, init: bool
    ) -> None:
        registered = self.kubelet.resources()
        for resource, count in sorted(ask.devices.items()):
            if resource not in registered or count == 0:
                continue
            pool = reusable.setdefault(resource, set())
            ids = self._choose(resource, count, pool)
            start = time.perf_counter()
            response = self.kubelet.allocate(resource, ids).container_responses[0]
            admission.allocate_seconds.append(time.perf_counter() - start)
            admission.allocate_calls += 1
            self.kubelet.in_use.setdefault(resource, set()).update(ids)
            admission.devices.setdefault(ask.name, {})[resource] = ids
            admission.responses.setdefault(ask.name, {})[resource] = response
            if init:
                pool.update(ids)
            else:
                pool.difference_update(ids)
        if not init:
            self._list(admission)

    def _choose(self, resource: str, count: int, reusable: set[str]) -> tuple[str, ...]:
        """The device manager's `devicesToAllocate` without a topology hint."""
        chosen = sorted(reusable)[:count]
        if len(chosen) == count:
            return tuple(chosen)
        needed = count - len(chosen)
        in_use = self.kubelet.in_use.get(resource, set())
        available = sorted(self.kubelet.healthy(resource) - in_use)
        if len(available) < needed:
            raise ValueError(
                f"requested number of devices unavailable for {resource}. "
                f"Requested: {needed}, Available: {len(available)}"
            )
        if self.kubelet.offers_preferred(resource):
            preferred = self.kubelet.preferred(resource, [*available, *chosen], chosen, count)
            free = set(available)
            chosen += [i for i in preferred if i in free and i not in chosen][: count - len(chosen)]
        chosen += [i for i in available if i not in chosen][: count - len(chosen)]
        return tuple(chosen)

    def sync_allocatable(self) -> None:
        """GetAllocatableResources answers the devices the plugins list now (CPUs and memory
        as they were), as the kubelet's device manager does."""
        current = self.podresources.allocatable
        listed = self.kubelet.resources()
        self.podresources.set_allocatable(
            replace(
                current,
                devices=tuple(
                    DeviceGrant(
                        resource_name=name,
                        device_ids=(device.id,),
                        numa_nodes=device.numa_nodes,
                    )
                    for name, devices in sorted(listed.items())
                    for device in devices.values()
                ),
            )
        )

    def _list(self, admission: Admission) -> None:
        self.sync_allocatable()
        devices = self.kubelet.resources()
        self.podresources.set_pod(
            PodGrant(
                namespace=admission.pod.namespace,
                name=admission.pod.name,
                containers=tuple(
                    ContainerGrant(
                        name=ask.name,
                        devices=tuple(
                            DeviceGrant(
                                resource_name=resource,
                                device_ids=ids,
                                numa_nodes=_numa(devices.get(resource, {}), ids),
                            )
                            for resource, ids in sorted(admission.devices.get(ask.name, {}).items())
                        ),
                    )
                    for ask in admission.pod.containers
                ),
            )
        )

    def _release(self, admission: Admission) -> None:
        for by_resource in admission.devices.values():
            for resource, ids in by_resource.items():
                self.kubelet.release(resource, ids)


def _numa(listed: Mapping[str, Any], ids: Sequence[str]) -> tuple[int, ...]:
    return tuple(sorted({n for i in ids if i in listed for n in listed[i].numa_nodes}))


def _reason(exc: BaseException) -> str:
    if isinstance(exc, grpc.RpcError):
        details = exc.details() if hasattr(exc, "details") else str(exc)
        return f"Allocate failed: {details}"
    return str(exc)
