"""`topo -m` rendering against matrices transcribed by hand from real listings."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from agent.inventory import load_inventory
from agent.nvml.fixture import load_fixture
from agent.topo_table import render_inventory, render_legend, render_topo_matrix

GOLDEN = Path(__file__).resolve().parents[2] / "golden"


def _golden(name: str) -> str:
    lines = (GOLDEN / f"{name}.topo").read_text(encoding="utf-8").splitlines()
    return "".join(line + "\n" for line in lines if not line.startswith("#"))


@pytest.mark.parametrize(
    "name", ["dgx-a100", "dgx-h100", "pcie-4x-nvlink-pairs", "pcie-8x-no-nvlink"]
)
def test_matrix_matches_the_hand_transcribed_listing(name: str) -> None:
    assert render_topo_matrix(load_inventory(name)) == _golden(name)


def test_legend_is_verbatim() -> None:
    assert render_legend() == _golden("legend")


def test_sixteen_gpus_widen_the_columns() -> None:
    lines = render_topo_matrix(load_fixture("dgx-2").inventory).splitlines()
    assert lines[0].startswith("        GPU0   GPU1   GPU2 ")
    assert lines[11].startswith("GPU10   NV6    NV6 ")
    assert " X     NV6 " in lines[11]
    assert lines[16].endswith("NV6     X     24-47,72-95   1              N/A")


def test_gpu_without_numa_shows_na_affinity() -> None:
    inv = load_fixture("pcie-4x-nvlink-pairs").inventory
    lost = dataclasses.replace(inv.gpus[3], numa_node=None)
    inv = dataclasses.replace(inv, gpus=(*inv.gpus[:3], lost), _by_uuid={})
    assert (
        render_topo_matrix(inv).splitlines()[4]
        == "GPU3    SYS   SYS   NV12   X    N/A           N/A            N/A"
    )


def test_inventory_table_lists_gpus_mig_numa_matrix_and_legend() -> None:
    text = render_inventory(load_inventory("dgx-a100-mig"))
    lines = text.splitlines()
    assert lines[0] == "Driver 550.54.15, CUDA 12.4, 8 GPUs, NVLink fabric: nvswitch"
    gpu2 = next(line for line in lines if line.startswith("2    NVIDIA A100-SXM4-80GB"))
    assert gpu2.endswith("00000000:47:00.0  1     8.0  enabled (4g.40gb@0:4,3g.40gb@4:4)")
    mig_rows = [line for line in lines if line.startswith("1    ") and "gb " in line]
    assert [row.split()[1:5] for row in mig_rows] == [
        ["3g.40gb", "0:4", "2", "0"],
        ["2g.20gb", "4:2", "3", "0"],
        ["1g.10gb", "6:1", "9", "0"],
    ]
    assert "3     48-63,176-191    129011 MiB  2Mi=0,1Gi=0  12 12 12 10 32 32 32 32" in lines
    matrix = render_topo_matrix(load_inventory("dgx-a100-mig"))
    assert text.endswith(matrix + "\n" + _golden("legend"))
