"""The GPU×GPU link matrix from NVML: NVLink counts (direct or through NVSwitch), else PCIe level.

Per pair (reference §4.1, as HAMi counts): links of A whose remote PCI bus id is B's are direct
links; with none, if both GPUs have links to an NVSwitch the pair gets the smaller of the two
switch-link counts; otherwise `nvmlDeviceGetTopologyCommonAncestor` gives the PCIe level.
NotSupported or InvalidArgument on a link number means there is no such link. Functions take the
pynvml module (or the fake) and let NVMLError through for the caller to translate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent.model import GpuLink, LinkMatrix, NvlinkFabric, TopoLevel
from agent.nvml.sysfs import sysfs_bus_id


def link_matrix(
    nvml: Any, handles: Sequence[Any], bus_ids: Sequence[str]
) -> tuple[LinkMatrix, NvlinkFabric]:
    """The symmetric matrix for GPUs in index order (`handles[i]` has PCI bus id `bus_ids[i]`),
    and how its NVLinks are wired (any link to a switch: `nvswitch`; other links: `direct`)."""
    n = len(handles)
    wiring = [enabled_links(nvml, h) for h in handles]
    kinds = {kind for links in wiring for _, kind in links}
    fabric = NvlinkFabric.NONE
    if int(nvml.NVML_NVLINK_DEVICE_TYPE_SWITCH) in kinds:
        fabric = NvlinkFabric.NVSWITCH
    elif kinds:
        fabric = NvlinkFabric.DIRECT
    buses = [sysfs_bus_id(b) for b in bus_ids]
    rows: list[list[GpuLink | None]] = [[None] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            count = nvlink_count(nvml, wiring[i], wiring[j], buses[j])
            cell = GpuLink(nvlinks=count) if count else pcie_link(nvml, handles[i], handles[j])
            rows[i][j] = rows[j][i] = cell
    return LinkMatrix(tuple(tuple(row) for row in rows)), fabric


def enabled_links(nvml: Any, handle: Any) -> list[tuple[str, int]]:
    """(remote sysfs bus id, remote device type) of each enabled NVLink of a GPU."""
    absent = (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_INVALID_ARGUMENT)
    found: list[tuple[str, int]] = []
    for link in range(int(nvml.NVML_NVLINK_MAX_LINKS)):
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link) != nvml.NVML_FEATURE_ENABLED:
                continue
            remote = nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId
        except nvml.NVMLError as exc:
            if exc.value in absent:
                continue
            raise
        found.append((sysfs_bus_id(_text(remote)), _remote_type(nvml, handle, link)))
    return found


def _remote_type(nvml: Any, handle: Any, link: int) -> int:
    try:
        return int(nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link))
    except nvml.NVMLError as exc:
        if exc.value in (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_FUNCTION_NOT_FOUND):
            return int(nvml.NVML_NVLINK_DEVICE_TYPE_UNKNOWN)
        raise


def nvlink_count(
    nvml: Any, links_a: Sequence[tuple[str, int]], links_b: Sequence[tuple[str, int]], bus_b: str
) -> int:
    """NVLinks between A and B: direct links from A to B, else min of both sides' switch links."""
    direct = sum(1 for remote, _ in links_a if remote == bus_b)
    if direct:
        return direct
    switch = int(nvml.NVML_NVLINK_DEVICE_TYPE_SWITCH)
    to_switch_a = sum(1 for _, kind in links_a if kind == switch)
    to_switch_b = sum(1 for _, kind in links_b if kind == switch)
    return min(to_switch_a, to_switch_b)


def pcie_link(nvml: Any, a: Any, b: Any) -> GpuLink:
    """The PCIe level of a pair without NVLink (INTERNAL, one board, counts as PIX)."""
    try:
        level = int(nvml.nvmlDeviceGetTopologyCommonAncestor(a, b))
    except nvml.NVMLError as exc:
        if exc.value != nvml.NVML_ERROR_NOT_SUPPORTED:
            raise
        return GpuLink(level=TopoLevel.SYS)
    if level == TopoLevel.INTERNAL:
        return GpuLink(level=TopoLevel.PIX)
    try:
        return GpuLink(level=TopoLevel(level))
    except ValueError:
        return GpuLink(level=TopoLevel.SYS)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
