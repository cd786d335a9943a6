"""Load-aware placement (issue 47): what shared GPUs really use, as the agent measured it.

The agent publishes per GPU its used memory, SM utilisation and power draw, averaged over a
window, with the time measured (`agent.gpu_load`). With `LoadAware.shares` on (the default),
placement of shares and time-sliced replicas takes it in:

- `measured_use` keeps a reading only while it is younger than `max_age_s` at `now` (the caller's
  clock, passed in: this package reads none); an older one is ignored, never trusted stale, and
  the GPU is then judged by requests alone.
- `hold_measured_use` charges each shared GPU the memory it really uses beyond what its pods'
  requests leave free (`NodeState.hold_share_room`), so a replica or share that needs more than
  the measured free memory does not fit (the filter), and the fragmentation score sees that
  memory as used (the node's score).
- `load_key` orders the shared GPUs that fit inside a node: the fullest by memory first (in
  tenths, as before: pack), then the least busy SMs, then the most power headroom.
- `measured_reason` names the figure: `GPU 3 of node n1: 70Gi of 80Gi in use (measured 12 s
  ago), replica needs 20Gi`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agent.gpu_load import GpuLoad

from .gpushare import MeasuredUse
from .node import NodeState

__all__ = [
    "DEFAULT_MAX_AGE_S",
    "LoadAware",
    "MeasuredUse",
    "busy_key",
    "hold_measured_use",
    "load_key",
    "measured_reason",
    "measured_use",
]

DEFAULT_MAX_AGE_S = 120.0  # four of the agent's default 30 s publish intervals
_MIB = 1 << 20


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadAware:
    """The scheduler's `loadAware` config: on for shares and replicas unless switched off."""

    shares: bool = True
    max_age_s: float = DEFAULT_MAX_AGE_S


def measured_use(load: GpuLoad | None, *, now: float, max_age_s: float) -> MeasuredUse | None:
    """`load` when it is at most `max_age_s` old at `now` (a reading from the future, a clock
    skew, counts as new), else None."""
    if load is None:
        return None
    age = max(0.0, now - load.measured_at)
    if age > max_age_s:
        return None
    return MeasuredUse(
        memory_used=load.memory_used_mib * _MIB,
        sm_percent=load.sm_percent,
        power_w=load.power_w,
        age_s=age,
    )


def hold_measured_use(state: NodeState, uses: Sequence[MeasuredUse | None]) -> None:
    """Charge each shared GPU of `state` (its pods charged) what it measurably uses beyond
    what requests leave free, and keep the readings for the order and the reasons."""
    state.gpu_load = tuple(uses[g] if g < len(uses) else None for g in range(state.gpu_count))
    for g in state.shared_gpus:
        use = state.gpu_load[g]
        if use is None:
            continue
        more = state.memory_free[g] - (state.gpu_memory[g] - use.memory_used)
        if more > 0:
            state.hold_share_room(g, memory=more, compute=0)


def load_key(node: NodeState, g: int, milli_free: int) -> tuple[int, int, int]:
    """Which shared GPU of `node` a share prefers (lower first): memory (fullest, in tenths),
    then SM utilisation (in tenths), then power draw."""
    use = node.gpu_load[g] if node.gpu_load else None
    if use is None:
        return (milli_free // 100, 0, 0)
    return (milli_free // 100, use.sm_percent // 10, use.power_w)


def busy_key(node: NodeState) -> tuple[int, ...]:
    """What `load_key` reads of `node` besides its free room, per GPU (-1: no reading): a part
    of the keys under which placement memoises a node's answers."""
    return tuple(-1 if u is None else (u.sm_percent // 10) << 16 | u.power_w for u in node.gpu_load)


def measured_reason(node: NodeState, g: int, need: int, what: str = "replica") -> str | None:
    """Why GPU `g` of `node` cannot take `need` bytes by its measured use; None when no fresh
    reading says so."""
    use = node.gpu_load[g] if node.gpu_load else None
    total = node.gpu_memory[g]
    if use is None or total - use.memory_used >= need:
        return None
    return (
        f"GPU {g} of node {node.name}: {_gib(use.memory_used)} of {_gib(total)} in use "
        f"(measured {round(use.age_s)} s ago), {what} needs {_gib(need)}"
    )


def _gib(amount: int) -> str:
    gib = amount / (1 << 30)
    return f"{gib:.0f}Gi" if abs(gib - round(gib)) < 0.05 else f"{gib:.1f}Gi"
