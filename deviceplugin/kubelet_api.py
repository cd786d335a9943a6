"""Constants of the kubelet device-plugin API v1beta1 (wire facts, not configuration)."""

from __future__ import annotations

from pathlib import Path

VERSION = "v1beta1"
"""The only API version the kubelet accepts in `RegisterRequest.version`."""

DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
KUBELET_SOCKET = "kubelet.sock"
"""The kubelet's Registration socket, inside the device-plugin directory."""

CHECKPOINT = "kubelet_internal_checkpoint"
"""The only file the kubelet keeps when it cleans the device-plugin directory at start."""

SOCKET_PREFIX = "gputopo-"
"""Our socket names, `gputopo-<resource tail>.sock`; never NVIDIA's `nvidia-*.sock`."""

MAX_DEVICE_ID = 63
"""Longest device ID the API allows."""


def socket_name(resource_name: str) -> str:
    """`nvidia.com/mig-1g.10gb` -> `gputopo-mig-1g.10gb.sock`."""
    return f"{SOCKET_PREFIX}{resource_name.rpartition('/')[2]}.sock"
