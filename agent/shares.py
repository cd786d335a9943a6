"""GPU shares (DESIGN §12): the wire names and the pure reading of a pod's share request that the
scheduler (placement, binding, queues), the agent (Allocate, the NRT) and the kubectl plugin use.

A share container asks for one replica of a shared resource (`nvidia.com/gpu` on a node whose
GPUs are all shared, `nvidia.com/gpu.shared` when renamed) plus, optionally, `gputopo.io/gpu-memory`
(bytes) and `gputopo.io/gpu-compute` (percent of the SMs, 1..100). A replica alone is an equal
split of its GPU. Per-container, limits = requests as for every extended resource; limits are
read first, as the API server defaults requests from them.

The hand-off between the parts, all named here:

- the node's **share lock**: the Lease `share_lock_name(node)` in the scheduler's namespace, its
  `holderIdentity` the pod's UID, its `LOCK_POD_ANNOTATION` the pod's key and its
  `LEASE_SHARES_ANNOTATION` what each share container was given (`LeaseShare`: GPU, memory,
  compute), taken by the scheduler before it binds a share pod and released by the agent once
  the pod's share containers are allocated. Only the scheduler and the agent write it: it is
  what Allocate serves (DESIGN §12 "Trust"); expiry only lets the scheduler take it again;
- `GPUS_ANNOTATION`: `{"<container>": "<GPU UUID>", ...}` for every share container, patched by
  the scheduler before the bind, and `ALLOCATED_ANNOTATION`: `{"<container>": ["<replica ID>",
  ...], ...}`, patched by the agent after the last share container's Allocate: both for people
  and tools to read (a pod's author can write them, so nothing is served from them);
- the MPS pipe directory of a Linux user, shared by the MPS daemon and Allocate.

Standard library only (it sits with the model in the agent's core).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from datetime import datetime
from enum import StrEnum
from typing import Any

from agent.model import MILLI_PER_GPU, GpuUuid
from agent.quantity import to_int
from agent.resource_names import GPU_RESOURCE, MIG_RESOURCE_PREFIX

__all__ = [
    "ALLOCATED_ANNOTATION",
    "DEFAULT_MPS_ROOT",
    "DEFAULT_SCHEDULER_NAME",
    "DEFAULT_SHARE_LOCK_NAMESPACE",
    "DEFAULT_SHARE_LOCK_SECONDS",
    "GPUS_ANNOTATION",
    "GPU_COMPUTE",
    "GPU_MEMORY",
    "LEASE_SHARES_ANNOTATION",
    "LOCK_POD_ANNOTATION",
    "MAX_MPS_CLIENTS",
    "SHARED_GPU_RESOURCE",
    "SHARE_LOCK_PREFIX",
    "ContainerShare",
    "LeaseShare",
    "ShareLock",
    "ShareRequestError",
    "Sharing",
    "decode_allocated",
    "decode_gpus",
    "decode_lease_shares",
    "encode_allocated",
    "encode_gpus",
    "encode_lease_shares",
    "mps_pipe_directory",
    "mps_shm_directory",
    "pod_shares",
    "share_lock_from_lease",
    "share_lock_name",
    "share_milli",
]

GPU_MEMORY = "gputopo.io/gpu-memory"
"""Bytes of one GPU's memory a share container asks (never advertised by a node)."""
GPU_COMPUTE = "gputopo.io/gpu-compute"
"""Percent (1..100) of one GPU's SMs a share container asks (never advertised by a node)."""
SHARED_GPU_RESOURCE = f"{GPU_RESOURCE}.shared"
"""The replica resource when NVIDIA's `renameByDefault` (or `rename`) names it apart."""

GPUS_ANNOTATION = "gputopo.io/gpus"
ALLOCATED_ANNOTATION = "gputopo.io/allocated"

