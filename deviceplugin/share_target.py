"""Whom a shared resource's Allocate serves, on which GPU and with what size (DESIGN §12):
`ShareTargets`.

No device-plugin call names its pod. Nothing a share gets is read from the pod's annotations
(its author can write them): a fresh PodResources `List` (the kubelet lists a pod, without
devices, before its first Allocate), the node's share Lease (`ShareApi.lock`, written only by the
scheduler and the agent) and the agent's own record (`agent.share_record.ShareRecord`) say, in
order:

1. **Recorded**: a listed pod whose record holds exactly these replica IDs (a re-allocation after
   a kubelet or node restart): the same answer as before.
2. **The Lease's pod**: the pod the Lease names (by key, checked by UID), listed and not yet
   done: its next share container in spec order (init containers first) gets the GPU, memory and
   compute the Lease's `gputopo.io/shares` gives it, whatever GPU the replica is on; an app
   container handed an init container's replica IDs gets that init container's answer. The
   Lease's renewTime is not looked at: expiry only lets the scheduler take the Lease for another
   pod, so clocks never decide. After the pod's last share container: `gputopo.io/allocated`
   (for people and tools), then the Lease's release. A Lease whose pod is gone is released.
3. **Unplaced**: the one listed pod still Pending with a share container lacking devices. A pod
   of another scheduler gets its replica's own GPU and an equal split (what every count charges
   it), with a warning Event; a pod of gputopo-scheduler is refused naming it: it is not the
   Lease's pod (its lock expired and was taken for another pod, or it was bound around the
   scheduler), and a GPU it was not given would be counted nowhere.

Anything else is retried for `wait_s` (0.3 s; the kubelet's sync loop waits meanwhile), then
refused naming the candidates. The I/O per answer: one `List`, one Lease GET and one pod GET;
the patch and the release only after a pod's last share container; a pod list only on path 3.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any, Protocol

from agent.availability import PodGrant
from agent.errors import AgentError
from agent.model import GpuUuid
from agent.objkey import key_of
from agent.podphase import pod_phase
from agent.share_record import GivenShare, ShareRecord
from agent.shares import (
    DEFAULT_SCHEDULER_NAME,
    LEASE_SHARES_ANNOTATION,
    ContainerShare,
    LeaseShare,
    ShareLock,
    ShareRequestError,
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


class Refused(Exception):  # noqa: N818 (a decision, not a fault)
    """The container request is refused for good: waiting would not change the answer."""


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
    """Whom one container request serves: `given` what the Lease gives it (None for an unplaced
    pod: its replica's own GPU, an equal split); `recorded` when it repeats an earlier answer."""

    pod: Mapping[str, Any]
    share: ContainerShare
    given: LeaseShare | None
    how: str  # recorded | lock | unplaced
    recorded: GivenShare | None = None

    @property
    def key(self) -> str:
        return key_of(self.pod)

    @property
    def uid(self) -> str:
        return str((self.pod.get("metadata") or {}).get("uid") or "")

    @property
    def gpu(self) -> GpuUuid | None:
        if self.recorded is not None:
            return self.recorded.gpu
        return None if self.given is None else self.given.gpu


class ShareTargets:
    """Finds each share container request's pod and answer; records what was given."""

    def __init__(
        self,
        api: ShareApi,
        list_pods: Callable[[], Sequence[PodGrant]],
        *,
        replica_resources: Set[str],
        record: ShareRecord | None = None,
        scheduler_name: str = DEFAULT_SCHEDULER_NAME,
        wait_s: float = 0.3,
        retry_s: float = 0.02,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._list_pods = list_pods
        self._replica_resources = frozenset(replica_resources)
        self.record = record if record is not None else ShareRecord(None)
        self._scheduler_name = scheduler_name
        self._wait_s = wait_s
        self._retry_s = retry_s
        self._clock = clock

    def resolve(self, resource: Resource, ids: tuple[str, ...], *, patient: bool = True) -> Target:
        """Whom `ids` of `resource` serve; DeviceUnavailableError names why none is found
        within `wait_s` (at once if not patient)."""
        deadline = self._clock() + (self._wait_s if patient else 0.0)
        while True:
            final = False
            try:
                target, why = self._attempt(resource, ids)
            except Refused as exc:  # waiting would not change the answer
                target, why, final = None, str(exc), True
            except (AgentError, PluginError, ShareRequestError) as exc:
                target, why = None, str(exc)
            if target is not None:
                return target
            if final or self._clock() >= deadline:
                raise DeviceUnavailableError(f"{resource.name} {listed(list(ids))}: {why}")
            threading.Event().wait(self._retry_s)

    def _attempt(self, resource: Resource, ids: tuple[str, ...]) -> tuple[Target | None, str]:
        pods = {f"{p.namespace}/{p.name}": p for p in self._list_pods()}
        lock = self._api.lock()
        holder = self._holder(lock)
        recorded = self._recorded(resource, ids, pods, holder) if ids else None
        if recorded is not None:
            return recorded, ""
        if lock is not None and holder is not None and key_of(holder) in pods:
            target = self._next(resource, holder, ids, pods[key_of(holder)], lock)
            if target is not None:
                return target, ""
        return self._unplaced(resource, ids, pods, holder, lock)

    def holder(self) -> dict[str, Any] | None:
        """The pod the share Lease names, or None; a Lease whose pod is gone is released."""
        return self._holder(self._api.lock())

    def _holder(self, lock: ShareLock | None) -> dict[str, Any] | None:
        if lock is None or not lock.holder:
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
        """A container the `List` shows holding exactly `ids` whose answer is recorded (a
        re-allocation after a kubelet or node restart): that answer again."""
        for key, container in _holding(pods, resource.name, ids):
            found = self.record.find(key, container)
            if found is None or found.ids != ids:
                continue
            namespace, _, name = key.partition("/")
            pod = holder if holder is not None and key_of(holder) == key else None
            pod = pod or self._api.pod(namespace, name)
            if pod is None or (pod.get("metadata") or {}).get("uid") != found.uid:
                continue
            shares = [s for s in self._shares(resource, pod) if s.container == container]
            if shares:
                return Target(pod=pod, share=shares[0], given=None, how="recorded", recorded=found)
        return None

    def _shares(self, resource: Resource, pod: Mapping[str, Any]) -> list[ContainerShare]:
        shares = pod_shares(pod, self._replica_resources)
        return [s for s in shares if s.resource == resource.name]

    def _remaining(
        self, resource: Resource, pod: Mapping[str, Any], grant: PodGrant
    ) -> tuple[ContainerShare | None, dict[str, GivenShare]]:
        """The pod's next share container without an answer (None when done), and its record."""
        done = self.record.of_pod(str((pod.get("metadata") or {}).get("uid") or ""))
        remaining = [s for s in self._shares(resource, pod) if s.container not in done]
        if not remaining or _listed_with_devices(grant, remaining[0]):
            return None, done
        return remaining[0], done

    def _next(
        self,
        resource: Resource,
        pod: Mapping[str, Any],
        ids: tuple[str, ...],
        grant: PodGrant,
        lock: ShareLock,
    ) -> Target | None:
        """The Lease's pod's next share container and what the Lease gives it; None when done."""
        share, done = self._remaining(resource, pod, grant)
        if share is None:
            return None
        given = lock.shares.get(share.container)
        reused = [s for s in done.values() if s.init and s.ids == ids and ids]
        if reused:  # the kubelet hands this app container an init container's replica
            init = reused[0]
            given = LeaseShare(
                gpu=init.gpu,
                memory_bytes=given.memory_bytes if given else init.memory_bytes or 0,
                compute_percent=given.compute_percent if given else init.compute_percent,
            )
        if given is None:
            raise Refused(
                f"pod {key_of(pod)} holds the share lock but its Lease's "
                f"{LEASE_SHARES_ANNOTATION} gives container {share.container} nothing"
            )
        return Target(pod=pod, share=share, given=given, how="lock")

    def preview(
        self, resource: Resource, target: Target, ids: tuple[str, ...], gpu: GpuUuid
    ) -> GivenShare:
        """What `target` is given on `gpu` (not recorded yet)."""
        if target.recorded is not None:
            return target.recorded
        share, given = target.share, target.given
        return GivenShare(
            pod=target.key, uid=target.uid, container=share.container, init=share.init,
            resource=resource.name, ids=ids, gpu=gpu, replicas=share.replicas,
            memory_bytes=None if given is None else given.memory_bytes,
            compute_percent=None if given is None else given.compute_percent,
            how=target.how,
        )  # fmt: skip

    def answer(
        self, resource: Resource, target: Target, ids: tuple[str, ...], gpu: GpuUuid
    ) -> GivenShare:
        """What `target` is given on `gpu`, recorded (Allocate, before the answer leaves); after
        the pod's last share container, `gputopo.io/allocated` and the Lease's release."""
        answer = self.preview(resource, target, ids, gpu)
        if target.recorded is not None:
            return answer
        try:
            self.record.add(answer)
        except OSError as exc:  # a share not recorded would be lost to re-allocation and the NRT
            raise DeviceUnavailableError(
                f"pod {target.key} container {target.share.container}: the agent cannot record "
                f"its share: {exc}"
            ) from None
        done = self.record.of_pod(target.uid)
        if target.how == "unplaced" and len(done) == 1:
            self._warn_unplaced(target)
        if len(done) == len(self._shares(resource, target.pod)):
            self._finish(target, done)
        return answer

    def _finish(self, target: Target, done: Mapping[str, GivenShare]) -> None:
        """`gputopo.io/allocated` on the pod, then (for the Lease's pod) the Lease's release."""
        namespace, _, name = target.key.partition("/")
        try:
            allocated = {c: s.ids for c, s in done.items()}
            self._api.patch_allocated(namespace, name, encode_allocated(allocated))
            lock = self._api.lock() if target.how == "lock" else None
            if lock is not None and lock.holder == target.uid:
                self._api.release(lock)
        except AgentError as exc:  # the answer stands; the scheduler retakes the Lease later
            logger.warning("pod %s: after its last share container: %s", target.key, exc)

    def _warn_unplaced(self, target: Target) -> None:
        message = (
            "not placed by gputopo-scheduler: each share container gets its replica's own GPU "
            "and an equal split of it (the GPU's memory / its replicas), whatever it asks"
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
        lock: ShareLock | None,
    ) -> tuple[Target | None, str]:
        objects = {key_of(p): p for p in self._api.pods_on_node() if key_of(p) in pods}
        candidates: list[tuple[Mapping[str, Any], ContainerShare]] = []
        for key, pod in objects.items():
            if holder is not None and key == key_of(holder):
                continue
            share = self._remaining(resource, pod, pods[key])[0]
            if pod_phase(pod) in ADMITTING_PHASES and share is not None:
                candidates.append((pod, share))
        names = ", ".join(sorted(key_of(p) for p, _ in candidates)) or "none"
        held = f"the share lock's pod {key_of(holder)} is not being admitted; " if holder else ""
        if len(candidates) != 1:
            return None, f"{held}cannot tell which pod this is for (candidates: {names})"
        found, share = candidates[0]
        if (found.get("spec") or {}).get("schedulerName") == self._scheduler_name:
            raise Refused(self._not_leased(found, lock))
        return Target(pod=found, share=share, given=None, how="unplaced"), ""

    def _not_leased(self, pod: Mapping[str, Any], lock: ShareLock | None) -> str:
        now = f"names {lock.pod_key or lock.holder}" if lock and lock.holder else "is free"
        return (
            f"pod {key_of(pod)} is {self._scheduler_name}'s but not the share lock's pod (the "
            f"lock {now}): its lock expired and was taken for another pod, or it was bound "
            "without the scheduler; it is given no GPU (delete it to have it placed again)"
        )

    def abandon(self) -> None:
        """A refused Allocate fails the pod the kubelet is admitting: when that is the Lease's
        pod (listed, so being admitted now), release the Lease at once rather than leave it
        until the scheduler takes it again, so the next share pod is not held up."""
        try:
            lock = self._api.lock()
            holder = self._holder(lock)
            names = {f"{p.namespace}/{p.name}" for p in self._list_pods()}
            if lock is not None and holder is not None and key_of(holder) in names:
                released = self._api.release(lock)
                logger.warning(
                    "pod %s fails its admission: share lock %s",
                    key_of(holder), "released" if released else "changed meanwhile",
                )  # fmt: skip
        except (AgentError, PluginError) as exc:
            logger.warning("share lock not released after a refused Allocate: %s", exc)


def _holding(
    pods: Mapping[str, PodGrant], resource: str, ids: tuple[str, ...]
) -> list[tuple[str, str]]:
    """(pod key, container) of each listed container holding exactly `ids` of `resource`."""
    return [
        (key, container.name)
        for key, grant in pods.items()
        for container in grant.containers
        if any(d.resource_name == resource for d in container.devices)
        and tuple(i for d in container.devices for i in d.device_ids) == ids
    ]


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
