"""The `flags`, `sharing` and `imex` sections of NVIDIA's device-plugin config file (`version: v1`).

Accepted unchanged: NVIDIA's own flags that gputopo does not use are ignored, unknown keys are
errors. Honoured: `flags.migStrategy`, `flags.failOnInitError`, `flags.plugin.passDeviceSpecs`,
`flags.plugin.deviceListStrategy`, `flags.plugin.deviceIDStrategy`, `sharing.timeSlicing` or
`sharing.mps` (whole GPUs, at most 48 replicas, `failRequestsGreaterThanOne` forced; the MPS
control daemon itself is `gputopo-agent mps`'s), and `imex.channelIDs` / `imex.required`.
Problems are appended to `errors` as `<file>: <key path>: <reason>`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from agent.resource_names import GPU_RESOURCE, MIG_RESOURCE_PREFIX, mig_profile
from agent.shares import MAX_MPS_CLIENTS, Sharing
from deviceplugin.settings import (
    MAX_REPLICAS,
    Imex,
    SharedResource,
    TimeSlicing,
    extended_resource_problem,
)

NVIDIA_FLAGS = frozenset({
    "migStrategy", "failOnInitError", "nvidiaDriverRoot", "nvidiaDevRoot", "driverRoot",
    "devRoot", "gdsEnabled", "mofedEnabled", "gdrcopyEnabled", "useNodeFeatureAPI",
    "deviceDiscoveryStrategy", "mpsRoot", "plugin", "gfd",
})  # fmt: skip
NVIDIA_PLUGIN_FLAGS = frozenset({
    "passDeviceSpecs", "deviceListStrategy", "deviceIDStrategy", "cdiAnnotationPrefix",
    "nvidiaCTKPath", "nvidiaCDIHookPath", "containerDriverRoot", "sharedDevicesAllocationPolicy",
})  # fmt: skip
HONOURED = {
    ("migStrategy",): "migStrategy",
    ("failOnInitError",): "failOnInitError",
    ("plugin", "passDeviceSpecs"): "passDeviceSpecs",
    ("plugin", "deviceListStrategy"): "deviceListStrategy",
    ("plugin", "deviceIDStrategy"): "deviceIdStrategy",
}
"""NVIDIA key path -> our camelCase option key."""

_SHARED_KEYS = frozenset({"name", "replicas", "rename", "devices"})


def fold_flags(
    where: str, flags: Any, values: dict[str, tuple[str, Any]], errors: list[str]
) -> None:
    """Add the honoured `flags` entries to `values` (key -> (source, raw value))."""
    if flags is None:
        return
    if not isinstance(flags, dict) or not isinstance(flags.get("plugin") or {}, dict):
        errors.append(f"{where}: flags: expected a mapping (with an optional plugin mapping)")
        return
    plugin = flags.get("plugin") or {}
    errors += [f"{where}: flags.{k}: unknown key" for k in flags if k not in NVIDIA_FLAGS]
    errors += [
        f"{where}: flags.plugin.{k}: unknown key" for k in plugin if k not in NVIDIA_PLUGIN_FLAGS
    ]
    for keys, ours in HONOURED.items():
        section = plugin if len(keys) == 2 else flags
        value = section.get(keys[-1])
        if value is None:
            continue
        source = f"{where}: flags.{'.'.join(keys)}"
        if ours in values and values[ours][1] != value:
            errors.append(f"{source}: {value!r} contradicts {ours}: {values[ours][1]!r}")
        values[ours] = (source, value)


def parse_sharing(where: str, sharing: Any, errors: list[str]) -> TimeSlicing:
    """The `sharing` section: `timeSlicing` or `mps` (one of them), in NVIDIA's format."""
    if sharing is None:
        return TimeSlicing()
    if not isinstance(sharing, dict):
        errors.append(f"{where}: sharing: expected a mapping")
        return TimeSlicing()
    modes = {"timeSlicing": Sharing.TIME_SLICING, "mps": Sharing.MPS}
    errors += [f"{where}: sharing.{k}: unknown key" for k in sharing if k not in modes]
    given = [k for k in modes if sharing.get(k)]
    if len(given) > 1:
        errors.append(f"{where}: sharing: timeSlicing and mps are exclusive; give one")
    if not given:
        return TimeSlicing()
    return _parse_mode(f"{where}: sharing.{given[0]}", sharing[given[0]], modes[given[0]], errors)


def _parse_mode(at: str, section: Any, mode: Sharing, errors: list[str]) -> TimeSlicing:
    if not isinstance(section, dict):
        errors.append(f"{at}: expected a mapping")
        return TimeSlicing()
    allowed = ("renameByDefault", "failRequestsGreaterThanOne", "resources")
    errors += [f"{at}.{k}: unknown key" for k in section if k not in allowed]
    rename, fail = (_flag(at, section, key, errors) for key in allowed[:2])
    if mode is Sharing.MPS:
        if "failRequestsGreaterThanOne" in section and not fail:
            errors.append(f"{at}.failRequestsGreaterThanOne: MPS serves one replica per container")
        fail = True
    entries = section.get("resources") or []
    if not isinstance(entries, list):
        errors.append(f"{at}.resources: expected a list")
        entries = []
    parsed = [_shared(f"{at}.resources[{i}]", e, errors) for i, e in enumerate(entries)]
    if mode is Sharing.MPS:
        errors += _mps_problems(at, parsed)
    resources = tuple(r for r in parsed if r is not None)
    names = Counter(r.name for r in resources)
    errors += [f"{at}.resources: {n} listed twice" for n in sorted(names) if names[n] > 1]
    errors += _name_problems(at, parsed, rename_by_default=rename)
    return TimeSlicing(
        sharing=mode,
        rename_by_default=rename,
        fail_requests_greater_than_one=fail,
        resources=resources,
    )


