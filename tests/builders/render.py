"""Render `daemonset/` the way `kubectl apply -k` does, offline.

With `kubectl` on the machine the real kustomize (`kubectl kustomize`) renders; without it a small
renderer concatenates the `resources:` files and applies the `namespace:` field, so the other checks
still run. Resources the kustomization lists but that are not in the tree yet (files other people
write) are left out of a temporary copy and reported in `Rendered.missing`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DAEMONSET = REPO / "daemonset"
EXAMPLES = DAEMONSET / "examples"
OPTIONAL = DAEMONSET / "optional"
CRDS = DAEMONSET / "crds"
IMAGE = DAEMONSET / "image"
HELM = DAEMONSET / "helm"
"""The Helm chart (tests/builders/helm.py): templates, not manifests; its own tests check it."""

Obj = dict[str, Any]

CLUSTER_SCOPED_KINDS = frozenset(
    {
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "PriorityClass",
        "RuntimeClass",
        "StorageClass",
        "Node",
        "PersistentVolume",
    }
)


@dataclass(frozen=True)
class Rendered:
    objects: tuple[Obj, ...]
    missing: tuple[str, ...]
    renderer: str  # "kubectl" or "fallback"


def kubectl_path() -> str | None:
    """The kubectl binary to use: /usr/bin/kubectl when present, else the first on PATH."""
    if Path("/usr/bin/kubectl").is_file():
        return "/usr/bin/kubectl"
    return shutil.which("kubectl")


def load_yaml_docs(text: str) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


def load_file(path: Path) -> list[Obj]:
    return load_yaml_docs(path.read_text(encoding="utf-8"))


def kustomization(root: Path = DAEMONSET) -> Obj:
    doc: Obj = yaml.safe_load((root / "kustomization.yaml").read_text(encoding="utf-8"))
    return doc


def _pruned_copy(root: Path, kust: Obj, present: Sequence[str]) -> Path:
    """A temporary copy of `root` whose kustomization lists only the resources in `present`."""
    tmp = Path(tempfile.mkdtemp(prefix="gputopo-kust-", dir="/tmp"))
    for rel in present:
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / rel, tmp / rel)
    pruned = dict(kust, resources=list(present))
    (tmp / "kustomization.yaml").write_text(yaml.safe_dump(pruned), encoding="utf-8")
    return tmp


def render_with_kubectl(kubectl: str, root: Path) -> list[Obj]:
    done = subprocess.run(
        [kubectl, "kustomize", str(root)], capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        raise AssertionError(f"kubectl kustomize {root} failed: {done.stderr.strip()}")
    return load_yaml_docs(done.stdout)


def render_fallback(root: Path, resources: Iterable[str], namespace: str | None) -> list[Obj]:
    """Concatenate the resource files; set `namespace` the way kustomize's transformer does."""
    objects: list[Obj] = []
    for rel in resources:
        for obj in load_file(root / rel):
            objects.append(_with_namespace(obj, namespace) if namespace else obj)
    return objects


def _with_namespace(obj: Obj, namespace: str) -> Obj:
    meta = dict(obj.get("metadata") or {})
    if obj.get("kind") == "Namespace":
        meta["name"] = namespace
    elif obj.get("kind") not in CLUSTER_SCOPED_KINDS:
        meta["namespace"] = namespace
    return {**obj, "metadata": meta}


def render(root: Path = DAEMONSET, *, use_kubectl: bool = True) -> Rendered:
    kust = kustomization(root)
    resources = [str(r) for r in kust.get("resources", [])]
    present = [r for r in resources if (root / r).is_file()]
    missing = tuple(r for r in resources if r not in present)
    kubectl = kubectl_path() if use_kubectl else None
    if kubectl is None:
        objects = render_fallback(root, present, kust.get("namespace"))
        return Rendered(tuple(objects), missing, "fallback")
    target = _pruned_copy(root, kust, present) if missing else root
    try:
        objects = render_with_kubectl(kubectl, target)
    finally:
        if target != root:
            shutil.rmtree(target, ignore_errors=True)
    return Rendered(tuple(objects), missing, "kubectl")


def load_examples() -> dict[str, list[Obj]]:
    """Every example file by name, as its list of objects."""
    return {path.name: load_file(path) for path in sorted(EXAMPLES.glob("*.yaml"))}


def key(obj: Mapping[str, Any]) -> tuple[str, str, str, str]:
    meta = obj.get("metadata") or {}
    return (obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])


def by_kind(objects: Iterable[Obj], kind: str) -> list[Obj]:
    return [o for o in objects if o.get("kind") == kind]


def one(objects: Iterable[Obj], kind: str, name: str) -> Obj:
    found = [o for o in by_kind(objects, kind) if o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def pod_specs(obj: Mapping[str, Any]) -> list[Obj]:
    """The pod spec of a Pod, or the template's pod spec of a workload; [] for anything else."""
    if obj.get("kind") == "Pod":
        return [obj["spec"]]
    template = (obj.get("spec") or {}).get("template")
    if isinstance(template, dict) and "spec" in template:
        return [template["spec"]]
    return []


def render_with_components(*components: Path, base: Path = DAEMONSET) -> list[Obj]:
    """`base` (`daemonset/`, or `daemonset/crds/`) plus kustomize Components (e.g.
    `optional/cdi`), through an overlay the way a user writes one; needs kubectl (the fallback
    renderer does not apply components)."""
    kubectl = kubectl_path()
    if kubectl is None:
        raise LookupError("kubectl is not installed")
    overlay = Path(tempfile.mkdtemp(prefix="gputopo-overlay-", dir="/tmp"))
    try:
        # kustomize takes only relative paths to bases and components
        kust = {
            "resources": [os.path.relpath(base, overlay)],
            "components": [os.path.relpath(c, overlay) for c in components],
        }
        (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kust), encoding="utf-8")
        return render_with_kubectl(kubectl, overlay)
    finally:
        shutil.rmtree(overlay, ignore_errors=True)
