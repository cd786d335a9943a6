"""The real helm (built from the Go module proxy by `scripts/helm/build.sh`) and the chart in
`daemonset/helm/gputopo/`: `helm_binary()` says where helm is or why it is not (tests skip with
that reason), `helm(...)` runs it, `template(values)` renders the chart into objects.

`ConfigMap` data holding the agent's and the scheduler's config files are compared as YAML:
`same_objects` parses them, since the chart writes them from values (no comments).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from tests.builders import render as r

CHART = r.DAEMONSET / "helm" / "gputopo"
BUILD = r.REPO / "scripts" / "helm" / "build.sh"
ENV = "GPUTOPO_HELM"
# ConfigMap keys whose value is a YAML config file (compared parsed).
YAML_DATA = frozenset({"agent.yaml", "scheduler.yaml"})


def helm_binary() -> tuple[str | None, str]:
    """(path, "") where helm is built, else (None, why not): $GPUTOPO_HELM, or build.sh's cache."""
    given = os.environ.get(ENV)
    if given:
        return (
            (given, "") if os.access(given, os.X_OK) else (None, f"${ENV}={given} is not a program")
        )
    done = subprocess.run(
        ["bash", str(BUILD), "--path"], capture_output=True, text=True, timeout=30, check=False
    )
    path = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    if path and os.access(path, os.X_OK):
        return path, ""
    return (
        None,
        "helm is not built here: `bash scripts/helm/build.sh` (needs go and its module proxy)",
    )


def helm(
    binary: str, *args: str, check: bool = True, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """helm with its own empty config and cache (no repositories, no plugins)."""
    home = Path(tempfile.mkdtemp(prefix="gputopo-helm-", dir="/tmp"))
    helm_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_DATA_HOME": str(home / "data"),
        **(env or {}),
    }
    done = subprocess.run(
        [binary, *args], capture_output=True, text=True, timeout=300, check=False, env=helm_env
    )
    if check and done.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)}: {done.stderr.strip()}")
    return done


def values_file(values: Mapping[str, Any]) -> Path:
    path = Path(tempfile.mkdtemp(prefix="gputopo-values-", dir="/tmp")) / "values.json"
    path.write_text(json.dumps(values), encoding="utf-8")
    return path


def template(binary: str, values: Mapping[str, Any] | None = None) -> list[r.Obj]:
    """`helm template` of the chart with `values` (JSON is YAML) as objects."""
    args = ["template", "gputopo", str(CHART)]
    if values:
        args += ["--values", str(values_file(values))]
    return r.load_yaml_docs(helm(binary, *args).stdout)


def comparable(obj: Mapping[str, Any]) -> r.Obj:
    """`obj` with its config-file ConfigMap data parsed, for comparing."""
    if obj.get("kind") != "ConfigMap":
        return dict(obj)
    data = {
        k: yaml.safe_load(v) if k in YAML_DATA else v for k, v in (obj.get("data") or {}).items()
    }
    return {**obj, "data": data}


def by_key(objects: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str, str], r.Obj]:
    return {r.key(o): comparable(o) for o in objects}


def added(objects: Iterable[r.Obj], base: Iterable[r.Obj]) -> list[r.Obj]:
    """The objects of `objects` that `base` does not have (by apiVersion, kind, namespace, name)."""
    known = {r.key(o) for o in base}
    return [o for o in objects if r.key(o) not in known]


def merged(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """`extra` merged into `base` map by map, as helm merges values files."""
    out = dict(base)
    for k, v in extra.items():
        both = isinstance(out.get(k), Mapping) and isinstance(v, Mapping)
        out[k] = merged(out[k], v) if both else v
    return out