def _mps_problems(at: str, entries: Sequence[SharedResource | None]) -> list[str]:
    """MPS shares whole GPUs (no MIG shares), at most MAX_MPS_CLIENTS clients per GPU."""
    problems: list[str] = []
    for pos, entry in enumerate(entries):
        if entry is None:
            continue
        if entry.name != GPU_RESOURCE:
            problems.append(
                f"{at}.resources[{pos}].name: MPS shares whole GPUs ({GPU_RESOURCE}), "
                f"not {entry.name}"
            )
        if entry.replicas > MAX_MPS_CLIENTS:
            problems.append(
                f"{at}.resources[{pos}].replicas: at most {MAX_MPS_CLIENTS} (CUDA MPS clients "
                f"per GPU), got {entry.replicas}"
            )
    return problems


def _name_problems(
    at: str, entries: Sequence[SharedResource | None], *, rename_by_default: bool
) -> list[str]:
    """Advertised names the kubelet would refuse, or that two resources would share."""
    problems: list[str] = []
    taken: dict[str, int] = {}
    for pos, entry in enumerate(entries):
        if entry is None:
            continue
        target = entry.advertised_name(rename_by_default)
        field = f"{at}.resources[{pos}]." + ("rename" if entry.rename else "name")
        given = f"{entry.rename!r} advertises {target}" if entry.rename else target
        why = extended_resource_problem(target)
        if why is not None:
            problems.append(f"{field}: {given}, a name the kubelet refuses: {why}")
        elif target in taken:
            problems.append(f"{field}: {given}, the same name as resources[{taken[target]}]")
        elif target != entry.name and _reserved(target, entry.name):
            problems.append(
                f"{field}: {given}, a name the device plugin advertises itself (pick another)"
            )
        elif target == entry.name and entry.devices is not None:
            problems.append(
                f"{at}.resources[{pos}].devices: sharing only some devices needs a renamed "
                "resource (rename, or renameByDefault): else whole devices and replicas would "
                f"share the name {target}"
            )
        taken.setdefault(target, pos)
    return problems


def _reserved(target: str, source: str) -> bool:
    """`target` may name devices advertised unshared: whole GPUs or a MIG profile's devices."""
    if target == GPU_RESOURCE:
        return True
    return target.startswith(MIG_RESOURCE_PREFIX) and target != f"{source}.shared"


def _flag(at: str, section: dict[str, Any], key: str, errors: list[str]) -> bool:
    value = section.get(key, False)
    if not isinstance(value, bool):
        errors.append(f"{at}.{key}: expected true or false, got {value!r}")
        return False
    return value


def _shared(where: str, entry: Any, errors: list[str]) -> SharedResource | None:
    if not isinstance(entry, dict):
        errors.append(f"{where}: expected a mapping with name and replicas")
        return None
    problems = [f"{k}: unknown key" for k in entry if k not in _SHARED_KEYS]
    name, replicas, rename = entry.get("name"), entry.get("replicas"), entry.get("rename")
    if not isinstance(name, str) or not (name == GPU_RESOURCE or mig_profile(name) is not None):
        problems.append(f"name: expected nvidia.com/gpu or nvidia.com/mig-<profile>, got {name!r}")
        name = ""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        problems.append(f"replicas: expected an integer >= 1, got {replicas!r}")
        replicas = 1
    elif replicas > MAX_REPLICAS:
        problems.append(
            f"replicas: at most {MAX_REPLICAS} (the device list must fit one gRPC message), "
            f"got {replicas:,}"
        )
    if rename is not None and (not isinstance(rename, str) or not rename):
        problems.append(f"rename: expected a resource name, got {rename!r}")
    devices = _devices(entry.get("devices"), problems)
    errors += [f"{where}.{p}" for p in problems]
    if problems:
        return None
    return SharedResource(name=name, replicas=replicas, rename=rename, devices=devices)


def _devices(value: Any, problems: list[str]) -> int | tuple[str, ...] | None:
    """`all`/absent -> None; a count; or a list of GPU indices (`0`, `0:1`) or UUIDs."""
    if value is None or value == "all":
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if isinstance(value, list) and value and all(isinstance(v, str | int) for v in value):
        return tuple(str(v) for v in value)
    problems.append(f"devices: expected all, a count or a list of indices/UUIDs, got {value!r}")
    return None


def parse_imex(where: str, imex: Any, errors: list[str]) -> Imex:
    """The `imex` section: `channelIDs` (`[]` or `[0]`, as NVIDIA's plugin allows) and
    `required`."""
    if imex is None:
        return Imex()
    if not isinstance(imex, dict):
        errors.append(f"{where}: imex: expected a mapping with channelIDs and required")
        return Imex()
    at = f"{where}: imex"
    errors += [f"{at}.{k}: unknown key" for k in imex if k not in ("channelIDs", "required")]
    ids = imex.get("channelIDs") or []
    if ids not in ([], [0]) or not all(type(i) is int for i in ids):
        errors.append(
            f"{at}.channelIDs: must be [] or [0] (as NVIDIA's plugin allows), got {ids!r}"
        )
        ids = []
    return Imex(channel_ids=tuple(ids), required=_flag(at, imex, "required", errors))
