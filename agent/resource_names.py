"""NVIDIA's extended resource names for GPUs and MIG devices, and the MIG profile in each.

A whole GPU is `nvidia.com/gpu`. A MIG device is `nvidia.com/mig-<profile>` with every `+` of the
profile written as `.` (NVIDIA's mixed strategy): profile `1g.10gb+me` is advertised as
`nvidia.com/mig-1g.10gb.me`. The device plugin advertises these names, the NRT carries them, and
the scheduler reads them back from pods and nodes; all of them use the two functions here.

The NRT counts the GPUs of the DRA driver (`gpu.gputopo.io`, DESIGN §14) in that driver's domain,
never as NVIDIA's names (a pod asks for those as extended resources, and the device plugin serves
them): `gpu.gputopo.io/gpu`, `gpu.gputopo.io/mig-<profile>` (`dra_mig_resource`).
"""

from __future__ import annotations

import re

__all__ = [
    "DRA_DRIVER",
    "DRA_GPU_RESOURCE",
    "DRA_MIG_RESOURCE_PREFIX",
    "GPU_RESOURCE",
    "MIG_RESOURCE_PREFIX",
    "MODEL_KEY_PATTERN",
    "MODEL_SEP",
    "dra_mig_resource",
    "is_dra_resource",
    "mig_profile",
    "mig_resource",
    "model_key",
    "model_key_problem",
]

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
MODEL_SEP = "@"

DRA_DRIVER = "gpu.gputopo.io"
"""The DRA driver's name (`agent.dra.DRIVER`), whose domain its NRT resource lines use."""
DRA_GPU_RESOURCE = f"{DRA_DRIVER}/gpu"
DRA_MIG_RESOURCE_PREFIX = f"{DRA_DRIVER}/mig-"

MODEL_KEY_PATTERN = (
    r"(nvidia[.]com/gpu|nvidia[.]com/mig-[^@]*)@[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)
"""A Queue's quota key naming one GPU model, whole: `nvidia.com/gpu@<model>` or
`nvidia.com/mig-<profile>@<model>`, `<model>` a label value (the node's `nvidia.com/gpu.product`,
spaces written `-`). Written for RE2 and Python's `re` alike (no escape, no lookaround): the Queue
CRD's rule on the keys of `spec.min` and `spec.max` is `^(...)$` around this very text, and
`model_key_problem` decides with it, so the API server and the scheduler cannot disagree."""
_MODEL_KEY = re.compile(MODEL_KEY_PATTERN)


def mig_resource(profile: str) -> str:
    """`1g.10gb` -> `nvidia.com/mig-1g.10gb`; `1g.10gb+me` -> `nvidia.com/mig-1g.10gb.me`."""
    return MIG_RESOURCE_PREFIX + profile.replace("+", ".")


def dra_mig_resource(profile: str) -> str:
    """`1g.10gb+me` -> `gpu.gputopo.io/mig-1g.10gb.me` (the NRT line of a DRA MIG device)."""
    return DRA_MIG_RESOURCE_PREFIX + profile.replace("+", ".")


def is_dra_resource(resource: str) -> bool:
    """An NRT resource line of the DRA driver's devices (not the device plugin's)."""
    return resource.startswith(f"{DRA_DRIVER}/")


def mig_profile(resource: str) -> str | None:
    """The MIG profile a resource name advertises (`mig_resource` reversed), or None when it
    names no MIG device: `nvidia.com/mig-1g.10gb.me` -> `1g.10gb+me`."""
    if not resource.startswith(MIG_RESOURCE_PREFIX):
        return None
    parts = resource[len(MIG_RESOURCE_PREFIX) :].split(".")
    return ".".join(parts[:2]) + "".join(f"+{attr}" for attr in parts[2:])


def model_key(resource: str, model: str) -> str:
    """`nvidia.com/gpu`, `NVIDIA-H100-80GB-HBM3` -> `nvidia.com/gpu@NVIDIA-H100-80GB-HBM3`."""
    return f"{resource}{MODEL_SEP}{model}"


def model_key_problem(key: str) -> str | None:
    """Why `key` names a GPU model wrongly; None for a well-formed model key or a plain key
    (one without `@`). Decided by `MODEL_KEY_PATTERN` alone; the text only says which part is
    wrong."""
    if MODEL_SEP not in key or _MODEL_KEY.fullmatch(key):
        return None
    resource, model = key.split(MODEL_SEP, 1)
    if resource != GPU_RESOURCE and not resource.startswith(MIG_RESOURCE_PREFIX):
        return f"only nvidia.com/gpu and nvidia.com/mig-* may name a GPU model, not {resource!r}"
    return (
        f"GPU model {model!r} is not a valid label value (the node's nvidia.com/gpu.product: "
        "`kubectl gputopo nodes` shows each model's key)"
    )
