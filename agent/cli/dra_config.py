"""The DRA part of `gputopo-agent run`'s configuration (DESIGN §14).

`--dra-gpus` (file: `dra.gpus`, a list or a comma string) gives GPUs to the DRA driver instead of
the device plugin: `none` (default), `all`, or GPU indices and UUIDs. Each GPU is served by one of
the two, never both. `--dra-registry-dir` and `--dra-plugins-dir` are the kubelet's
plugin-watcher and plugin directories (under its `--root-dir`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.errors import ConfigError
from agent.model import NodeInventory

NONE, ALL = "none", "all"


@dataclass(frozen=True, slots=True, kw_only=True)
class DraSettings:
    gpus: tuple[str, ...] = ()  # indices or UUIDs; empty: none
    all_gpus: bool = False
    registry_dir: Path = Path("/var/lib/kubelet/plugins_registry")
    plugins_dir: Path = Path("/var/lib/kubelet/plugins")

    @property
    def enabled(self) -> bool:
        return self.all_gpus or bool(self.gpus)


def dra_settings(raw: Mapping[str, Any], errors: list[str]) -> DraSettings:
    """From the resolved options `draGpus`, `draRegistryDir`, `draPluginsDir`."""
    words = tuple(str(w).strip() for w in raw["draGpus"] or () if str(w).strip())
    special = [w for w in words if w in (NONE, ALL)]
    if special and len(words) > 1:
        errors.append(f"--dra-gpus: {special[0]!r} cannot be combined with other GPUs: {words}")
        words = ()
    return DraSettings(
        gpus=tuple(w for w in words if w not in (NONE, ALL)),
        all_gpus=words == (ALL,),
        registry_dir=raw["draRegistryDir"],
        plugins_dir=raw["draPluginsDir"],
    )


def file_values(path: Path, section: Any, values: dict[str, Any], errors: list[str]) -> None:
    """The config file's `dra` section into the option values (`dra.gpus` -> `draGpus`)."""
    if section is None:
        return
    if not isinstance(section, Mapping):
        errors.append(f"{path}: dra: expected a mapping with `gpus`")
        return
    for key, value in section.items():
        if key != "gpus":
            errors.append(f"{path}: dra.{key}: unknown key")
        elif isinstance(value, list):
            values["draGpus"] = (f"{path}: dra.gpus", ",".join(str(v) for v in value))
        else:
            values["draGpus"] = (f"{path}: dra.gpus", value)


def dra_gpu_indices(settings: DraSettings, inventory: NodeInventory) -> frozenset[int]:
    """The indices of the GPUs given to DRA; ConfigError names every GPU the node lacks."""
    if settings.all_gpus:
        return frozenset(g.index for g in inventory.gpus)
    by_name = {str(g.index): g.index for g in inventory.gpus}
    by_name.update({g.uuid: g.index for g in inventory.gpus})
    unknown = [w for w in settings.gpus if w not in by_name]
    if unknown:
        raise ConfigError(
            f"--dra-gpus: no GPU {', '.join(unknown)} on this node "
            f"(it has indices 0-{len(inventory.gpus) - 1})"
        )
    return frozenset(by_name[w] for w in settings.gpus)
