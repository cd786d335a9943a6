"""The one image setting, daemonset/image/: renamed there, as the README's build step does, the
image of every part that runs gputopo follows (the agent, the scheduler, optional/mps/), whether
a part is applied alone or from an overlay."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.builders import render as r

SHIPPED = "ghcr.io/gputopo/gputopo"
RENAMED = "registry.example/team/gputopo:t1"


@pytest.fixture(scope="module")
def kubectl() -> str:
    found = r.kubectl_path()
    if found is None:
        pytest.skip("kubectl is not installed: kustomize components cannot be rendered")
    return found


def _set_image(folder: Path) -> None:
    """The README's `(cd daemonset/image && kustomize edit set image ...)`, run with the kustomize
    binary where there is one, else the entry it writes, written by hand."""
    kustomize = shutil.which("kustomize")
    if kustomize is not None:
        done = subprocess.run(
            [kustomize, "edit", "set", "image", f"{SHIPPED}={RENAMED}"],
            cwd=folder, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return
    component = folder / "kustomization.yaml"
    doc = yaml.safe_load(component.read_text(encoding="utf-8"))
    doc["images"] = [{"name": SHIPPED, "newName": RENAMED.split(":")[0], "newTag": "t1"}]
    component.write_text(yaml.safe_dump(doc), encoding="utf-8")


@pytest.fixture(scope="module")
def renamed_tree() -> Iterator[Path]:
    """A copy of daemonset/ with the image renamed to registry.example/team/gputopo:t1 the way
    the README's build step does it."""
    copy = Path(tempfile.mkdtemp(prefix="gputopo-image-", dir="/tmp")) / "daemonset"
    shutil.copytree(r.DAEMONSET, copy)
    _set_image(copy / "image")
    try:
        yield copy
    finally:
        shutil.rmtree(copy.parent, ignore_errors=True)


def test_the_rename_keeps_the_setting_a_component(renamed_tree):
    setting = r.kustomization(renamed_tree / "image")
    assert setting["kind"] == "Component"
    assert setting["images"] == [
        {"name": SHIPPED, "newName": "registry.example/team/gputopo", "newTag": "t1"}
    ]


def _images(objects: list[r.Obj]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for obj in objects:
        for spec in r.pod_specs(obj):
            containers = [*spec.get("initContainers", []), *spec["containers"]]
            out.setdefault(obj["metadata"]["name"], set()).update(c["image"] for c in containers)
    return out


def _kind(folder: Path) -> str:
    return str(r.kustomization(folder).get("kind", "Kustomization"))


def _overlay(tree: Path, resources: list[str], components: list[str]) -> Path:
    """A user's overlay next to the copy, naming folders of the copy."""
    overlay = Path(tempfile.mkdtemp(prefix="overlay-", dir=tree.parent))
    kust = {"resources": [f"../daemonset/{x}" for x in resources]}
    kust["components"] = [f"../daemonset/{x}" for x in components]
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kust), encoding="utf-8")
    return overlay


def _optional_parts() -> list[str]:
    return sorted(
        str(p.parent.relative_to(r.DAEMONSET)) for p in r.OPTIONAL.rglob("kustomization.yaml")
    )


def test_every_manifest_names_the_image_the_setting_renames():
    named = {
        line.split("image:", 1)[1].strip()
        for path in r.DAEMONSET.rglob("*.yaml")
        if not {r.EXAMPLES, r.HELM} & set(path.parents)
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip().startswith("image:")
    }
    setting = r.kustomization(r.IMAGE)
    assert setting["kind"] == "Component"
    ((entry),) = setting["images"]
    assert named == {f"{entry['name']}:{entry['newTag']}"}
    assert entry["name"] == entry["newName"] == SHIPPED


def test_the_install_follows_the_rename(kubectl, renamed_tree):
    images = _images(r.render_with_kubectl(kubectl, renamed_tree))
    assert images == {"gputopo-agent": {RENAMED}, "gputopo-scheduler": {RENAMED}}


def test_mps_applied_alone_follows_the_rename(kubectl, renamed_tree):
    """`kubectl apply -k daemonset/optional/mps/`, as its README section says."""
    images = _images(r.render_with_kubectl(kubectl, renamed_tree / "optional" / "mps"))
    assert images == {"gputopo-mps": {RENAMED}}


@pytest.mark.parametrize("part", _optional_parts())
def test_every_optional_part_runs_only_the_renamed_image(kubectl, renamed_tree, part):
    """A Kustomization alone; a Component from an overlay of the install (upstream-nrt-crd: of
    crds/, which it changes)."""
    if _kind(r.DAEMONSET / part) == "Kustomization":
        target = renamed_tree / part
    else:
        base = "crds" if part.endswith("upstream-nrt-crd") else "."
        target = _overlay(renamed_tree, [base], [part])
    images = _images(r.render_with_kubectl(kubectl, target))
    assert set().union(*images.values()) <= {RENAMED}, images


def test_an_overlay_with_mps_beside_the_install_follows_the_rename(kubectl, renamed_tree):
    overlay = _overlay(renamed_tree, [".", "optional/mps"], ["optional/kubelet-config/kubeadm"])
    images = _images(r.render_with_kubectl(kubectl, overlay))
    assert images == {n: {RENAMED} for n in ("gputopo-agent", "gputopo-scheduler", "gputopo-mps")}
