"""Device names in the driver's pool, as NVIDIA's driver forms them: `gpu-<minor>` for a whole
GPU, `gpu-<minor>-mig-<profile>-<placement start>` for a MIG device (the profile lower case with
anything but letters, digits and `-` turned into `-`: `1g.10gb+me` -> `1g-10gb-me`)."""

from __future__ import annotations

import re

from agent.model import Gpu, MigDevice, NodeInventory

_NOT_NAME = re.compile(r"[^a-z0-9-]+")


def gpu_device_name(gpu: Gpu) -> str:
    return f"gpu-{gpu.minor}"


def mig_device_name(gpu: Gpu, mig: MigDevice) -> str:
    profile = _NOT_NAME.sub("-", mig.profile.lower()).strip("-")
    return f"gpu-{gpu.minor}-mig-{profile}-{mig.start}"


def gpu_of_device(inventory: NodeInventory) -> dict[str, int]:
    """Every device name the node's GPUs can have (whole, and each MIG device) -> GPU index."""
    out = {gpu_device_name(g): g.index for g in inventory.gpus}
    out.update({mig_device_name(g, m): g.index for g, m in inventory.mig_devices()})
    return out
