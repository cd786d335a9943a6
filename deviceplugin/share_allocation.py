"""Allocate and GetPreferredAllocation of shared resources (DESIGN §12): `ShareAllocator`.

`ShareTargets` says whom a container request serves and what the share Lease gives it; this
answers with that GPU (`NVIDIA_VISIBLE_DEVICES=<uuid>` and the rest of the device list strategy),
whatever GPU the kubelet's replica is on, records the answer on the node, and adds what the
sharing mode needs for that size (`Decorate`: MPS limits and pipe). A refused Allocate fails the
pod being admitted (UnexpectedAdmissionError), better than a wrong GPU; when that pod holds the
share lock, the lock is released at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence, Set
from typing import Any

from agent.availability import PodGrant
from agent.share_record import GivenShare, ShareRecord
from agent.shares import DEFAULT_SCHEDULER_NAME, LEASE_SHARES_ANNOTATION
from deviceplugin.allocation import Allocator, ContainerAllocation
from deviceplugin.device_state import down_error
from deviceplugin.errors import (
    DeviceUnavailableError,
    InvalidRequestError,
    PluginError,
    RequestError,
)
from deviceplugin.resources import PluginDevice, Resource, is_healthy
from deviceplugin.share_target import ShareApi, ShareTargets, Target

logger = logging.getLogger(__name__)

Decorate = Callable[
    [Resource, GivenShare, Mapping[str, Any], ContainerAllocation], ContainerAllocation
]
"""Adds what a sharing mode needs to one container's answer, given its share and its pod
(`mps_env.MpsEnv`); raises RequestError to refuse it."""


class ShareAllocator:
    """Answers Allocate and GetPreferredAllocation of the node's shared resources."""

    def __init__(
        self,
        api: ShareApi,
        list_pods: Callable[[], Sequence[PodGrant]],
        allocator: Allocator,
        *,
        replica_resources: Set[str],
        decorate: Decorate | None = None,
        record: ShareRecord | None = None,
        scheduler_name: str = DEFAULT_SCHEDULER_NAME,
        wait_s: float = 0.3,
        retry_s: float = 0.02,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._allocator = allocator
        self._decorate = decorate
        self._targets = ShareTargets(
            api, list_pods, replica_resources=replica_resources, record=record,
            scheduler_name=scheduler_name, wait_s=wait_s, retry_s=retry_s, clock=clock,
        )  # fmt: skip
        self._lock = threading.Lock()  # the kubelet allocates one container at a time anyway

    def allocate(
        self,
        resource: Resource,
        unhealthy: Set[str],
        requests: Sequence[Sequence[str]],
        *,
        down: str | None = None,
    ) -> list[ContainerAllocation]:
        """`down`: why every replica is Unhealthy (MPS not serving), refusing the pod at once."""
        try:
            if down is not None:
                raise down_error(resource.name, down)
            return self._allocate(resource, unhealthy, requests)
        except RequestError:
            with self._lock:
                self._targets.abandon()
            raise

    def _allocate(
        self, resource: Resource, unhealthy: Set[str], requests: Sequence[Sequence[str]]
    ) -> list[ContainerAllocation]:
        if len(requests) != 1:
            raise InvalidRequestError(
                f"{resource.name}: {len(requests)} container requests in one Allocate; a shared "
                "resource is allocated one container at a time, as the kubelet does"
            )
        plain = self._allocator.allocate(resource, unhealthy, requests)[0]  # validates the IDs
        ids = tuple(requests[0])
        with self._lock:
            target = self._targets.resolve(resource, ids)
            if target.gpu is None:
                answer, gpu = plain, self._allocator.device_of(resource, ids[0]).gpu_uuid
            else:
                answer = self._allocator.build([self._gpu_device(resource, unhealthy, target)])
                gpu = target.gpu
            if self._decorate is not None:  # may refuse: before anything is recorded
                preview = self._targets.preview(resource, target, ids, gpu)
                answer = self._decorate(resource, preview, target.pod, answer)
            self._targets.answer(resource, target, ids, gpu)
        logger.info(
            "%s: %s container %s gets GPU %s (%s)", resource.name, target.key,
            target.share.container, gpu, target.how,
        )  # fmt: skip
        return [answer]

    def preferred(
        self, resource: Resource, available: Sequence[str], must: Sequence[str], size: int
    ) -> tuple[str, ...] | None:
        """Free replicas of the GPU the next container is annotated to, must-include first; None
        when that is not known (the caller then packs as usual)."""
        with self._lock:
            try:
                target = self._targets.resolve(resource, tuple(must), patient=False)
            except PluginError:
                return None
        if target.gpu is None:
            return None
        on_gpu = [i for i in available if (d := resource.device(i)) and d.gpu_uuid == target.gpu]
        rest = [i for i in available if i not in set(on_gpu)]
        picked = list(dict.fromkeys([*must, *on_gpu, *rest]))
        return tuple(picked[:size])

    def _gpu_device(self, resource: Resource, unhealthy: Set[str], target: Target) -> PluginDevice:
        """A device of `resource` on the target GPU (for the answer's GPU fields)."""
        device = next((d for d in resource.devices if d.gpu_uuid == target.gpu), None)
        if device is None:
            raise DeviceUnavailableError(
                f"pod {target.key} container {target.share.container}: its share Lease's "
                f"{LEASE_SHARES_ANNOTATION} names GPU {target.gpu}, which {resource.name} does "
                "not share on this node"
            )
        if not is_healthy(device, unhealthy):
            raise DeviceUnavailableError(
                f"pod {target.key} container {target.share.container}: GPU {target.gpu} "
                f"(GPU {device.gpu_index}) is Unhealthy"
            )
        return device
