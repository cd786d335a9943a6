"""Which of the node's GPUs MPS serves: `--gpus all` or a list of indexes and UUIDs (as the
`devices` of NVIDIA's `sharing.mps` names them). A GPU in MIG mode is never one: MPS shares
whole GPUs only (as in NVIDIA's device plugin)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from agent.model import Gpu, MigMode

log = logging.getLogger(__name__)

ALL = "all"


def select_gpus(gpus: Sequence[Gpu], spec: str) -> tuple[Gpu, ...]:
    """The GPUs `spec` names, in index order; ValueError names an unknown or MIG-mode GPU."""
    if spec.strip() == ALL:
        whole = tuple(g for g in gpus if g.mig_mode is not MigMode.ENABLED)
        for gpu in gpus:
            if gpu.mig_mode is MigMode.ENABLED:
                log.warning("GPU %d is in MIG mode: not shared with MPS", gpu.index)
        return whole
    chosen: dict[int, Gpu] = {}
    for name in (part.strip() for part in spec.split(",") if part.strip()):
        found = [g for g in gpus if name in (str(g.index), str(g.uuid))]
        if not found:
            raise ValueError(f"--gpus: no GPU {name!r} on this node")
        if found[0].mig_mode is MigMode.ENABLED:
            raise ValueError(f"--gpus: GPU {name} is in MIG mode; MPS shares whole GPUs only")
        chosen[found[0].index] = found[0]
    if not chosen:
        raise ValueError(f"--gpus: expected {ALL!r} or GPU indexes/UUIDs, got {spec!r}")
    return tuple(chosen[i] for i in sorted(chosen))
