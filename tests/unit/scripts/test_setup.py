"""scripts/setup.sh's install, offline: the editable wheel pip builds from pyproject.toml (with
the setuptools of .venv/, no download) puts the checkout on sys.path without setuptools'
warnings, and the distribution says which Python it needs."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
BUILD = "from setuptools import build_meta; print(build_meta.build_editable({out!r}))"


def _editable_wheel(tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Build the editable wheel of a copy of the project (the build writes its egg-info there)."""
    src, out = tmp_path / "src", tmp_path / "out"
    out.mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in ("agent", "deviceplugin", "scheduler"):
        shutil.copytree(ROOT / name, src / name, ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    done = subprocess.run(
        [sys.executable, "-W", "default", "-c", BUILD.format(out=str(out))],
        capture_output=True, text=True, timeout=120, cwd=src,
    )  # fmt: skip
    return done, out / done.stdout.strip().splitlines()[-1]


def test_the_editable_install_warns_nothing_and_points_at_the_checkout(tmp_path: Path) -> None:
    done, wheel = _editable_wheel(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr
    assert "careful with folders" not in done.stdout + done.stderr
    with zipfile.ZipFile(wheel) as whl:
        (pth,) = [n for n in whl.namelist() if n.endswith(".pth")]
        assert whl.read(pth).decode().split() == [str(tmp_path / "src")]
        top = whl.read("gputopo-0.1.0.dist-info/top_level.txt").decode().split()
    assert top == ["agent", "deviceplugin", "scheduler"]


def test_the_distribution_needs_python_3_11_as_the_readme_says() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["requires-python"] == ">=3.11"
    assert "Python 3.11 or newer" in (ROOT / "README.md").read_text(encoding="utf-8")
