"""What is free on an area's nodes while the reprieve gives pieces back, by arithmetic alone.

Giving a piece back on the clones costs an `assume` (the node's devices, the snapshot's indexes)
and asking the placement code costs a decision; most of the reprieve's answers follow from
counting instead. `Room` keeps, per area node, free milli-GPU per GPU, cpu, memory and pod slots
as pieces go back (`charge`) and answers `may_fit`: necessary conditions for U (a node with
enough idle GPUs for its largest pod; in all, enough idle GPUs, milli-GPU, cpu, memory and pod
slots). A piece it refuses would not fit on the clones either; what it accepts, the placement
code confirms once at the end (`reprieve`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agent.model import MILLI_PER_GPU
from scheduler.placement import Assignment, PodRequest, Snapshot
from scheduler.placement.request import CPU, MEMORY, PODS

from .eligibility import Piece

__all__ = ["Room"]


@dataclass(slots=True, kw_only=True)
class _Free:
    gpus: list[int]  # free milli per non-MIG GPU (MIG GPUs: -1, never idle)
    cpu: int
    memory: int
    pods: int


class Room:
    """Free capacity per area node, changed by `charge` without touching the clones."""

    def __init__(
        self,
        snapshot: Snapshot,
        area: frozenset[str],
        saved: Mapping[str, tuple[PodRequest, Assignment]],
    ) -> None:
        self._saved = saved
        self._free: dict[str, _Free] = {}
        for name in area:
            node = snapshot.node(name)
            gpus = [-1 if mig else f for f, mig in zip(node.gpu_free, node.gpu_mig, strict=True)]
            self._free[name] = _Free(
                gpus=gpus, cpu=node.free(CPU), memory=node.free(MEMORY), pods=node.free(PODS)
            )

    def charge(self, piece: Piece, sign: int) -> None:
        """`piece` given back (1) or taken out again (-1)."""
        for place in piece.pods:
            free = self._free.get(place.node)
            saved = self._saved.get(place.key)
            if free is None or saved is None:
                continue
            request, assignment = saved
            for g in assignment.gpus:
                free.gpus[g] -= sign * MILLI_PER_GPU
            for share in assignment.shares:
                free.gpus[share.gpu] -= sign * share.milli
            free.cpu -= sign * request.cpu_milli
            free.memory -= sign * request.memory
            free.pods -= sign

    def may_fit(self, pods: Sequence[PodRequest]) -> bool:
        """Necessary conditions for all of `pods` on the area (see the module)."""
        idle = [sum(f == MILLI_PER_GPU for f in free.gpus) for free in self._free.values()]
        largest = max(p.gpus for p in pods)
        if largest and max(idle, default=0) < largest:
            return False
        have = (
            sum(idle),
            sum(max(0, f) for free in self._free.values() for f in free.gpus),
            sum(free.cpu for free in self._free.values()),
            sum(free.memory for free in self._free.values()),
            sum(free.pods for free in self._free.values()),
        )
        want = (
            sum(p.gpus for p in pods),
            sum(p.gpu_milli_total for p in pods),
            sum(p.cpu_milli for p in pods),
            sum(p.memory for p in pods),
            len(pods),
        )
        return all(h >= w for h, w in zip(have, want, strict=True) if w > 0)
