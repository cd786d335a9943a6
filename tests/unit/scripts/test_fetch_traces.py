"""scripts/fetch-traces.sh without the network: which URLs and paths it would use, that it
refuses names that are not files of the trace, and its SHA-256 check of the files (`--check`)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

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


def _check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), "--check", *args], capture_output=True, text=True, timeout=60
    )


def test_check_names_a_file_that_differs_from_the_release_and_one_missing(tmp_path: Path) -> None:
    target = tmp_path / "alibaba-cluster-trace-gpu-v2023"
    target.mkdir()
    (target / "openb_node_list_gpu_node.csv").write_text("sn,cpu_milli\n", encoding="utf-8")
    done = _check(str(tmp_path))
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        f"differs from the released file: {target}/openb_node_list_gpu_node.csv",
        f"missing {target}/openb_pod_list_default.csv",
    ]


def test_every_file_of_all_has_a_released_sum() -> None:
    script = SCRIPT.read_text(encoding="utf-8")
    lines = _run("/nowhere", "all").stdout.splitlines()
    names = [line.rsplit("/", 1)[1] for line in lines]
    assert len(names) == 25
    assert [n for n in names if f"  {n}\n" not in script] == []


def _traces() -> Path:
    return Path(os.environ.get("GPUTOPO_TRACES") or ROOT.parent / "shared" / "traces")


@pytest.mark.skipif(
    not (_traces() / "alibaba-cluster-trace-gpu-v2023").is_dir(), reason="no trace here"
)
def test_the_released_sums_match_the_trace_where_it_is_present() -> None:
    done = _check(str(_traces()))
    assert done.returncode == 0, done.stdout
    assert all(line.startswith("ok ") for line in done.stdout.splitlines())
