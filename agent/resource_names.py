"""NVIDIA's extended resource names for GPUs and MIG devices, and the MIG profile in each.

A whole GPU is `nvidia.com/gpu`. A MIG device is `nvidia.com/mig-<profile>` with every `+` of the
profile written as `.` (NVIDIA's mixed strategy): profile `1g.10gb+me` is advertised as
`nvidia.com/mig-1g.10gb.me`. The device plugin advertises these names, the NRT carries them, and
the scheduler reads them back from pods and nodes; all of them use the two functions here.
"""

from __future__ import annotations

__all__ = ["GPU_RESOURCE", "MIG_RESOURCE_PREFIX", "mig_profile", "mig_resource"]

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"


def mig_resource(profile: str) -> str:
    """`1g.10gb` -> `nvidia.com/mig-1g.10gb`; `1g.10gb+me` -> `nvidia.com/mig-1g.10gb.me`."""
    return MIG_RESOURCE_PREFIX + profile.replace("+", ".")


def mig_profile(resource: str) -> str | None:
    """The MIG profile a resource name advertises (`mig_resource` reversed), or None when it
    names no MIG device: `nvidia.com/mig-1g.10gb.me` -> `1g.10gb+me`."""
    if not resource.startswith(MIG_RESOURCE_PREFIX):
        return None
    parts = resource[len(MIG_RESOURCE_PREFIX) :].split(".")
    return ".".join(parts[:2]) + "".join(f"+{attr}" for attr in parts[2:])
