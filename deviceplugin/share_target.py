"""Whom a shared resource's Allocate serves, and on which GPU (DESIGN §12): `ShareTargets`.

No device-plugin call names its pod. For one container request, a fresh PodResources `List`
(the kubelet lists a pod, without devices, before its first Allocate) and the node's share lock
(`ShareApi`: the Lease and the holder pod by direct GETs) say, in order:

1. **Recorded**: an app container the `List` shows holding exactly these replica IDs, whose pod
   records them in `gputopo.io/allocated` (a re-allocation): the same GPU as before.
2. **Lock holder**: the holder pod is listed and not yet done: its next share container in spec
   order (init containers first) gets the GPU `gputopo.io/gpus` names for it, whatever GPU the
   replica is on; an app container handed an init container's replica IDs gets that init
   container's GPU. After the pod's last share container: `gputopo.io/allocated`, then the lock's
   release. A lock whose pod is gone (404, or another UID) is released and ignored.
3. **Unplaced** (no lock for it, or a pod another scheduler placed): the one listed pod still
   Pending with a share container lacking devices gets its replica's own GPU (an equal split) and
   a warning Event; the recorded IDs of a listed init container are honoured here too.

Anything else is retried for `wait_s` (0.3 s; the kubelet's sync loop waits meanwhile), then
refused naming the candidates. The I/O per answer: one `List`, one Lease GET and one pod GET;
the patch and the release only after a pod's last share container; a pod list only on path 3.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.availability import PodGrant
from agent.errors import AgentError
from agent.model import GpuUuid
from agent.objkey import key_of
from agent.podphase import finished, pod_phase
from agent.shares import (
    ALLOCATED_ANNOTATION,
    GPUS_ANNOTATION,
    ContainerShare,
    ShareLock,
    ShareRequestError,
    decode_allocated,
    decode_gpus,
    encode_allocated,
    pod_shares,
)
from deviceplugin.allocation import listed
from deviceplugin.errors import DeviceUnavailableError, PluginError
from deviceplugin.resources import Resource

logger = logging.getLogger(__name__)

ADMITTING_PHASES = frozenset({"", "Pending"})
"""A pod the kubelet is admitting has not started: its phase is still Pending."""
NOT_PLACED_REASON = "GPUShareNotPlaced"


class ShareApi(Protocol):
    """The API calls share Allocate makes (`agent.kube.shares.ShareClient`); each raises
    AgentError when it gets no usable answer."""

    def lock(self) -> ShareLock | None: ...

    def release(self, lock: ShareLock) -> bool: ...

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def pods_on_node(self) -> list[dict[str, Any]]: ...

    def patch_allocated(self, namespace: str, name: str, value: str) -> None: ...

    def warn(self, pod: Mapping[str, Any], reason: str, message: str) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """Whom one container request serves, and on which GPU (None: the replicas' own GPUs)."""

    pod: Mapping[str, Any]
    share: ContainerShare
    gpu: GpuUuid | None
    how: str  # recorded | lock | unplaced

    @property
    def key(self) -> str:
        meta = self.pod.get("metadata") or {}
        return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


@dataclass(slots=True)
class Progress:
    """A pod's share containers answered so far (this process's memory)."""

    done: dict[str, tuple[str, ...]] = field(default_factory=dict)
    gpus: dict[str, GpuUuid | None] = field(default_factory=dict)


class ShareTargets:
    """Finds each share container request's pod and GPU; keeps what it answered per pod."""

    def __init__(
        self,
        api: ShareApi,
        list_pods: Callable[[], Sequence[PodGrant]],
        *,
        replica_resources: Set[str],
        wait_s: float = 0.3,
        retry_s: float = 0.02,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._api = api
        self._list_pods = list_pods
        self._replica_resources = frozenset(replica_resources)
        self._wait_s = wait_s
        self._retry_s = retry_s
        self._clock = clock
        self._wall_clock = wall_clock
        self._progress: dict[str, Progress] = {}  # by pod UID

    def resolve(
        self, resource: Resource, ids: tuple[str, ...], *, record: bool, patient: bool = True
    ) -> Target:
        """Whom `ids` of `resource` serve; `record` keeps the answer (Allocate, not a preference);
        DeviceUnavailableError names why none is found within `wait_s` (at once if not patient)."""
        deadline = self._clock() + (self._wait_s if patient else 0.0)
        while True:
            try:
                target, why = self._attempt(resource, ids, record)
            except (AgentError, PluginError, ShareRequestError) as exc:
                target, why = None, str(exc)
            if target is not None:
                return target
            if self._clock() >= deadline:
                raise DeviceUnavailableError(f"{resource.name} {listed(list(ids))}: {why}")
            threading.Event().wait(self._retry_s)

    def _attempt(
        self, resource: Resource, ids: tuple[str, ...], record: bool
    ) -> tuple[Target | None, str]:
        pods = {f"{p.namespace}/{p.name}": p for p in self._list_pods()}
        holder = self.holder()
        recorded = self._recorded(resource, ids, pods, holder) if ids else None
        if recorded is not None:
            return recorded, ""
        if holder is not None and key_of(holder) in pods:
            target = self._next(resource, holder, ids, record, pods[key_of(holder)], "lock")
            if target is not None:
                return target, ""
        return self._unplaced(resource, ids, pods, holder, record)

    def holder(self) -> dict[str, Any] | None:
        """The lock holder's pod, or None; a lock whose pod is gone is released."""
        lock = self._api.lock()
        if lock is None or not lock.held(self._wall_clock()):
            return None
        namespace, _, name = (lock.pod_key or "").partition("/")
        pod = self._api.pod(namespace, name) if name else None
        if pod is not None and (pod.get("metadata") or {}).get("uid") == lock.holder:
            return pod
        released = self._api.release(lock)
        logger.warning(
            "share lock %s/%s names pod %s (UID %s), which is gone: %s",
            lock.namespace, lock.name, lock.pod_key, lock.holder,
            "released" if released else "changed meanwhile",
        )  # fmt: skip
        return None

    def _recorded(
        self,
        resource: Resource,
        ids: tuple[str, ...],
        pods: Mapping[str, PodGrant],
        holder: Mapping[str, Any] | None,
    ) -> Target | None:
        """An app container listed with exactly `ids` whose pod recorded them (re-allocation)."""
        for key, grant in pods.items():
            for container in grant.containers:
                held = tuple(i for d in container.devices for i in d.device_ids)
                if held != ids or not any(
                    d.resource_name == resource.name for d in container.devices
                ):
                    continue
                namespace, _, name = key.partition("/")
                pod = holder if holder is not None and key_of(holder) == key else None
                pod = pod or self._api.pod(namespace, name)
                target = self._from_record(resource, pod, ids) if pod else None
                if target is not None:
                    return target
        return None

    def _from_record(
        self, resource: Resource, pod: Mapping[str, Any], ids: tuple[str, ...]
    ) -> Target | None:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        if ALLOCATED_ANNOTATION not in annotations:
            return None
        allocated = decode_allocated(annotations[ALLOCATED_ANNOTATION])
        gpus = decode_gpus(annotations[GPUS_ANNOTATION]) if GPUS_ANNOTATION in annotations else {}
        for share in self._shares(resource, pod):
            if allocated.get(share.container) == ids:
                return Target(pod=pod, share=share, gpu=gpus.get(share.container), how="recorded")
        return None

    def _shares(self, resource: Resource, pod: Mapping[str, Any]) -> list[ContainerShare]:
        shares = pod_shares(pod, self._replica_resources)
        return [s for s in shares if s.resource == resource.name]

    def _next(
        self,
        resource: Resource,
        pod: Mapping[str, Any],
        ids: tuple[str, ...],
        record: bool,
        grant: PodGrant,
        how: str,
    ) -> Target | None:
        """The pod's next share container without an answer, and its GPU; None when done."""
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        progress = self._progress.get(uid) or Progress()
        remaining = [s for s in self._shares(resource, pod) if s.container not in progress.done]
        if not remaining or _listed_with_devices(grant, remaining[0]):
            return None
        share = remaining[0]
        reused = [c for c, done in progress.done.items() if done == ids and ids]
        gpu = progress.gpus[reused[0]] if reused else self._annotated(pod, share, how)
        target = Target(pod=pod, share=share, gpu=gpu, how=how)
        if record:
            self._record(resource, uid, progress, target, ids)
        return target

    def _annotated(self, pod: Mapping[str, Any], share: ContainerShare, how: str) -> GpuUuid | None:
        if how != "lock":
            return None
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        gpus = decode_gpus(annotations.get(GPUS_ANNOTATION) or "{}")
        if share.container not in gpus:
            raise ShareRequestError(
                f"pod {key_of(pod)} holds the share lock but {GPUS_ANNOTATION} names no GPU for "
                f"container {share.container}"
            )
        return gpus[share.container]

    def _record(
        self,
        resource: Resource,
        uid: str,
        progress: Progress,
        target: Target,
        ids: tuple[str, ...],
    ) -> None:
        progress.done[target.share.container] = ids
        progress.gpus[target.share.container] = target.gpu
        self._progress[uid] = progress
        if target.how == "unplaced" and len(progress.done) == 1:
            self._warn_unplaced(target)
        if len(progress.done) == len(self._shares(resource, target.pod)):
            self._finish(uid, progress, target)

    def _finish(self, uid: str, progress: Progress, target: Target) -> None:
        """`gputopo.io/allocated` on the pod, then (for a lock holder) the lock's release."""
        self._progress.pop(uid, None)
        namespace, _, name = target.key.partition("/")
        try:
            self._api.patch_allocated(namespace, name, encode_allocated(progress.done))
            lock = self._api.lock() if target.how == "lock" else None
            if lock is not None and lock.holder == uid:
                self._api.release(lock)
        except AgentError as exc:  # the answer stands; the lock expires on its own
            logger.warning("pod %s: after its last share container: %s", target.key, exc)

    def _warn_unplaced(self, target: Target) -> None:
        message = (
            f"no {GPUS_ANNOTATION} annotation (not placed by gputopo-scheduler): each share "
            "container gets its replica's own GPU, an equal split, with no memory or compute "
            "accounting"
        )
        try:
            self._api.warn(target.pod, NOT_PLACED_REASON, message)
        except AgentError as exc:
            logger.warning("pod %s: %s (Event not written: %s)", target.key, message, exc)

    def _unplaced(
        self,
        resource: Resource,
        ids: tuple[str, ...],
        pods: Mapping[str, PodGrant],
        holder: Mapping[str, Any] | None,
        record: bool,
    ) -> tuple[Target | None, str]:
        objects = {key_of(p): p for p in self._api.pods_on_node() if key_of(p) in pods}
        for pod in objects.values():
            found = self._from_record(resource, pod, ids) if not finished(pod) else None
            if found is not None:  # an init container's recorded replicas
                return found, ""
        candidates = [
            pod
            for key, pod in objects.items()
            if (holder is None or key != key_of(holder))
            and pod_phase(pod) in ADMITTING_PHASES
            and ALLOCATED_ANNOTATION not in ((pod.get("metadata") or {}).get("annotations") or {})
            and self._next(resource, pod, ids, False, pods[key], "unplaced") is not None
        ]
        if len(candidates) == 1:
            pod = candidates[0]
            return self._next(resource, pod, ids, record, pods[key_of(pod)], "unplaced"), ""
        names = ", ".join(sorted(key_of(p) for p in candidates)) or "none"
        held = f"the share lock's pod {key_of(holder)} is not being admitted; " if holder else ""
        return None, f"{held}cannot tell which pod this is for (candidates: {names})"

    def abandon(self) -> None:
        """A refused Allocate fails the pod the kubelet is admitting: when that is the lock
        holder (listed, so being admitted now), release the lock at once rather than after it
        expires, so the next share pod is not held up."""
        try:
            holder = self.holder()
            listed = {f"{p.namespace}/{p.name}" for p in self._list_pods()}
            lock = self._api.lock() if holder is not None and key_of(holder) in listed else None
            if lock is not None:
                self._progress.pop(lock.holder or "", None)
                released = self._api.release(lock)
                logger.warning(
                    "pod %s fails its admission: share lock %s",
                    key_of(holder or {}), "released" if released else "changed meanwhile",
                )  # fmt: skip
        except (AgentError, PluginError) as exc:
            logger.warning("share lock not released after a refused Allocate: %s", exc)


def _listed_with_devices(grant: PodGrant, share: ContainerShare) -> bool:
    """The kubelet lists this app container with devices of its resource already."""
    if share.init:
        return False
    return any(
        d.device_ids and d.resource_name == share.resource
        for c in grant.containers
        if c.name == share.container
        for d in c.devices
    )
