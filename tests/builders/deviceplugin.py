"""Small builders for device-plugin tests: inventories, settings, a fake clock."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from agent.model import (
    Gpu,
    GpuLink,
    GpuUuid,
    LinkMatrix,
    MigDevice,
    MigMode,
    MigUuid,
    NodeInventory,
    TopoLevel,
)
from deviceplugin.settings import PluginSettings

# profile -> (memory MiB, placement size, SMs) of A100-80GB GPU-instance profiles
A100_PROFILES = {
    "1g.10gb": (9856, 1, 14),
    "1g.10gb+me": (9856, 1, 14),
    "2g.20gb": (19968, 2, 28),
    "3g.40gb": (40192, 4, 42),
    "4g.40gb": (40192, 4, 56),
    "7g.80gb": (80896, 8, 98),
}


def gpu_uuid(index: int) -> GpuUuid:
    return GpuUuid(f"GPU-00000000-0000-4000-8000-{index:012d}")


def mig_devices(gpu: int, profiles: Sequence[str]) -> tuple[MigDevice, ...]:
    out, start = [], 0
    for pos, profile in enumerate(profiles):
        memory, size, sms = A100_PROFILES[profile]
        out.append(
            MigDevice(
                uuid=MigUuid(f"MIG-00000000-0000-4000-8000-{gpu:06d}{pos:06d}"),
                profile=profile,
                gi_id=pos + 1,
                ci_id=0,
                memory_mib=memory,
                start=start,
                size=size,
                multiprocessors=sms,
            )
        )
        start += size
    return tuple(out)


def make_inventory(
    gpus: int = 8,
    *,
    nvlinks: int = 12,
    numa_of: Sequence[int | None] | None = None,
    mig: Mapping[int, Sequence[str]] | None = None,
) -> NodeInventory:
    """`gpus` A100s, all pairs NV<nvlinks> (or SYS when 0), MIG layouts per GPU index."""
    numa = list(numa_of) if numa_of is not None else [i * 2 // gpus for i in range(gpus)]
    mig = mig or {}
    cells = [
        [None if i == j else GpuLink(nvlinks=nvlinks, level=TopoLevel.SYS) for j in range(gpus)]
        for i in range(gpus)
    ]
    return NodeInventory(
        gpus=tuple(
            Gpu(
                index=i,
                uuid=gpu_uuid(i),
                product="NVIDIA A100-SXM4-80GB",
                memory_mib=81920,
                pci_bus_id=f"00000000:{0x10 + i:02X}:00.0",
                minor=i,
                numa_node=numa[i],
                compute_capability="8.0",
                mig_mode=MigMode.ENABLED if i in mig else MigMode.DISABLED,
                mig_devices=mig_devices(i, mig[i]) if i in mig else (),
            )
            for i in range(gpus)
        ),
        links=LinkMatrix(tuple(tuple(row) for row in cells)),
    )


def settings(**overrides: object) -> PluginSettings:
    base = PluginSettings(device_plugin_dir=Path("/nonexistent"))
    return replace(base, **overrides)  # type: ignore[arg-type]
