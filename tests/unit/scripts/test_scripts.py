"""`scripts/demo.sh` sets up `.venv/` only when it is out of date; `scripts/fetch-traces.sh` names
the trace's real URLs and refuses bad arguments (its download needs a network, so not run here)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
FAKE_SETUP = """#!/usr/bin/env bash
# stands in for scripts/setup.sh: records the call, makes a .venv/bin/python that echoes
set -euo pipefail
echo setup >> calls.log
mkdir -p .venv/bin
printf '#!/bin/sh\\necho "python $*"\\n' > .venv/bin/python
chmod +x .venv/bin/python
"""


def _checkout() -> Path:
    """A copy of what demo.sh reads: itself, pyproject.toml, and a recording setup.sh."""
    tree = Path(tempfile.mkdtemp(prefix="demo-sh-", dir="/tmp"))
    (tree / "scripts").mkdir()
    shutil.copy(ROOT / "scripts/demo.sh", tree / "scripts/demo.sh")
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    (tree / "scripts/setup.sh").write_text(FAKE_SETUP, encoding="utf-8")
    return tree


def _demo(tree: Path) -> str:
    done = subprocess.run(
        ["bash", "scripts/demo.sh", "--skip-node"],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout


def test_demo_sets_up_the_venv_once_until_pyproject_changes():
    tree = _checkout()
    assert _demo(tree) == "python -m scheduler.cli.demo --skip-node\n"
    assert _demo(tree) == "python -m scheduler.cli.demo --skip-node\n"
    assert (tree / "calls.log").read_text(encoding="utf-8") == "setup\n"
    with (tree / "pyproject.toml").open("a", encoding="utf-8") as f:
        f.write("# changed\n")
    _demo(tree)
    assert (tree / "calls.log").read_text(encoding="utf-8") == "setup\nsetup\n"


def test_demo_sets_up_again_when_the_venv_is_gone():
    tree = _checkout()
    _demo(tree)
    shutil.rmtree(tree / ".venv")
    _demo(tree)
    assert (tree / "calls.log").read_text(encoding="utf-8") == "setup\nsetup\n"


def fetch(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(ROOT / "scripts/fetch-traces.sh"), *argv],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
    )


BASE = "https://raw.githubusercontent.com/alibaba/clusterdata/master/cluster-trace-gpu-v2023/csv"


def test_fetch_dry_run_lists_every_file_of_the_release_and_fetches_nothing(tmp_path: Path):
    done = fetch("--dry-run", str(tmp_path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    target = tmp_path / "alibaba-cluster-trace-gpu-v2023"
    assert f"{BASE}/openb_node_list_gpu_node.csv -> {target}/openb_node_list_gpu_node.csv" in lines
    assert f"{BASE}/openb_pod_list_default.csv -> {target}/openb_pod_list_default.csv" in lines
    assert len(lines) == 26  # 2 node lists, 24 pod lists
    assert list(tmp_path.iterdir()) == []


def test_fetch_goes_to_gputopo_traces_without_an_argument(tmp_path: Path):
    done = fetch("--dry-run", env={"GPUTOPO_TRACES": str(tmp_path / "t")})
    assert done.stdout.splitlines()[0].endswith(
        f"-> {tmp_path}/t/alibaba-cluster-trace-gpu-v2023/openb_node_list_all_node.csv"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["--bogus"], "fetch-traces.sh: unknown option --bogus", id="option"),
        pytest.param(["a", "b"], "fetch-traces.sh: one DIR only, got a and b", id="two dirs"),
    ],
)
def test_fetch_refuses_bad_arguments_with_exit_2(argv: list[str], message: str):
    done = fetch(*argv)
    assert done.returncode == 2
    assert done.stderr.splitlines()[0] == message
    assert done.stdout == ""
