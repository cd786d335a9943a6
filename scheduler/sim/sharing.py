"""GPU shares in the simulator's inputs (DESIGN §12): a job's `gpuMemory` / `gpuCompute` and a
node group's time-sliced GPUs (`shares` replicas per GPU of `nvidia.com/gpu.shared`, each GPU
`gpuMemoryGiB`). A `gpuMemory`/`gpuCompute` job is a share pod exactly as the scheduler reads
one (one replica, the memory and compute it asks), placed only on shared GPUs; a `gpuShare`
(milli) job and a trace `gpu_milli` pod are the published simulator's shares, placed on any
GPU, a shared one taking its replica and memory fraction, by the same placement code. A job's
pod may say what it really uses beside its request (`use: {memory: 30Gi, sm: 60}`, issue 47):
the load-aware study (`scheduler.sim.loadaware`) measures with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.docread import DocReader
from agent.quantity import to_int
from agent.shares import SHARED_GPU_RESOURCE, ContainerShare

__all__ = [
    "GROUP_KEYS",
    "POD_KEYS",
    "PodUse",
    "read_group_sharing",
    "read_pod_share",
    "read_pod_use",
    "share_fields",
]

POD_KEYS = ("gpuMemory", "gpuCompute", "use")
GROUP_KEYS = ("shares", "gpuMemoryGiB")
GIB = 1 << 30
_CONTAINER = "main"


def read_pod_share(
    reader: DocReader, doc: Mapping[str, Any], path: str
) -> tuple[int | None, int | None]:
    """(`gpuMemory` in bytes, `gpuCompute` in percent) of a job's pod; None where not given."""
    memory = compute = None
    if "gpuMemory" in doc:
        try:
            memory = to_int(doc["gpuMemory"])
        except ValueError as exc:
            reader.fail(f"{path}.gpuMemory", str(exc))
        if memory <= 0:
            reader.fail(f"{path}.gpuMemory", f"must be positive, got {doc['gpuMemory']!r}")
    if "gpuCompute" in doc:
        compute = reader.as_int(doc["gpuCompute"], f"{path}.gpuCompute", 1)
        if compute > 100:
            reader.fail(f"{path}.gpuCompute", f"must be 1..100, got {compute}")
    return memory, compute


def read_group_sharing(reader: DocReader, doc: Mapping[str, Any], path: str) -> tuple[int, int]:
    """(replicas per GPU, 0 when not shared; GPU memory in bytes) of a node group."""
    shares = reader.as_int(doc.get("shares", 0), f"{path}.shares", 0)
    memory = reader.as_int(doc.get("gpuMemoryGiB", 80), f"{path}.gpuMemoryGiB", 1)
    return shares, memory * GIB


def share_fields(memory: int | None, compute: int | None) -> dict[str, Any]:
    """`PodRequest` fields of a pod asking one share of `memory` bytes and `compute` percent
    (nothing when it asks neither)."""
    if memory is None and compute is None:
        return {}
    ask = ContainerShare(
        container=_CONTAINER,
        init=False,
        resource=SHARED_GPU_RESOURCE,
        replicas=1,
        memory_bytes=memory,
        compute_percent=compute,
    )
    return {"shares": (ask,), "extended": {SHARED_GPU_RESOURCE: 1}}


@dataclass(frozen=True, slots=True, kw_only=True)
class PodUse:
    """What a share pod really uses beside its request (issue 47): bytes of GPU memory, SM %."""

    memory: int
    sm: int = 0


def read_pod_use(reader: DocReader, doc: Mapping[str, Any], path: str) -> PodUse | None:
    """A job pod's `use: {memory: 30Gi, sm: 60}` (None: it uses what it asks)."""
    if "use" not in doc:
        return None
    raw = reader.mapping(doc["use"], f"{path}.use", ("memory",), ("sm",))
    try:
        memory = to_int(raw["memory"])
    except ValueError as exc:
        reader.fail(f"{path}.use.memory", str(exc))
    if memory < 0:
        reader.fail(f"{path}.use.memory", f"must not be negative, got {raw['memory']!r}")
    sm = reader.as_int(raw.get("sm", 0), f"{path}.use.sm", 0)
    if sm > 100:
        reader.fail(f"{path}.use.sm", f"must be 0..100, got {sm}")
    return PodUse(memory=memory, sm=sm)
