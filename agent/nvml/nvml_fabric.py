"""A GPU's multi-node NVLink fabric info from NVML (reference: topology-nrt-nvml.md, fabric).

`nvmlDeviceGetGpuFabricInfoV(handle, byref(c_nvmlGpuFabricInfo_v2_t()))` fills the cluster UUID
(16 bytes), the clique ID, the registration state and its status (an `nvmlReturn_t`). GPUs
without a fabric, older drivers and older pynvml answer NotSupported or lack the call: None. The
UUID is written in canonical lower-case form and the status as `success` or pynvml's error word
(`NotReady`, ...), so that `nvidia.com/gpu.clique` reads as GFD writes it.
"""

from __future__ import annotations

import ctypes
import uuid
from typing import Any

from agent.errors import NvmlError
from agent.model import FABRIC_SUCCESS, FabricState, GpuFabric
from agent.nvml.fake_structs import ERROR_CODES

STATES: tuple[FabricState, ...] = (
    FabricState.NOT_SUPPORTED,  # NVML_GPU_FABRIC_STATE_NOT_SUPPORTED = 0
    FabricState.NOT_STARTED,  # 1
    FabricState.IN_PROGRESS,  # 2
    FabricState.COMPLETED,  # 3
)
"""Fabric states by NVML's number."""

_WORDS = {code: name for name, code, _ in ERROR_CODES}
_CODES = {name: code for name, code, _ in ERROR_CODES}
_UNKNOWN = "Unknown"
_ARGUMENT_VERSION_MISMATCH = _CODES["ArgumentVersionMismatch"]


def status_word(code: int) -> str:
    """`success` for NVML_SUCCESS, else pynvml's error word; `Unknown` for a code it lacks."""
    return FABRIC_SUCCESS if code == 0 else _WORDS.get(code, _UNKNOWN)


def status_code(word: str) -> int:
    """Inverse of `status_word`; ValueError for a word NVML does not have."""
    if word == FABRIC_SUCCESS:
        return 0
    try:
        return _CODES[word]
    except KeyError:
        raise ValueError(f"{word!r} is not {FABRIC_SUCCESS} or an NVML error word") from None


def status_words() -> tuple[str, ...]:
    """Every status a fixture may name."""
    return (FABRIC_SUCCESS, *_CODES)


def read_fabric(nvml: Any, handle: Any, call: Any) -> GpuFabric | None:
    """The GPU's fabric info, or None where this pynvml, driver or GPU has none.

    `call(function, *args)` runs an NVML function and returns None for NotSupported or a missing
    function (the backend's `_optional`); a driver that does not take the v2 structure
    (ArgumentVersionMismatch) has none either; other NVML errors go through to the caller.
    """
    make = getattr(nvml, "c_nvmlGpuFabricInfo_v2_t", None)
    if make is None:
        return None
    info = make()
    try:
        if call("nvmlDeviceGetGpuFabricInfoV", handle, ctypes.byref(info)) is None:
            return None
    except NvmlError as exc:
        if exc.code == _ARGUMENT_VERSION_MISMATCH:
            return None
        raise
    state = int(info.state)
    return GpuFabric(
        cluster_uuid=str(uuid.UUID(bytes=bytes(info.clusterUuid))),
        clique_id=int(info.cliqueId),
        state=STATES[state] if 0 <= state < len(STATES) else FabricState.NOT_SUPPORTED,
        status=status_word(int(info.status)),
    )
