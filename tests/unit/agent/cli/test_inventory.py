"""`gputopo-agent inventory` and `record`: formats, one-line errors, the record round trip."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agent.cli import inventory as inventory_cmd
from agent.cli import main as cli
from agent.cli import record as record_cmd
from agent.inventory import load_inventory
from agent.kube.publisher import DryRunSink, NodeState, Publisher, PublisherSettings
from agent.nvml.fixture import builtin_names, fixture_from_mapping, load_fixture
from agent.topo_table import render_legend, render_topo_matrix
from tests.builders.nvml import HAS_DRIVER, node_doc, variant

NO_ENV: dict[str, str] = {}


def test_table_prints_the_matrix_and_the_legend(capsys: pytest.CaptureFixture[str]) -> None:
    assert inventory_cmd.main(["--nvml-fixture", "dgx-h100"], NO_ENV) == 0
    out = capsys.readouterr().out
    assert render_topo_matrix(load_fixture("dgx-h100").inventory) in out
    assert out.endswith(render_legend())
    assert "NVIDIA H100 80GB HBM3" in out


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_json_and_yaml_output_is_the_fixture_format(
    fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert inventory_cmd.main(["--nvml-fixture", "dgx-a100-mig", "-o", fmt], NO_ENV) == 0
    text = capsys.readouterr().out
    doc = json.loads(text) if fmt == "json" else yaml.safe_load(text)
    assert fixture_from_mapping(doc).inventory == load_inventory("dgx-a100-mig")


def test_fixture_can_come_from_the_environment(capsys: pytest.CaptureFixture[str]) -> None:
    assert inventory_cmd.main(["-o", "json"], {"GPUTOPO_NVML_FIXTURE": "single-t4"}) == 0
    assert json.loads(capsys.readouterr().out)["gpus"][0]["name"] == "Tesla T4"


@pytest.mark.skipif(HAS_DRIVER, reason="this machine has an NVIDIA driver")
def test_no_driver_is_one_clear_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert inventory_cmd.main([], NO_ENV) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(
        "gputopo-agent inventory: NVML is not available on this machine (nvmlInit: NVML error"
    )
    assert "--nvml-fixture NAME" in err


def test_bad_fixture_is_one_line_with_the_key_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\ndriverVersion: '1'\ncudaDriverVersion: 1\ngpus: 3\ntopology: []\n")
    assert inventory_cmd.main(["--nvml-fixture", str(bad)], NO_ENV) == 1
    assert (
        capsys.readouterr().err
        == f"gputopo-agent inventory: {bad}: gpus: expected a list, got an integer (3)\n"
    )


def test_bad_flag_value_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        inventory_cmd.main(["-o", "xml"], NO_ENV)
    assert info.value.code == 2
    assert "invalid choice: 'xml'" in capsys.readouterr().err


def _vm_with_memory_affinity(folder: Path) -> str:
    """A fixture `record` writes on a two-NUMA-node VM whose NVML names node 1 for GPU 1."""
    doc = variant(variant(node_doc(), "gpus[1].numaNode", -1), "gpus[1].memoryAffinity", [1])
    path = folder / "vm-affinity.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _views(source: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """`inventory -o json`, the `inventory` table, and the NRT `run --oneshot --dry-run` prints."""
    views = []
    for fmt in ("json", "table"):
        assert inventory_cmd.main(["--nvml-fixture", source, "-o", fmt], NO_ENV) == 0
        views.append(capsys.readouterr().out)
    nrt = io.StringIO()
    state = NodeState(inventory=load_inventory(source), snapshot=None)
    settings = PublisherSettings(node_name="n1", node_labels=False, dry_run=True)
    Publisher(settings, DryRunSink(nrt), lambda: state).publish_once()
    return [*views, nrt.getvalue()]


@pytest.mark.parametrize("name", [*builtin_names(), "vm with memory affinity"])
def test_record_then_replay_gives_the_same_inventory_json_table_and_nrt(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = _vm_with_memory_affinity(tmp_path) if name.startswith("vm with") else name
    path = tmp_path / "recorded.yaml"
    assert record_cmd.main(["--nvml-fixture", source, "-o", str(path)], NO_ENV) == 0
    assert load_inventory(str(path)) == load_inventory(source)
    recorded, replayed = _views(source, capsys), _views(str(path), capsys)
    assert recorded == replayed
    assert recorded[2].startswith("---\napiVersion: topology.node.k8s.io/v1alpha2\n")
    if source != name:  # the affinity NVML answered is in the record, and decides the zone
        assert yaml.safe_load(path.read_text())["gpus"][1]["memoryAffinity"] == [1]
        gpu1 = next(z for z in yaml.safe_load(recorded[2])["zones"] if z["name"] == "gpu-1")
        assert gpu1["parent"] == "node-1"


def test_record_writes_json_by_extension_and_yaml_to_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "node.json"
    assert record_cmd.main(["--nvml-fixture", "pcie-4x-nvlink-pairs", "-o", str(path)], NO_ENV) == 0
    assert json.loads(path.read_text())["nvlinkFabric"] == "direct"
    assert record_cmd.main(["--nvml-fixture", "single-t4"], NO_ENV) == 0
    assert yaml.safe_load(capsys.readouterr().out)["topology"] == [["X"]]


def test_record_to_an_unwritable_path_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "missing-dir" / "node.yaml"
    assert record_cmd.main(["--nvml-fixture", "single-t4", "-o", str(target)], NO_ENV) == 1
    assert (
        capsys.readouterr().err
        == f"gputopo-agent record: cannot write {target}: No such file or directory\n"
    )


def test_dispatcher_runs_inventory(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["inventory", "--nvml-fixture", "single-t4"]) == 0
    assert "Tesla T4" in capsys.readouterr().out


def test_process_prints_no_traceback_on_bad_input(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "agent.cli.main",
            "inventory",
            "--nvml-fixture",
            str(tmp_path / "nope.yaml"),
        ],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.strip().count("\n") == 0
    assert "cannot read: No such file or directory" in result.stderr


def test_table_names_the_nvlink_clique_and_each_gpu_fabric_state(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert inventory_cmd.main(["--nvml-fixture", "gb200-nvl72-node"], NO_ENV) == 0
    lines = capsys.readouterr().out.splitlines()
    clique = "5c1f0e7a-3d2b-4c8e-9a61-0b7d2e4f9c13.1"
    assert lines[0].endswith(f"NVLink fabric: nvswitch, NVLink clique: {clique}")
    header = lines.index("GPU  FABRIC STATE  STATUS   CLIQUE")
    assert lines[header + 1 : header + 5] == [
        f"{i}    completed     success  {clique}" for i in range(4)
    ]


def test_table_says_no_clique_while_the_fabric_registers(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = variant(node_doc(gpus=1), "gpus[0].fabric", {"state": "inProgress", "status": "NotReady"})
    path = tmp_path / "registering.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    assert inventory_cmd.main(["--nvml-fixture", str(path)], NO_ENV) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].endswith(", NVLink clique: none")
    assert "0    inProgress    NotReady  -\n" in out


def test_gpus_without_fabric_info_print_no_clique(capsys: pytest.CaptureFixture[str]) -> None:
    assert inventory_cmd.main(["--nvml-fixture", "vm-h200"], NO_ENV) == 0
    out = capsys.readouterr().out
    assert "clique" not in out.lower()
    assert "FABRIC STATE" not in out
