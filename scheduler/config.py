"""The scheduler's `version: v1` config file: scoring weights, topology levels, gang defaults,
preemption (DESIGN §11).

`load_config(None)` reads the shipped file (`scheduler/default-config.yaml`); a path is read
and validated, every problem gathered into one `ConfigError` naming the file and key paths. Keys
left out of a file keep the `SchedulerConfig` defaults, which are the shipped file's values (a
test holds them equal), so `version: v1` alone means the shipped policy. Flags and environment
variables (precedence flag > env > file > default) are merged by the `run` command on top of
`SchedulerConfig`.

```yaml
version: v1
schedulerName: gputopo-scheduler
scoring: {weights: {fragmentation: 10, topology: 5, spreadOnCpuNodes: 1, gpuAvoidance: 1},
          preferUsedNodes: false, candidateLimit: 0}
topologyLevels: [topology.kubernetes.io/zone, gputopo.io/rack, nvidia.com/gpu.clique]
gang: {scheduleTimeoutSeconds: 60}
shareLockSeconds: 30
preemption: {enabled: true, reclaim: true, reclaimToFairShare: false, pdb: preferred,
             nonPreemptiblePriority: 1000000000, nominationTimeoutSeconds: 60,
             starvationSeconds: 300, starvationHoldSeconds: 600, maxStarvationHolds: 2}
```
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeGuard

from agent.docread import read_yaml
from agent.errors import ConfigError
from agent.shares import DEFAULT_SHARE_LOCK_SECONDS
from scheduler.claims.status import DEFAULT_BINDING_TIMEOUT_SECONDS
from scheduler.placement.load import DEFAULT_MAX_AGE_S, LoadAware
from scheduler.placement.scores import DEFAULT_WEIGHTS, SCORE_FACTORIES, SCORE_FUNCTIONS, Scoring
from scheduler.preemption import PreemptionSettings

__all__ = [
    "DEFAULT_CONFIG_PATH",
    "DEFAULT_GANG_TIMEOUT_SECONDS",
    "DEFAULT_TOPOLOGY_LEVELS",
    "ConfigError",
    "SchedulerConfig",
    "config_file_argument",
    "load_config",
    "parse_config",
]

DEFAULT_CONFIG_PATH = Path(__file__).with_name("default-config.yaml")
_TOP_KEYS = {
    "version",
    "schedulerName",
    "scoring",
    "topologyLevels",
    "gang",
    "preemption",
    "shareLockSeconds",
    "bindingTimeoutSeconds",
    "loadAware",
    "leaderElect",
    "leaderElectNamespace",
    "metricsAddress",
    "kubeconfig",
}
DEFAULT_TOPOLOGY_LEVELS = (
    "topology.kubernetes.io/zone",
    "gputopo.io/rack",
    "nvidia.com/gpu.clique",
)
DEFAULT_GANG_TIMEOUT_SECONDS = 60.0
"""A gang's `scheduleTimeoutSeconds` when neither its PodGroup nor the config file sets one."""
_SCORING_KEYS = {"weights", "preferUsedNodes", "candidateLimit"}
_GANG_KEYS = {"scheduleTimeoutSeconds"}
_LOAD_KEYS = {"shares", "maxAgeSeconds"}
_PREEMPTION_FLAGS = {
    "enabled": "enabled",
    "reclaim": "reclaim",
    "reclaimToFairShare": "reclaim_to_fair_share",
}
_PREEMPTION_SECONDS = {  # key -> (field, may be 0)
    "nominationTimeoutSeconds": ("nomination_timeout", True),
    "starvationSeconds": ("starvation_seconds", True),
    "starvationHoldSeconds": ("starvation_hold_seconds", False),
}
_PREEMPTION_KEYS = {
    *_PREEMPTION_FLAGS,
    *_PREEMPTION_SECONDS,
    "pdb",
    "nonPreemptiblePriority",
    "maxStarvationHolds",
}
PDB_MODES = ("preferred", "required")


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerConfig:
    """The parsed file. The defaults are `default-config.yaml`'s values. A run option left None was
    not set in the file (flag/env/default decide)."""

    scheduler_name: str = "gputopo-scheduler"
    weights: Mapping[str, float] = field(default_factory=lambda: DEFAULT_WEIGHTS)
    prefer_used_nodes: bool = False
    candidate_limit: int = 0
    topology_levels: tuple[str, ...] = DEFAULT_TOPOLOGY_LEVELS
    gang_timeout_seconds: float = DEFAULT_GANG_TIMEOUT_SECONDS
    preemption: PreemptionSettings = field(default_factory=PreemptionSettings)
    share_lock_seconds: int = DEFAULT_SHARE_LOCK_SECONDS
    binding_timeout_seconds: int = DEFAULT_BINDING_TIMEOUT_SECONDS
    """How long a bind waits for its DRA devices' binding conditions (kube-scheduler's
    DynamicResources `bindingTimeout`, 600 s by default)."""
    load_aware: LoadAware = field(default_factory=LoadAware)
    leader_elect: bool | None = None
    leader_elect_namespace: str | None = None
    metrics_address: str | None = None
    kubeconfig: str | None = None
    source: str = "<defaults>"

    def scoring(self) -> Scoring:
        """The placement `Scoring` these settings describe."""
        return Scoring.from_weights(
            self.weights,
            prefer_used_nodes=self.prefer_used_nodes,
            candidate_limit=self.candidate_limit,
        )


