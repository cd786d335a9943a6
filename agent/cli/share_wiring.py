"""Shares' wiring (DESIGN §12): the device plugin's `ShareAllocator` over the agent's API calls
(`agent.kube.shares.ShareClient`) and the kubelet's PodResources `List`; and which GPUs the
device plugin shares (`shared_gpus`), for the NRT and the metrics.

Composes `agent` with `deviceplugin`. The API connection is made on first use, as the
publisher's: without credentials at start the device plugin still serves, and a share Allocate
fails naming why (a pod must not get a guessed GPU).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from agent.availability import PodGrant
from agent.cli.config import AgentConfig
from agent.errors import ConfigError, PublishError
from agent.labels import Replication, SharingLabels
from agent.model import GpuUuid, NodeInventory
from agent.mps.layout import MpsLayout
from agent.mps.status import served_uids
from agent.objkey import object_key
from agent.share_record import ShareRecord, pod_uids
from agent.share_usage import SharedGpu, ShareUse, share_use
from agent.shares import ShareLock, Sharing
from deviceplugin.allocation import Allocator
from deviceplugin.grpc_translation import is_share_resource
from deviceplugin.mps_env import MpsEnv
from deviceplugin.plugin import DevicePlugin, MakeShares
from deviceplugin.podresources import PodResourcesClient
from deviceplugin.resources import Resource, build_resources
from deviceplugin.settings import TimeSlicing
from deviceplugin.share_allocation import ShareAllocator

if TYPE_CHECKING:
    from agent.kube.shares import ShareClient

Result = TypeVar("Result")
log = logging.getLogger(__name__)


class LazyShareClient:
    """A `ShareApi` that connects on its first call and again after a credentials failure."""

    def __init__(self, connect: Callable[[], ShareClient]) -> None:
        self._connect = connect
        self._client: ShareClient | None = None

    def _call(self, call: Callable[[ShareClient], Result]) -> Result:
        if self._client is None:
            try:
                self._client = self._connect()
            except ConfigError as exc:
                raise PublishError(str(exc)) from None
        return call(self._client)

    def lock(self) -> ShareLock | None:
        return self._call(lambda c: c.lock())

    def release(self, lock: ShareLock) -> bool:
        return self._call(lambda c: c.release(lock))

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._call(lambda c: c.pod(namespace, name))

    def pods_on_node(self) -> list[dict[str, Any]]:
        return self._call(lambda c: c.pods_on_node())

    def patch_allocated(self, namespace: str, name: str, value: str) -> None:
        self._call(lambda c: c.patch_allocated(namespace, name, value))

    def warn(self, pod: Mapping[str, Any], reason: str, message: str) -> None:
        self._call(lambda c: c.warn(pod, reason, message))


def sharing_labels(config: TimeSlicing) -> SharingLabels:
    """The `sharing` section as the node labels read it (GFD's `replicas`, `sharing-strategy`,
    `-SHARED`): each resource's replicas, and whether they go under another name."""
    resources = {
        r.name: Replication(r.replicas, r.advertised_name(config.rename_by_default) != r.name)
        for r in config.resources
    }
    return SharingLabels(sharing=config.sharing, resources=resources)


def shared_gpus(plugin: DevicePlugin) -> dict[GpuUuid, SharedGpu]:
    """The GPUs the device plugin splits into replicas now, with their replica counts."""
    resources = plugin.device_state.view().resources.values()
    return shared_in(plugin.settings.time_slicing.sharing, resources)


def configured_shared_gpus(cfg: AgentConfig, inventory: NodeInventory) -> dict[GpuUuid, SharedGpu]:
    """The GPUs a device plugin started with `cfg` would share on `inventory`: what
    `--oneshot`, which starts no device plugin, publishes (and previews with `--dry-run`)."""
    return shared_in(cfg.plugin.time_slicing.sharing, build_resources(inventory, cfg.plugin))


def shared_in(sharing: Sharing, resources: Iterable[Resource]) -> dict[GpuUuid, SharedGpu]:
    """The GPUs split into replicas of a share resource in `resources`, with their counts."""
    out: dict[GpuUuid, SharedGpu] = {}
    for resource in resources:
        if not is_share_resource(resource):
            continue
        counts = Counter(d.gpu_uuid for d in resource.devices if d.replica is not None)
        out.update(
            (uuid, SharedGpu(uuid=uuid, sharing=sharing, replicas=n, resource=resource.name))
            for uuid, n in counts.items()
        )
    return out


def share_state(
    shared: Mapping[GpuUuid, SharedGpu],
    inventory: NodeInventory,
    record: ShareRecord | None,
    listed: Sequence[PodGrant],
    pods: Sequence[Mapping[str, Any]],
) -> tuple[Mapping[GpuUuid, SharedGpu], dict[GpuUuid, ShareUse]]:
    """What the `shared` GPUs' shares use, from the agent's record of what it gave and the pods
    the kubelet lists (`listed`) and the API shows on the node (`pods`). A recorded pod that
    neither lists is gone for good, and leaves the record."""
    if not shared:
        return {}, {}
    record = record or ShareRecord(None)
    if pods:
        record.keep(pod_uids(pods), {object_key(p.namespace, p.name) for p in listed})
    return shared, share_use(inventory, shared, listed, pods, record.all())


def share_factory(
    cfg: AgentConfig, inventory: NodeInventory, record: ShareRecord
) -> MakeShares | None:
    """How the device plugin builds its share allocator; None with `--dry-run` (no API)."""
    if cfg.dry_run:
        return None

    def connect() -> ShareClient:
        from agent.kube.connect import load_api_client
        from agent.kube.shares import ShareClient

        return ShareClient(
            load_api_client(cfg.kubeconfig),
            node=cfg.node_name,
            namespace=cfg.share_lock_namespace,
        )

    def make(allocator: Allocator, shared: frozenset[str]) -> ShareAllocator:
        podresources = PodResourcesClient(cfg.pod_resources_socket)
        return ShareAllocator(
            LazyShareClient(connect),
            podresources.pods,
            allocator,
            replica_resources=shared,
            decorate=mps_env(cfg, inventory),
            record=record,
            scheduler_name=cfg.share_scheduler_name,
        )

    return make


def mps_env(cfg: AgentConfig, inventory: NodeInventory) -> MpsEnv | None:
    """The MPS clients' environment and mounts under `sharing.mps`, else None."""
    if cfg.plugin.time_slicing.sharing is not Sharing.MPS:
        return None
    status_file = MpsLayout(Path(cfg.plugin.mps_root)).status_file
    memory = {g.uuid: g.usable_memory_mib for g in inventory.gpus}
    return MpsEnv(cfg.plugin.mps_root, memory, lambda: served_uids(status_file))
