"""Node labels in GPU Feature Discovery's style and value format (DESIGN.md §5).

`gfd_labels(inventory, strategy)` is what the node should carry; `label_patch(current, desired)`
is the smallest change (None removes a label we manage and no longer want). The publisher applies
the patch only when it is not empty; `--node-labels off` leaves all of them to GFD.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from agent.model import MigMode, NodeInventory

PRESENT = "nvidia.com/gpu.present"
PRODUCT = "nvidia.com/gpu.product"
COUNT = "nvidia.com/gpu.count"
MEMORY = "nvidia.com/gpu.memory"
MIG_CAPABLE = "nvidia.com/mig.capable"
MIG_STRATEGY = "nvidia.com/mig.strategy"
COMPUTE_MAJOR = "nvidia.com/gpu.compute.major"
COMPUTE_MINOR = "nvidia.com/gpu.compute.minor"
FAMILY = "nvidia.com/gpu.family"
CLIQUE = "nvidia.com/gpu.clique"
"""`<clusterUuid>.<cliqueId>` of the node's multi-node NVLink domain, as GFD writes it (§13)."""

MANAGED = (
    PRESENT,
    PRODUCT,
    COUNT,
    MEMORY,
    MIG_CAPABLE,
    MIG_STRATEGY,
    COMPUTE_MAJOR,
    COMPUTE_MINOR,
    FAMILY,
    CLIQUE,
)
"""Every label this module may set (and so may remove)."""

STRATEGIES = ("none", "single", "mixed")

_FAMILIES = {
    "3": "kepler",
    "5": "maxwell",
    "6": "pascal",
    "7.0": "volta",
    "7.2": "volta",
    "7.5": "turing",
    "8.0": "ampere",
    "8.6": "ampere",
    "8.7": "ampere",
    "8.9": "ada-lovelace",
    "9": "hopper",
    "10": "blackwell",
    "12": "blackwell",
}
_INVALID = re.compile(r"[^-A-Za-z0-9_.]")
MAX_VALUE = 63


def label_value(text: str) -> str:
    """A valid label value: spaces and other invalid characters become `-` (as GFD does)."""
    value = _INVALID.sub("-", text.strip())[:MAX_VALUE]
    return value.strip("-_.")


def gpu_family(compute_capability: str) -> str:
    major = compute_capability.split(".", 1)[0]
    return _FAMILIES.get(compute_capability) or _FAMILIES.get(major) or "undefined"


def _single_mig_profile(inventory: NodeInventory) -> tuple[str, int] | None:
    """(profile, memory MiB) when every GPU is in MIG mode with one profile (the `single` case)."""
    migs = [m for _, m in inventory.mig_devices()]
    profiles = {m.profile for m in migs}
    if len(profiles) != 1 or any(g.mig_mode != MigMode.ENABLED for g in inventory.gpus):
        return None
    return migs[0].profile, migs[0].memory_mib


def gfd_labels(inventory: NodeInventory, strategy: str = "mixed") -> dict[str, str]:
    """The labels the node should carry; empty when it has no GPU."""
    if not inventory.gpus:
        return {}
    first = inventory.gpus[0]
    major, _, minor = first.compute_capability.partition(".")
    labels = {
        PRESENT: "true",
        PRODUCT: label_value(first.product),
        COUNT: str(len(inventory.gpus)),
        MEMORY: str(first.memory_mib),
        MIG_CAPABLE: str(any(g.mig_mode != MigMode.UNSUPPORTED for g in inventory.gpus)).lower(),
        MIG_STRATEGY: strategy,
        COMPUTE_MAJOR: major,
        COMPUTE_MINOR: minor or "0",
        FAMILY: gpu_family(first.compute_capability),
    }
    single = _single_mig_profile(inventory) if strategy == "single" else None
    if single is not None:
        profile, memory = single
        labels[PRODUCT] = label_value(f"{first.product}-MIG-{profile}")
        labels[COUNT] = str(sum(1 for _ in inventory.mig_devices()))
        labels[MEMORY] = str(memory)
    clique = inventory.nvlink_clique()
    if clique is not None:
        labels[CLIQUE] = clique
    return labels


def label_patch(current: Mapping[str, str], desired: Mapping[str, str]) -> dict[str, str | None]:
    """The merge-patch `metadata.labels` body; empty when the node already matches."""
    patch: dict[str, str | None] = {k: v for k, v in desired.items() if current.get(k) != v}
    patch.update({k: None for k in MANAGED if k in current and k not in desired})
    return patch