SHARE_LOCK_PREFIX = "gputopo-share-"
DEFAULT_SHARE_LOCK_SECONDS = 30
DEFAULT_SHARE_LOCK_NAMESPACE = "gputopo-system"
"""Where the share Leases live: the scheduler's namespace (its `--leader-elect-namespace`)."""
LOCK_POD_ANNOTATION = "gputopo.io/pod"
"""On the share Lease: `<namespace>/<name>` of the holder, so the agent can GET it directly (the
Lease's `holderIdentity` is the pod's UID, which the agent checks against what it GETs)."""
LEASE_SHARES_ANNOTATION = "gputopo.io/shares"
"""On the share Lease: `{"<container>": {"gpu": "<UUID>", "memory": <bytes>, "compute": <percent>
or null}, ...}`, what the scheduler gave each share container of the holder (`LeaseShare`)."""
DEFAULT_SCHEDULER_NAME = "gputopo-scheduler"
"""The scheduler that places sized shares: its pods are served only through the share Lease."""
MAX_MPS_CLIENTS = 48
"""CUDA MPS serves at most 48 clients per GPU: `sharing.mps` `replicas` is capped there."""

MAX_COMPUTE_PERCENT = 100

DEFAULT_MPS_ROOT = "/run/gputopo/mps"
"""Host directory of the MPS daemons' pipe, log and shm directories (`gputopo-agent mps
--mps-root` and the agent's `--mps-root` must agree)."""


class Sharing(StrEnum):
    """How a GPU's replicas share it (the NRT GPU zone attribute `sharing`)."""

    NONE = "none"
    TIME_SLICING = "timeSlicing"
    MPS = "mps"


class ShareRequestError(ValueError):
    """A malformed share request or annotation; the message names the container and the field."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerShare:
    """One container's share request, as the pod spec says it.

    `memory_bytes` None: an equal split (the GPU's memory ÷ its replicas). `compute_percent`
    None: no compute limit and none charged. `replicas` > 1 only for equal splits.
    """

    container: str
    init: bool
    resource: str
    replicas: int
    memory_bytes: int | None = None
    compute_percent: int | None = None


def share_lock_name(node: str) -> str:
    """The node's share lock: a `coordination.k8s.io` Lease in the scheduler's namespace."""
    return f"{SHARE_LOCK_PREFIX}{node}"


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseShare:
    """What the scheduler gave one share container: a GPU, bytes of its memory and a percent of
    its SMs (None: no compute limit)."""

    gpu: GpuUuid
    memory_bytes: int
    compute_percent: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareLock:
    """The node's share Lease as read: its holder (a pod UID), that pod's key and what each of
    its share containers is given, or released.

    `renew_time` is seconds since the epoch (None when the Lease has none), for people: the agent
    serves the Lease's pod whatever it says (only the scheduler reads expiry, to take the Lease
    for another pod); `resource_version` is what a release must be conditional on."""

    name: str
    namespace: str
    resource_version: str
    holder: str | None = None
    pod_key: str | None = None
    renew_time: float | None = None
    duration_s: int = DEFAULT_SHARE_LOCK_SECONDS
    shares: Mapping[str, LeaseShare] = dataclass_field(default_factory=dict)


def share_lock_from_lease(lease: Mapping[str, Any]) -> ShareLock:
    """The `coordination.k8s.io/v1` Lease (a JSON dict) as a ShareLock; ShareRequestError names
    a malformed field."""
    meta, spec = lease.get("metadata") or {}, lease.get("spec") or {}
    where = f"Lease {meta.get('namespace', '')}/{meta.get('name', '')}"
    renew = spec.get("renewTime") or spec.get("acquireTime")
    try:
        stamp = datetime.fromisoformat(str(renew).replace("Z", "+00:00")) if renew else None
    except ValueError:
        raise ShareRequestError(f"{where}: spec.renewTime: not RFC3339: {renew!r}") from None
    annotations = meta.get("annotations") or {}
    shares = annotations.get(LEASE_SHARES_ANNOTATION)
    duration = spec.get("leaseDurationSeconds") or DEFAULT_SHARE_LOCK_SECONDS
    if isinstance(duration, bool) or not isinstance(duration, int) or duration < 1:
        raise ShareRequestError(f"{where}: spec.leaseDurationSeconds: expected >= 1: {duration!r}")
    return ShareLock(
        name=str(meta.get("name", "")),
        namespace=str(meta.get("namespace", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        holder=spec.get("holderIdentity") or None,
        pod_key=annotations.get(LOCK_POD_ANNOTATION) or None,
        renew_time=stamp.timestamp() if stamp else None,
        duration_s=duration,
        shares=decode_lease_shares(str(shares)) if shares else {},
    )


def mps_pipe_directory(root: str, uid: int) -> str:
    """The MPS pipe directory serving Linux user `uid`, on the host and in the client alike."""
    return f"{root.rstrip('/')}/{uid}/pipe"


def mps_shm_directory(root: str, uid: int) -> str:
    """The tmpfs that is `/dev/shm` of Linux user `uid`'s MPS daemon and clients (on the host)."""
    return f"{root.rstrip('/')}/{uid}/shm"


