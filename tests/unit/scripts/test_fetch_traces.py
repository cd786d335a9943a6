"""scripts/fetch-traces.sh without the network: which URLs and paths it would use, and that it
refuses names that are not files of the trace."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "fetch-traces.sh"
BASE = "https://raw.githubusercontent.com/alibaba/clusterdata/master/cluster-trace-gpu-v2023/csv"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), "--dry-run", *args], capture_output=True, text=True, timeout=30
    )


def test_default_files_go_under_the_directory_the_benches_read(tmp_path: Path) -> None:
    done = _run(str(tmp_path))
    assert done.returncode == 0, done.stderr
    target = tmp_path / "alibaba-cluster-trace-gpu-v2023"
    assert done.stdout.splitlines() == [
        f"{BASE}/openb_node_list_gpu_node.csv -> {target}/openb_node_list_gpu_node.csv",
        f"{BASE}/openb_pod_list_default.csv -> {target}/openb_pod_list_default.csv",
    ]
    assert not target.exists()  # a dry run creates nothing


def test_all_is_the_node_list_and_every_pod_list(tmp_path: Path) -> None:
    lines = _run(str(tmp_path), "all").stdout.splitlines()
    assert len(lines) == 25
    assert any("openb_pod_list_gpushare40.csv" in line for line in lines)


def test_other_names_are_refused(tmp_path: Path) -> None:
    done = _run(str(tmp_path), "../../etc/passwd")
    assert done.returncode == 2
    assert done.stderr.startswith("fetch-traces: ../../etc/passwd is not a file of the trace")
