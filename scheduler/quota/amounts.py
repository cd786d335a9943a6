"""Quota amounts: what a unit asks for and what a queue allows, in integer units per resource.

`cpu` and `nvidia.com/gpu` are counted in thousandths (millicores, milli-GPUs: the simulator's
time-sliced shares count against `nvidia.com/gpu`); everything else as `agent.quantity` counts it
(bytes, devices). A queue's `nvidia.com/gpu` counts every GPU model.
"""

from __future__ import annotations

from collections.abc import Mapping

from agent.model import MILLI_PER_GPU
from agent.quantity import format_milli, to_int, to_milli
from agent.resource_names import GPU_RESOURCE
from scheduler.placement import PodRequest

__all__ = [
    "Amounts",
    "add_into",
    "allocatable_amounts",
    "format_amount",
    "parse_amount",
    "request_amounts",
]

Amounts = Mapping[str, int]
_MILLI = frozenset({"cpu", GPU_RESOURCE})
_NOT_QUOTA = frozenset({"pods"})


def parse_amount(resource: str, value: object) -> int:
    """`value` (an int or a quantity string) in quota units; ValueError when malformed or < 0."""
    amount = to_milli(value) if resource in _MILLI else to_int(value)
    if amount < 0:
        raise ValueError(f"must not be negative, got {value!r}")
    return amount


def format_amount(resource: str, amount: int) -> str:
    """The inverse of `parse_amount` for messages: GPUs and CPUs as `2` or `1500m`."""
    if resource == GPU_RESOURCE:
        whole, part = divmod(amount, MILLI_PER_GPU)
        return str(whole) if not part else f"{amount / MILLI_PER_GPU:g}"
    return format_milli(amount) if resource in _MILLI else str(amount)


def request_amounts(request: PodRequest) -> dict[str, int]:
    """What one pod counts against quotas: its resource vector, GPUs in milli-GPUs."""
    out = {name: qty for name, qty in request.vector if name not in _NOT_QUOTA}
    if request.gpu_milli_total:
        out[GPU_RESOURCE] = request.gpu_milli_total
    return out


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