def share_milli(*, memory_bytes: int, compute_percent: int | None, gpu_memory_bytes: int) -> int:
    """One number per share for packing (the simulator's `gpu_milli`): the larger of its memory
    and compute fractions of the GPU, in milli-GPU, rounded up, at least 1."""
    if gpu_memory_bytes <= 0:
        raise ValueError(f"GPU memory must be positive, got {gpu_memory_bytes}")
    by_memory = -(-memory_bytes * MILLI_PER_GPU // gpu_memory_bytes)
    by_compute = (compute_percent or 0) * MILLI_PER_GPU // MAX_COMPUTE_PERCENT
    return max(1, min(MILLI_PER_GPU, max(by_memory, by_compute)))


def _asks(container: Mapping[str, Any]) -> dict[str, object]:
    resources = container.get("resources") or {}
    asks: dict[str, object] = dict(resources.get("requests") or {})
    asks.update(resources.get("limits") or {})
    return asks


def _positive(asks: Mapping[str, object], name: str, where: str) -> int | None:
    if name not in asks:
        return None
    try:
        value = to_int(asks[name])
    except ValueError as exc:
        raise ShareRequestError(f"{where}: {name}: {exc}") from None
    if value <= 0:
        raise ShareRequestError(f"{where}: {name} must be positive, got {asks[name]!r}")
    return value


def _container_share(
    container: Mapping[str, Any], *, init: bool, where: str, replica_resources: Collection[str]
) -> ContainerShare | None:
    asks = _asks(container)
    memory = _positive(asks, GPU_MEMORY, where)
    compute = _positive(asks, GPU_COMPUTE, where)
    if compute is not None and compute > MAX_COMPUTE_PERCENT:
        raise ShareRequestError(f"{where}: {GPU_COMPUTE} must be 1..100, got {asks[GPU_COMPUTE]!r}")
    shared = [r for r in (SHARED_GPU_RESOURCE, *sorted(replica_resources)) if r in asks]
    sized = memory is not None or compute is not None
    if not shared and not sized:
        return None
    if sized and not shared:
        shared = [GPU_RESOURCE] if GPU_RESOURCE in asks else []
    if not shared:
        raise ShareRequestError(
            f"{where}: {GPU_MEMORY}/{GPU_COMPUTE} without a replica ({GPU_RESOURCE}: 1 or "
            f"{SHARED_GPU_RESOURCE}: 1)"
        )
    resource = shared[0]
    whole = (GPU_RESOURCE, SHARED_GPU_RESOURCE, *replica_resources)
    others = sorted(r for r in asks if r != resource and r in whole)
    mig = sorted(r for r in asks if r.startswith(MIG_RESOURCE_PREFIX))
    if others or mig:
        raise ShareRequestError(
            f"{where}: a share ({resource}) beside whole GPUs or MIG devices "
            f"({', '.join(others + mig)}) in one container"
        )
    replicas = _positive(asks, resource, where) or 0
    if sized and replicas != 1:
        raise ShareRequestError(
            f"{where}: {replicas} replicas of {resource} with {GPU_MEMORY}/{GPU_COMPUTE}: "
            "a sized share is exactly one replica"
        )
    name = str(container.get("name") or "")
    return ContainerShare(
        container=name,
        init=init,
        resource=resource,
        replicas=replicas,
        memory_bytes=memory,
        compute_percent=compute,
    )


def pod_shares(
    pod: Mapping[str, Any], replica_resources: Collection[str] = ()
) -> tuple[ContainerShare, ...]:
    """The pod's share containers in spec order, init containers first (the order the kubelet
    allocates them). A container is one when it asks `nvidia.com/gpu.shared`, `gpu-memory` or
    `gpu-compute`, or one of `replica_resources` (pass `nvidia.com/gpu` where a node's GPUs are
    all shared, so a plain replica there is an equal split). ShareRequestError names the pod,
    the container and the field of a malformed request."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    pod_name = f"pod {meta.get('namespace', '')}/{meta.get('name', '')}"
    out: list[ContainerShare] = []
    for field, init in (("initContainers", True), ("containers", False)):
        for i, container in enumerate(spec.get(field) or ()):
            where = f"{pod_name}: spec.{field}[{i}] ({container.get('name', '')})"
            share = _container_share(
                container, init=init, where=where, replica_resources=replica_resources
            )
            if share is not None:
                out.append(share)
    return tuple(out)


def _json_object(text: str, annotation: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise ShareRequestError(f"annotation {annotation}: not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ShareRequestError(f"annotation {annotation}: expected a JSON object")
    return value


def encode_gpus(chosen: Mapping[str, str]) -> str:
    """`gputopo.io/gpus`: container -> the GPU UUID its share is on."""
    return json.dumps(dict(sorted(chosen.items())), separators=(",", ":"))


def decode_gpus(text: str) -> dict[str, GpuUuid]:
    """`encode_gpus` reversed; ShareRequestError names what is wrong."""
    out: dict[str, GpuUuid] = {}
    for container, uuid in _json_object(text, GPUS_ANNOTATION).items():
        if not isinstance(uuid, str) or not uuid:
            raise ShareRequestError(
                f"annotation {GPUS_ANNOTATION}: container {container!r}: expected a GPU UUID, "
                f"got {uuid!r}"
            )
        out[str(container)] = GpuUuid(uuid)
    return out


def encode_allocated(allocated: Mapping[str, Sequence[str]]) -> str:
    """`gputopo.io/allocated`: container -> the replica IDs the kubelet allocated it."""
    return json.dumps({c: list(ids) for c, ids in sorted(allocated.items())}, separators=(",", ":"))


def decode_allocated(text: str) -> dict[str, tuple[str, ...]]:
    """`encode_allocated` reversed; ShareRequestError names what is wrong."""
    out: dict[str, tuple[str, ...]] = {}
    for container, ids in _json_object(text, ALLOCATED_ANNOTATION).items():
        if not isinstance(ids, list) or not all(isinstance(i, str) and i for i in ids):
            raise ShareRequestError(
                f"annotation {ALLOCATED_ANNOTATION}: container {container!r}: expected a list "
                f"of replica IDs, got {ids!r}"
            )
        out[str(container)] = tuple(ids)
    return out


def encode_lease_shares(given: Mapping[str, LeaseShare]) -> str:
    """`gputopo.io/shares` on the share Lease: container -> its GPU, memory and compute."""
    return json.dumps(
        {
            c: {"gpu": str(s.gpu), "memory": s.memory_bytes, "compute": s.compute_percent}
            for c, s in sorted(given.items())
        },
        separators=(",", ":"),
    )


def decode_lease_shares(text: str) -> dict[str, LeaseShare]:
    """`encode_lease_shares` reversed; ShareRequestError names what is wrong."""
    out: dict[str, LeaseShare] = {}
    for container, value in _json_object(text, LEASE_SHARES_ANNOTATION).items():
        where = f"annotation {LEASE_SHARES_ANNOTATION}: container {container!r}"
        if not isinstance(value, dict):
            raise ShareRequestError(f"{where}: expected an object, got {value!r}")
        gpu, memory, compute = value.get("gpu"), value.get("memory"), value.get("compute")
        if not isinstance(gpu, str) or not gpu:
            raise ShareRequestError(f"{where}: gpu: expected a GPU UUID, got {gpu!r}")
        if isinstance(memory, bool) or not isinstance(memory, int) or memory <= 0:
            raise ShareRequestError(f"{where}: memory: expected bytes > 0, got {memory!r}")
        if compute is not None and (
            isinstance(compute, bool)
            or not isinstance(compute, int)
            or not 1 <= compute <= MAX_COMPUTE_PERCENT
        ):
            raise ShareRequestError(f"{where}: compute: expected 1..100 or null, got {compute!r}")
        out[str(container)] = LeaseShare(
            gpu=GpuUuid(gpu), memory_bytes=memory, compute_percent=compute
        )
    return out
