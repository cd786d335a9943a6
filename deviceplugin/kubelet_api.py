"""Constants of the kubelet device-plugin API v1beta1 (wire facts), and our socket names."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

VERSION = "v1beta1"
"""The only API version the kubelet accepts in `RegisterRequest.version`."""

DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
KUBELET_SOCKET = "kubelet.sock"
"""The kubelet's Registration socket, inside the device-plugin directory."""

CHECKPOINT = "kubelet_internal_checkpoint"
"""The only file the kubelet keeps when it cleans the device-plugin directory at start."""

SOCKET_PREFIX = "gputopo-"
"""Our socket names start so; never NVIDIA's `nvidia-*.sock`."""

MAX_SOCKET_NAME = 64
"""Longest socket name we make: with `/var/lib/kubelet/device-plugins/` it stays well inside the
107 bytes of a unix socket path."""

MAX_DEVICE_ID = 63
"""Longest device ID the API allows."""

_NVIDIA_DOMAIN = "nvidia.com"
_NVIDIA_TAIL = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]*")
_DOMAIN = re.compile(r"[a-z0-9][a-z0-9.-]*")
_TAIL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def socket_name(resource_name: str) -> str:
    """A socket name of our own for each resource name, the same on every run.

    `nvidia.com/<tail>` keeps `gputopo-<tail>.sock` (`nvidia.com/mig-1g.10gb` ->
    `gputopo-mig-1g.10gb.sock`); any other domain gets `gputopo-<domain>_<tail>.sock`
    (`example.com/gpu` -> `gputopo-example.com_gpu.sock`). A domain has no `_`, and the first
    form is used only for tails without one, so two names never share a socket. A name outside
    these forms, or too long for a socket path, becomes `gputopo-_<hash of the name>.sock`.
    """
    domain, slash, tail = resource_name.partition("/")
    name = None
    if slash and domain == _NVIDIA_DOMAIN and _NVIDIA_TAIL.fullmatch(tail):
        name = f"{SOCKET_PREFIX}{tail}.sock"
    elif slash and _DOMAIN.fullmatch(domain) and _TAIL.fullmatch(tail):
        name = f"{SOCKET_PREFIX}{domain}_{tail}.sock"
    if name is None or len(name) > MAX_SOCKET_NAME:
        digest = hashlib.sha256(resource_name.encode()).hexdigest()[:32]
        name = f"{SOCKET_PREFIX}_{digest}.sock"
    return name
