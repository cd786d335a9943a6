"""Quota amounts: what a unit asks for and what a queue allows, in integer units per resource.

`cpu` and `nvidia.com/gpu` are counted in thousandths (millicores, milli-GPUs: the simulator's
time-sliced shares count against `nvidia.com/gpu`); everything else as `agent.quantity` counts it
(bytes, devices). A queue's `nvidia.com/gpu` counts every GPU model; a model key
(`nvidia.com/gpu@<product>`, `models`) counts as its plain resource does.

GPU shares (DESIGN §12): a share's replica resource is never charged (`nvidia.com/gpu.shared` is
never a managed resource; a replica of `nvidia.com/gpu` is not a whole GPU); each share is
charged as `nvidia.com/gpu` in its milli and as `gputopo.io/gpu-memory` bytes. A placed share's
milli and memory depend on its GPU; a share not yet placed is charged what it asks alone (its
memory, its compute as milli; once per replica that init and app containers take in turn), a
lower bound. A pod's DRA claims on shared GPUs (`claimed`) are charged the same way, on top
of what the pod itself asks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from agent.model import MILLI_PER_GPU
from agent.quantity import format_milli, to_int, to_milli
from agent.resource_names import GPU_RESOURCE
from agent.shares import GPU_MEMORY, SHARED_GPU_RESOURCE
from scheduler.placement import GpuShare, PodRequest
from scheduler.placement.shares import share_groups
from scheduler.quota.models import base_of

__all__ = [
    "Amounts",
    "Charged",
    "add_into",
    "allocatable_amounts",
    "format_amount",
    "parse_amount",
    "request_amounts",
]

Amounts = Mapping[str, int]
_MILLI = frozenset({"cpu", GPU_RESOURCE})
_NOT_QUOTA = frozenset({"pods", SHARED_GPU_RESOURCE})


def parse_amount(resource: str, value: object) -> int:
    """`value` (an int or a quantity string) in quota units; ValueError when malformed or < 0."""
    amount = to_milli(value) if base_of(resource) in _MILLI else to_int(value)
    if amount < 0:
        raise ValueError(f"must not be negative, got {value!r}")
    return amount


def format_amount(resource: str, amount: int) -> str:
    """The inverse of `parse_amount` for messages: GPUs and CPUs as `2` or `1500m`."""
    resource = base_of(resource)
    if resource == GPU_RESOURCE:
        whole, part = divmod(amount, MILLI_PER_GPU)
        return str(whole) if not part else f"{amount / MILLI_PER_GPU:g}"
    return format_milli(amount) if resource in _MILLI else str(amount)


class Charged(Protocol):
    """A share charged by its milli-GPU and memory bytes (`GpuShare`, a claim's share)."""

    @property
    def milli(self) -> int: ...

    @property
    def memory(self) -> int: ...


def request_amounts(
    request: PodRequest, shares: Sequence[GpuShare] = (), claimed: Sequence[Charged] = ()
) -> dict[str, int]:
    """What one pod counts against quotas: its resource vector, GPUs in milli-GPUs; `shares`:
    where its shares were placed (see the module); `claimed`: the shares its DRA claims hold,
    charged on top as a placed share is."""
    out = _own_amounts(request, shares)
    for share in claimed:
        add_into(out, {GPU_RESOURCE: share.milli, GPU_MEMORY: share.memory})
    return out


def _own_amounts(request: PodRequest, shares: Sequence[GpuShare]) -> dict[str, int]:
    out = {name: qty for name, qty in request.vector if name not in _NOT_QUOTA}
    if shares:
        out[GPU_RESOURCE] = sum(s.milli for s in shares)
        memory = sum(s.memory for s in shares)
    elif request.shares:
        out[GPU_RESOURCE], memory = _unplaced(request)
    else:
        if request.gpu_milli_total:
            out[GPU_RESOURCE] = request.gpu_milli_total
        return out
    if memory:
        out[GPU_MEMORY] = memory
    return out


def _unplaced(request: PodRequest) -> tuple[int, int]:
    """(milli, memory) of shares not yet placed: per replica group (containers that run on one
    replica in turn, `share_groups`), the most any member asks, its compute as milli (at least
    1), as the group is charged once placed (`group_on`)."""
    asks = request.shares
    milli = memory = 0
    for members in share_groups(request, asks):
        milli += max(max(1, (asks[i].compute_percent or 0) * 10) for i in members)
        memory += max(asks[i].memory_bytes or 0 for i in members)
    return milli, memory


def allocatable_amounts(allocatable: Amounts) -> dict[str, int]:
    """A node's allocatable (canonical units: cpu in millicores, GPUs whole) in quota units."""
    out = {name: qty for name, qty in allocatable.items() if name not in _NOT_QUOTA}
    if GPU_RESOURCE in out:
        out[GPU_RESOURCE] *= MILLI_PER_GPU
    return out


def add_into(into: dict[str, int], extra: Amounts, sign: int = 1) -> None:
    """`into += sign * extra`, dropping entries that reach zero."""
    for name, qty in extra.items():
        total = into.get(name, 0) + sign * qty
        if total:
            into[name] = total
        else:
            into.pop(name, None)
