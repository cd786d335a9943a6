"""What `kubectl gputopo topo NODE` shows of DRA: which claim holds which GPU (`agent.dra.holders`),
as a table or, for `-o json|yaml`, as `draClaims`. Nothing is shown where no claim holds one of the
node's devices; where claims cannot be read (no resource.k8s.io/v1, no permission) one line on
stderr says so."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TextIO

from agent.dra.holders import ClaimHold, claim_holds
from agent.errors import AgentError
from agent.model import NodeInventory

ClaimLister = Callable[[], list[dict[str, Any]] | None]
"""Every ResourceClaim, or None where the API server serves none."""


def node_holds(
    inventory: NodeInventory, node: str, claims: ClaimLister | None, prog: str, err: TextIO
) -> tuple[ClaimHold, ...]:
    if claims is None:
        return ()
    try:
        listed = claims()
    except AgentError as exc:
        err.write(f"{prog}: DRA claims not shown: {exc}\n")
        return ()
    return claim_holds(inventory, node, listed or [])


def holds_table(holds: Sequence[ClaimHold]) -> str:
    if not holds:
        return ""
    rows = [(str(h.gpu_index), h.device, h.claim, h.share_id or "-") for h in holds]
    header = ("GPU", "DRA DEVICE", "CLAIM", "SHARE")
    widths = [max(len(x) for x in col) for col in zip(header, *rows, strict=False)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in (header, *rows)]  # fmt: skip
    return "\n" + "\n".join(lines) + "\n"


def holds_data(holds: Sequence[ClaimHold]) -> list[dict[str, Any]]:
    return [
        {"gpu": h.gpu_index, "device": h.device, "claim": h.claim, "shareID": h.share_id}
        for h in holds
    ]
