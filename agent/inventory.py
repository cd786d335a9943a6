"""Node inventory discovery: the one place the agent turns an NVML backend into the shared model."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Protocol, runtime_checkable

from agent.model import LinkMatrix, NodeInventory, NvlinkFabric
from agent.nvml.backend import NvmlBackend
from agent.plural import counted

log = logging.getLogger(__name__)


@runtime_checkable
class KnowsFabric(Protocol):
    """A backend that can tell how its NVLinks are wired (`PynvmlBackend` can)."""

    def nvlink_fabric(self) -> NvlinkFabric: ...


def discover(backend: NvmlBackend) -> NodeInventory:
    """GPUs (with MIG devices), NUMA nodes, the link matrix and driver versions of this node."""
    gpus = backend.gpus()
    links = backend.links(gpus)
    fabric = backend.nvlink_fabric() if isinstance(backend, KnowsFabric) else guess_fabric(links)
    inventory = NodeInventory(
        gpus=gpus,
        links=links,
        numa_nodes=backend.numa_nodes(),
        driver_version=backend.driver_version(),
        cuda_driver_version=backend.cuda_driver_version(),
        nvlink_fabric=fabric,
    )
    log.debug(
        "discovered %s, %s",
        counted(len(gpus), "GPU"),
        counted(len(inventory.numa_nodes), "NUMA node"),
    )
    return inventory


def guess_fabric(links: LinkMatrix) -> NvlinkFabric:
    """Without wiring facts: no NVLink → none; every pair NVLinked → nvswitch; else direct."""
    pairs = [links.link(i, j) for i in range(links.size) for j in range(i + 1, links.size)]
    if not any(p.nvlinks for p in pairs):
        return NvlinkFabric.NONE
    return NvlinkFabric.NVSWITCH if all(p.nvlinks for p in pairs) else NvlinkFabric.DIRECT


def load_inventory(fixture: str | Path | None, host_root: Path = Path("/")) -> NodeInventory:
    """Discover through the real NVML (`fixture=None`) or a fixture (a built-in name or a file)."""
    from agent.nvml.pynvml_backend import open_backend

    backend = open_backend(fixture, host_root)
    try:
        return discover(backend)
    finally:
        backend.close()
