"""MIG GPU-instance profiles of A100 and H100, for the fake NVML and fixture validation.

The real agent asks NVML for profiles; these tables only let the fake answer the same calls and
let `fixture.py` reject layouts a real GPU could not have. Facts (reference §4.2, §5.2, §5.3, §5.5):
the memory is cut into 8 slices and a placement is `start:size` in them; each profile has its own
allowed starts and a per-GPU instance cap; profile IDs are nvidia-smi `mig -lgip`'s.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class MigProfile:
    name: str  # "1g.10gb", "1g.10gb+me"
    nvml_profile: int  # NVML_GPU_INSTANCE_PROFILE_* enum value (not the ID)
    profile_id: int  # the profile ID NVML returns in `.id` / `profileId`
    slices: int  # compute slices (1g … 7g)
    size: int  # memory slices of one placement
    starts: tuple[int, ...]  # allowed placement starts
    max_instances: int
    memory_mib: int
    sms: int


MEMORY_SLICES = 8
"""A100 and H100 split their memory into 8 slices."""

# (enum, id, compute slices, size, starts, max instances); names and memory come per GPU family.
_SHAPES = {
    "1g": (0, 19, 1, 1, (0, 1, 2, 3, 4, 5, 6), 7),
    "1g+me": (7, 20, 1, 1, (0, 1, 2, 3, 4, 5, 6), 1),
    "1g.2x": (9, 15, 1, 2, (0, 2, 4, 6), 4),
    "2g": (1, 14, 2, 2, (0, 2, 4), 3),
    "3g": (2, 9, 3, 4, (0, 4), 2),
    "4g": (3, 5, 4, 4, (0,), 1),
    "7g": (4, 0, 7, 8, (0,), 1),
}
_A100_40 = {
    "1g": ("1g.5gb", 4864, 14),
    "1g+me": ("1g.5gb+me", 4864, 14),
    "1g.2x": ("1g.10gb", 9856, 14),
    "2g": ("2g.10gb", 9856, 28),
    "3g": ("3g.20gb", 19968, 42),
    "4g": ("4g.20gb", 19968, 56),
    "7g": ("7g.40gb", 40192, 98),
}
_A100_80 = {
    "1g": ("1g.10gb", 9856, 14),
    "1g+me": ("1g.10gb+me", 9856, 14),
    "1g.2x": ("1g.20gb", 19968, 14),
    "2g": ("2g.20gb", 19968, 28),
    "3g": ("3g.40gb", 40192, 42),
    "4g": ("4g.40gb", 40192, 56),
    "7g": ("7g.80gb", 80384, 98),
}
_H100_SMS = {"1g": 16, "1g+me": 16, "1g.2x": 26, "2g": 32, "3g": 60, "4g": 64, "7g": 132}


def _family(
    names: dict[str, tuple[str, int, int]], sms: dict[str, int] | None = None
) -> tuple[MigProfile, ...]:
    out = []
    for shape, (enum, pid, slices, size, starts, cap) in _SHAPES.items():
        name, memory, a100_sms = names[shape]
        out.append(
            MigProfile(
                name=name,
                nvml_profile=enum,
                profile_id=pid,
                slices=slices,
                size=size,
                starts=starts,
                max_instances=cap,
                memory_mib=memory,
                sms=sms[shape] if sms else a100_sms,
            )
        )
    return tuple(out)


def profiles_for(product: str, memory_mib: int) -> tuple[MigProfile, ...]:
    """The GPU-instance profiles of this GPU model; empty without MIG (or not modelled)."""
    if "A100" in product:
        return _family(_A100_40 if memory_mib < 60000 else _A100_80)
    if "H100" in product and 60000 <= memory_mib < 90000:
        return _family(_A100_80, _H100_SMS)
    return ()


def profile_by_name(profiles: tuple[MigProfile, ...], name: str) -> MigProfile | None:
    return next((p for p in profiles if p.name == name), None)
