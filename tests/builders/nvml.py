"""Builders and a clock for the NVML-layer tests."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.nvml.fake_pynvml import FakePynvml
from agent.nvml.fixture import Fixture, fixture_from_mapping, load_fixture
from agent.nvml.pynvml_backend import PynvmlBackend, fake_backend

A100 = "NVIDIA A100-SXM4-80GB"
HAS_DRIVER = Path("/proc/driver/nvidia/version").exists()
"""Tests of the no-driver paths skip on a machine with the NVIDIA kernel driver loaded."""


BackendFor = Callable[..., tuple[PynvmlBackend, FakePynvml]]
"""The `backend_for` fixture: `backend_for(fixture, **fake_options)`."""


def gpu_doc(index: int, **overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "index": index,
        "uuid": f"GPU-00000000-0000-4000-8000-00000000000{index}",
        "name": A100,
        "memoryMiB": 81920,
        "pciBusId": f"00000000:{0x10 + index:02X}:00.0",
        "numaNode": 0,
        "computeCapability": "8.0",
    }
    doc.update(overrides)
    return doc


def mig_doc(profile: str, gi: int, start: int, size: int, memory: int = 9856) -> dict[str, Any]:
    return {
        "profile": profile,
        "uuid": f"MIG-00000000-0000-4000-8000-0000000000{gi:02d}",
        "giId": gi,
        "ciId": 0,
        "memoryMiB": memory,
        "start": start,
        "size": size,
    }


def node_doc(gpus: int = 2, cell: str = "NV12", fabric: str = "nvswitch") -> dict[str, Any]:
    """A valid fixture document: `gpus` A100s on 2 NUMA nodes, every pair `cell`."""
    return {
        "version": 1,
        "driverVersion": "550.54.15",
        "cudaDriverVersion": 12040,
        "nvlinkFabric": fabric,
        "numa": [
            {"id": 0, "cpus": "0-3", "memoryMiB": 1000, "distances": [10, 21]},
            {"id": 1, "cpus": "4-7", "memoryMiB": 1000, "distances": [21, 10]},
        ],
        "gpus": [gpu_doc(i) for i in range(gpus)],
        "topology": [["X" if i == j else cell for j in range(gpus)] for i in range(gpus)],
    }


def variant(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of `doc` with the value at `a.b[2].c` replaced (or deleted for `...`)."""
    out = copy.deepcopy(doc)
    parts = path.replace("]", "").replace("[", ".").split(".")
    target: Any = out
    for part in parts[:-1]:
        target = target[int(part)] if isinstance(target, list) else target[part]
    last: Any = int(parts[-1]) if isinstance(target, list) else parts[-1]
    if value is ...:
        del target[last]
    else:
        target[last] = value
    return out


def backend_for(
    fixture: str | dict[str, Any] | Fixture, **options: Any
) -> tuple[PynvmlBackend, FakePynvml]:
    """A real backend over the fake for a built-in name, a document or a parsed fixture."""
    if isinstance(fixture, dict):
        fixture = fixture_from_mapping(fixture, "test.yaml")
    elif isinstance(fixture, str):
        fixture = load_fixture(fixture)
    backend, fake = fake_backend(fixture, **options)
    assert isinstance(fake, FakePynvml)
    return backend, fake
