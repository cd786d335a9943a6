"""Which ResourceClaim holds which device of a node's pool (for `kubectl gputopo topo NODE`).

Read from the claims' allocations (`status.allocation.devices.results` of driver
`gpu.gputopo.io` in the node's pool), so claims count whoever allocated them; device names map
back to GPUs through the same naming as the slices (`agent.dra.names`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.dra import DRIVER
from agent.dra.names import gpu_of_device
from agent.model import NodeInventory
from agent.objkey import key_of


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimHold:
    gpu_index: int
    device: str
    claim: str  # namespace/name
    share_id: str | None = None


def claim_holds(
    inventory: NodeInventory, node: str, claims: Iterable[Mapping[str, Any]]
) -> tuple[ClaimHold, ...]:
    """Every device of `node`'s pool an allocated claim holds, by GPU index then device."""
    index_of = gpu_of_device(inventory)
    holds = []
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            device = result.get("device")
            if result.get("driver") != DRIVER or result.get("pool") != node:
                continue
            if device not in index_of:
                continue
            holds.append(
                ClaimHold(
                    gpu_index=index_of[device],
                    device=device,
                    claim=str(key_of(claim)),
                    share_id=result.get("shareID"),
                )
            )
    return tuple(sorted(holds, key=lambda h: (h.gpu_index, h.device, h.claim)))
