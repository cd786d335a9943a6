"""What a share container needs under `sharing.mps` (DESIGN §12), added to its Allocate answer.

- `CUDA_MPS_PIPE_DIRECTORY` = `mps_pipe_directory(root, uid)`, mounted at the same path: the
  control daemon of Linux user `uid` (the container's effective `runAsUser`: the container's,
  else the pod's, else root with a Warning Event) listens there (`gputopo-agent mps` runs it);
- `<root>/shm` mounted as `/dev/shm`, as NVIDIA's MPS sharing mounts it;
- `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=<MiB>M`: the share's memory, or an equal split of the GPU
  (its memory ÷ its replicas) when it names none; device 0 is the one GPU the container sees;
- `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=<percent>` when the share asks `gputopo.io/gpu-compute`.

Limits in a client's environment can only narrow the daemon's: they stop mistakes, not a tenant
who rewrites its own environment.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from agent.model import GpuUuid
from agent.shares import ContainerShare, mps_pipe_directory
from deviceplugin.allocation import ContainerAllocation, MountSpec
from deviceplugin.resources import Resource

PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
MEMORY_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
THREADS_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
SHM = "/dev/shm"
ROOT_UID = 0
NO_USER_REASON = "GPUShareRunsAsRoot"
MIB = 1024 * 1024

Warn = Callable[[Mapping[str, Any], str, str], None]


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


class MpsEnv:
    """Decorates share answers for MPS clients; `memory_mib` gives a GPU's memory."""

    def __init__(self, root: str, memory_mib: Mapping[GpuUuid, int], warn: Warn) -> None:
        self._root = root.rstrip("/")
        self._memory_mib = memory_mib
        self._warn = warn

    def __call__(
        self,
        resource: Resource,
        gpu: GpuUuid,
        pod: Mapping[str, Any],
        share: ContainerShare,
        answer: ContainerAllocation,
    ) -> ContainerAllocation:
        uid = effective_uid(pod, share.container)
        if uid is None:
            uid = ROOT_UID
            self._warn(
                pod,
                NO_USER_REASON,
                f"container {share.container} sets no runAsUser: its MPS client is served as "
                "root (set securityContext.runAsUser to be served as that user)",
            )
        pipe = mps_pipe_directory(self._root, uid)
        envs = {
            **answer.envs,
            PIPE_ENV: pipe,
            MEMORY_ENV: f"0={self._limit_mib(resource, gpu, share)}M",
        }
        if share.compute_percent is not None:
            envs[THREADS_ENV] = str(share.compute_percent)
        mounts = (
            *answer.mounts,
            MountSpec(container_path=pipe, host_path=pipe),
            MountSpec(container_path=SHM, host_path=f"{self._root}/shm"),
        )
        return replace(answer, envs=envs, mounts=mounts)

    def _limit_mib(self, resource: Resource, gpu: GpuUuid, share: ContainerShare) -> int:
        if share.memory_bytes is not None:
            return max(1, share.memory_bytes // MIB)
        replicas = sum(1 for d in resource.devices if d.gpu_uuid == gpu) or 1
        return self._memory_mib.get(gpu, 0) // replicas * max(1, share.replicas)
