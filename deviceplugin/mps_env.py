"""What a share container needs under `sharing.mps` (DESIGN §12), added to its Allocate answer.

- `CUDA_MPS_PIPE_DIRECTORY` = `mps_pipe_directory(root, uid)`, mounted at the same path: the
  control daemon of Linux user `uid` (the container's effective `runAsUser`: the container's,
  else the pod's) listens there (`gputopo-agent mps` runs it);
- `mps_shm_directory(root, uid)` mounted as `/dev/shm`: that user's own sized tmpfs, which the
  user's daemon shares with its clients (as NVIDIA's MPS sharing mounts a sized tmpfs);
- `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=<MiB>M`: what the container was given (the share Lease's
  memory), or an equal split of the GPU (its memory / its replicas) for a pod another scheduler
  placed, whatever that pod asks; device 0 is the one GPU the container sees;
- `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=<percent>` when it was given compute.

Refused (naming the pod, the uid and the users MPS serves): a uid with no daemon here (its client
would run outside MPS, and the runtime would create its pipe directory root-owned), and a pod
without `runAsUser` unless root (0) is served. Limits in a client's environment can only narrow
the daemon's: they stop mistakes, not a tenant who rewrites its own environment.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from agent.model import GpuUuid
from agent.share_record import GivenShare
from agent.shares import mps_pipe_directory, mps_shm_directory
from deviceplugin.allocation import ContainerAllocation, MountSpec
from deviceplugin.errors import DeviceUnavailableError, RequestError
from deviceplugin.resources import Resource

PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
MEMORY_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
THREADS_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
SHM = "/dev/shm"
ROOT_UID = 0
MIB = 1024 * 1024


def effective_uid(pod: Mapping[str, Any], container: str) -> int | None:
    """The container's `runAsUser`, else the pod's; None when neither sets one."""
    spec = pod.get("spec") or {}
    for field in ("initContainers", "containers"):
        for c in spec.get(field) or ():
            if c.get("name") == container:
                uid = (c.get("securityContext") or {}).get("runAsUser")
                if isinstance(uid, int):
                    return uid
    uid = (spec.get("securityContext") or {}).get("runAsUser")
    return uid if isinstance(uid, int) else None


def mps_uid(uid: int | None, users: frozenset[int], subject: str, error: type[RequestError]) -> int:
    """The user an MPS client runs as (`uid`; None: root) when MPS serves it here, else `error`
    saying why, `subject` (`pod x container y`) first."""
    served = ", ".join(str(u) for u in sorted(users)) or "none"
    if uid is None and ROOT_UID not in users:
        raise error(
            f"{subject} sets no runAsUser and MPS does not serve root here (MPS users: {served}): "
            "set securityContext.runAsUser to one of them"
        )
    uid = ROOT_UID if uid is None else uid
    if uid not in users:
        raise error(
            f"{subject} runs as uid {uid}, which has no MPS daemon on this node (MPS users: "
            f"{served}; add it to gputopo-mps --users)"
        )
    return uid


class MpsEnv:
    """Decorates share answers for MPS clients; `memory_mib` gives a GPU's memory, `users` the
    uids MPS serves now (`agent.mps.status.served_uids`)."""

    def __init__(
        self, root: str, memory_mib: Mapping[GpuUuid, int], users: Callable[[], frozenset[int]]
    ) -> None:
        self._root = root.rstrip("/")
        self._memory_mib = memory_mib
        self._users = users

    def __call__(
        self,
        resource: Resource,
        given: GivenShare,
        pod: Mapping[str, Any],
        answer: ContainerAllocation,
    ) -> ContainerAllocation:
        uid = self._uid(given, pod)
        pipe = mps_pipe_directory(self._root, uid)
        envs = {
            **answer.envs,
            PIPE_ENV: pipe,
            MEMORY_ENV: f"0={self._limit_mib(resource, given)}M",
        }
        if given.compute_percent is not None:
            envs[THREADS_ENV] = str(given.compute_percent)
        mounts = (
            *answer.mounts,
            MountSpec(container_path=pipe, host_path=pipe),
            MountSpec(container_path=SHM, host_path=mps_shm_directory(self._root, uid)),
        )
        return replace(answer, envs=envs, mounts=mounts)

    def _uid(self, given: GivenShare, pod: Mapping[str, Any]) -> int:
        """The container's user, which MPS must serve; DeviceUnavailableError names why not."""
        return mps_uid(
            effective_uid(pod, given.container),
            self._users(),
            f"pod {given.pod} container {given.container}",
            DeviceUnavailableError,
        )

    def _limit_mib(self, resource: Resource, given: GivenShare) -> int:
        if given.memory_bytes is not None:
            return max(1, given.memory_bytes // MIB)
        replicas = sum(1 for d in resource.devices if d.gpu_uuid == given.gpu) or 1
        return self._memory_mib.get(given.gpu, 0) // replicas * max(1, given.replicas)