def load_config(path: str | Path | None = None) -> SchedulerConfig:
    """Read and validate `path` (default: the shipped `default-config.yaml`); ConfigError if bad."""
    where = Path(path) if path is not None else DEFAULT_CONFIG_PATH
    data = read_yaml(where, ConfigError, "the scheduler config")
    return parse_config(data, source=str(where))


def config_file_argument(text: str) -> str:
    """An argparse `type=` for a scheduler config path: the path, once the file reads and
    validates (else argparse's one-line usage error naming the file and key)."""
    try:
        load_config(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def parse_config(data: object, *, source: str = "<config>") -> SchedulerConfig:
    """Validate a decoded config document; every problem in one ConfigError."""
    errors: list[str] = []
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: the config must be a mapping with `version: v1`")
    if "version" not in data:
        errors.append("version: missing (the file must say `version: v1`)")
    elif data.get("version") != "v1":
        errors.append(f"version: must be v1, got {data.get('version')!r}")
    errors.extend(f"{key}: unknown key" for key in sorted(set(data) - _TOP_KEYS, key=str))
    values: dict[str, Any] = {"source": source}
    values.update(_parse_run_options(data, errors))
    values.update(_parse_scoring(data.get("scoring"), errors))
    if "topologyLevels" in data:
        levels = data["topologyLevels"]
        if not isinstance(levels, list) or not all(isinstance(v, str) and v for v in levels):
            errors.append("topologyLevels: must be a list of node label names")
        else:
            values["topology_levels"] = tuple(levels)
    values.update(_parse_gang(data.get("gang"), errors))
    for key, attr in (
        ("shareLockSeconds", "share_lock_seconds"),
        ("bindingTimeoutSeconds", "binding_timeout_seconds"),
    ):
        seconds = _whole_seconds(data, key, errors)
        if seconds is not None:
            values[attr] = seconds
    if "loadAware" in data:
        values["load_aware"] = _parse_load_aware(data["loadAware"], errors)
    preemption = _parse_preemption(data.get("preemption"), errors)
    if preemption is not None:
        values["preemption"] = preemption
    if errors:
        raise ConfigError(f"{source}: invalid scheduler config: " + "; ".join(errors))
    return SchedulerConfig(**values)


def _whole_seconds(data: Mapping[str, Any], key: str, errors: list[str]) -> int | None:
    """`key`'s whole number of seconds (>= 1), None when absent or refused (said in `errors`)."""
    if key not in data:
        return None
    seconds = data[key]
    if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 1:
        errors.append(f"{key}: must be a whole number >= 1, got {seconds!r}")
        return None
    return seconds


def _parse_load_aware(raw: object, errors: list[str]) -> LoadAware:
    """`loadAware: {shares: bool, maxAgeSeconds: number > 0}` (issue 47)."""
    if not isinstance(raw, Mapping):
        errors.append("loadAware: must be a mapping")
        return LoadAware()
    errors.extend(f"loadAware.{k}: unknown key" for k in sorted(set(raw) - _LOAD_KEYS, key=str))
    shares, age = raw.get("shares", True), raw.get("maxAgeSeconds", DEFAULT_MAX_AGE_S)
    if not isinstance(shares, bool):
        errors.append(f"loadAware.shares: must be true or false, got {shares!r}")
        shares = True
    if not _finite(age) or age <= 0:
        errors.append(f"loadAware.maxAgeSeconds: must be a number > 0, got {age!r}")
        age = DEFAULT_MAX_AGE_S
    return LoadAware(shares=shares, max_age_s=float(age))


def _parse_run_options(data: Mapping[str, Any], errors: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, attr in (
        ("schedulerName", "scheduler_name"),
        ("leaderElectNamespace", "leader_elect_namespace"),
        ("metricsAddress", "metrics_address"),
        ("kubeconfig", "kubeconfig"),
    ):
        if key in data:
            if isinstance(data[key], str) and data[key]:
                out[attr] = data[key]
            else:
                errors.append(f"{key}: must be a non-empty string")
    if "leaderElect" in data:
        if isinstance(data["leaderElect"], bool):
            out["leader_elect"] = data["leaderElect"]
        else:
            errors.append("leaderElect: must be true or false")
    return out


def _parse_scoring(raw: object, errors: list[str]) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        errors.append("scoring: must be a mapping")
        return {}
    errors.extend(
        f"scoring.{key}: unknown key" for key in sorted(set(raw) - _SCORING_KEYS, key=str)
    )
    out: dict[str, Any] = {}
    weights = raw.get("weights")
    if weights is not None:
        parsed = _parse_weights(weights, errors)
        if parsed is not None:
            out["weights"] = MappingProxyType(parsed)
    if "preferUsedNodes" in raw:
        if isinstance(raw["preferUsedNodes"], bool):
            out["prefer_used_nodes"] = raw["preferUsedNodes"]
        else:
            errors.append("scoring.preferUsedNodes: must be true or false")
    if "candidateLimit" in raw:
        limit = raw["candidateLimit"]
        if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0:
            out["candidate_limit"] = limit
        else:
            errors.append(f"scoring.candidateLimit: must be an integer >= 0, got {limit!r}")
    return out


def _parse_weights(raw: object, errors: list[str]) -> dict[str, float] | None:
    if not isinstance(raw, Mapping):
        errors.append("scoring.weights: must be a mapping of score name to weight")
        return None
    out: dict[str, float] = {}
    for name, weight in raw.items():
        if name not in SCORE_FUNCTIONS and name not in SCORE_FACTORIES:
            known = ", ".join((*SCORE_FUNCTIONS, *SCORE_FACTORIES))
            errors.append(f"scoring.weights.{name}: unknown score (known: {known})")
        elif not _finite(weight) or weight < 0:
            errors.append(f"scoring.weights.{name}: must be a finite number >= 0, got {weight!r}")
        else:
            out[str(name)] = float(weight)
    return out


def _parse_gang(raw: object, errors: list[str]) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        errors.append("gang: must be a mapping")
        return {}
    errors.extend(f"gang.{key}: unknown key" for key in sorted(set(raw) - _GANG_KEYS, key=str))
    if "scheduleTimeoutSeconds" not in raw:
        return {}
    timeout = raw["scheduleTimeoutSeconds"]
    if not _finite(timeout) or timeout <= 0:
        errors.append(f"gang.scheduleTimeoutSeconds: must be a finite number > 0, got {timeout!r}")
        return {}
    return {"gang_timeout_seconds": float(timeout)}


def _parse_preemption(raw: object, errors: list[str]) -> PreemptionSettings | None:
    """The `preemption:` block (DESIGN §11) over the `PreemptionSettings` defaults."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        errors.append("preemption: must be a mapping")
        return None
    errors.extend(
        f"preemption.{key}: unknown key" for key in sorted(set(raw) - _PREEMPTION_KEYS, key=str)
    )
    out: dict[str, Any] = {}
    for key, attr in _PREEMPTION_FLAGS.items():
        if key in raw:
            if isinstance(raw[key], bool):
                out[attr] = raw[key]
            else:
                errors.append(f"preemption.{key}: must be true or false")
    if "pdb" in raw:
        if raw["pdb"] in PDB_MODES:
            out["pdb_required"] = raw["pdb"] == "required"
        else:
            errors.append(f"preemption.pdb: must be preferred or required, got {raw['pdb']!r}")
    out.update(_preemption_numbers(raw, errors))
    return PreemptionSettings(**out)


def _preemption_numbers(raw: Mapping[str, Any], errors: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, (attr, zero_ok) in _PREEMPTION_SECONDS.items():
        if key in raw:
            value = raw[key]
            if _finite(value) and (value > 0 or (zero_ok and value == 0)):
                out[attr] = float(value)
            else:
                bound = ">= 0" if zero_ok else "> 0"
                errors.append(f"preemption.{key}: must be a finite number {bound}, got {value!r}")
    for key, attr, low in (
        ("nonPreemptiblePriority", "non_preemptible_priority", None),
        ("maxStarvationHolds", "max_starvation_holds", 0),
    ):
        if key in raw:
            value = raw[key]
            integer = isinstance(value, int) and not isinstance(value, bool)
            if integer and (low is None or value >= low):
                out[attr] = value
            else:
                bound = "an integer" if low is None else f"an integer >= {low}"
                errors.append(f"preemption.{key}: must be {bound}, got {value!r}")
    return out


def _finite(value: object) -> TypeGuard[int | float]:
    """A YAML number other than `.nan` / `.inf` (which compare false, or beat every bound)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
