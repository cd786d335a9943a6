"""The cluster's GPUs as the scheduler's cache sees them, counted for the metrics at scrape time.

Each GPU of each node in the placement snapshot is counted once, by

- `model`: the product its node's NodeResourceTopology names, else the node's
  `nvidia.com/gpu.product` label, else `unknown`;
- `kind`: `mig` (MIG enabled), `share` (a shared GPU as its NRT zone says, or one partly taken
  by `gpu_milli` pods), `whole` (every other GPU);
- `state`: `unhealthy` (its NRT zone says so), `allocated` (anything on it is taken), `free`.

A GPU is *fragmented* when it is partly taken: a share or some MIG devices in use, room left.
That is the room only pods of the same shape can use, the quantity binpacking keeps low.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from agent.model import MILLI_PER_GPU
from agent.nrt import DecodedTopology
from agent.shares import Sharing
from scheduler.placement import GPU_PRODUCT_LABEL, NodeState

UNKNOWN_MODEL = "unknown"


@dataclass(slots=True)
class GpuCounts:
    """`gpus[(model, kind, state)]` and `fragmented[model]`; every model seen has an entry in
    `fragmented`, zero when none of its GPUs is."""

    gpus: dict[tuple[str, str, str], int] = field(default_factory=dict)
    fragmented: dict[str, int] = field(default_factory=dict)


def count_gpus(nodes: Mapping[str, NodeState], nrts: Mapping[str, DecodedTopology]) -> GpuCounts:
    """Count the GPUs of `nodes`, reading models and health from their NRTs where known."""
    counts = GpuCounts()
    for name, node in nodes.items():
        nrt = nrts.get(name)
        if nrt is not None and len(nrt.inventory.gpus) != node.gpu_count:
            nrt = None  # the node was built without it (no GPUs in it): its indices mean nothing
        for g in range(node.gpu_count):
            model = _model(node, nrt, g)
            kind, state, fragmented = _classify(node, nrt, g)
            key = (model, kind, state)
            counts.gpus[key] = counts.gpus.get(key, 0) + 1
            counts.fragmented[model] = counts.fragmented.get(model, 0) + int(fragmented)
    return counts


def _model(node: NodeState, nrt: DecodedTopology | None, g: int) -> str:
    if nrt is not None:
        return nrt.inventory.gpus[g].product
    return node.labels.get(GPU_PRODUCT_LABEL) or UNKNOWN_MODEL


def _classify(node: NodeState, nrt: DecodedTopology | None, g: int) -> tuple[str, str, bool]:
    """(kind, state, fragmented) of GPU `g` of `node`."""
    zone = None if nrt is None else nrt.availability.gpus[g]
    if node.gpu_mig[g]:
        used = node.mig_in_use[g]
        room = sum(node.mig_free[g].values())
        kind, taken, fragmented = "mig", used > 0, used > 0 and room > 0
    else:
        free = node.gpu_free[g]
        partly = 0 < free < MILLI_PER_GPU
        shared = partly or (zone is not None and zone.sharing is not Sharing.NONE)
        kind, taken, fragmented = ("share" if shared else "whole"), free < MILLI_PER_GPU, partly
    if zone is not None and not zone.healthy:
        return kind, "unhealthy", False
    return kind, "allocated" if taken else "free", fragmented
