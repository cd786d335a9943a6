"""Reading a GPU's NUMA node and the NUMA nodes from sysfs under a host root."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.model import NumaNode
from agent.nvml import sysfs


@pytest.mark.parametrize(
    ("nvml", "expected"),
    [
        ("00000000:18:00.0", "0000:18:00.0"),
        ("00000000:B7:00.0", "0000:b7:00.0"),
        ("00000001:02:1F.3", "0001:02:1f.3"),
        ("0000:3b:00.0", "0000:3b:00.0"),
    ],
)
def test_nvml_bus_id_becomes_the_sysfs_name(nvml: str, expected: str) -> None:
    assert sysfs.sysfs_bus_id(nvml) == expected


def test_a_string_without_a_domain_is_rejected() -> None:
    with pytest.raises(ValueError, match="not a PCI bus id: 'b7'"):
        sysfs.sysfs_bus_id("b7")


def test_gpu_numa_node_minus_one_or_missing_is_none(tmp_path: Path) -> None:
    sysfs.write_host_root(tmp_path, [], {"00000000:07:00.0": 3, "00000000:0F:00.0": None})
    assert sysfs.gpu_numa_node(tmp_path, "00000000:07:00.0") == 3
    assert (tmp_path / "sys/bus/pci/devices/0000:0f:00.0/numa_node").read_text() == "-1\n"
    assert sysfs.gpu_numa_node(tmp_path, "00000000:0F:00.0") is None
    assert sysfs.gpu_numa_node(tmp_path, "00000000:AA:00.0") is None


def test_numa_nodes_round_trip_through_the_files(tmp_path: Path) -> None:
    nodes = (
        NumaNode(
            id=0,
            cpus=(0, 1, 2, 3, 8),
            memory_mib=2048,
            hugepages=(("2Mi", 512), ("1Gi", 2)),
            distances=(10, 21),
        ),
        NumaNode(id=1, cpus=(4, 5, 6, 7), memory_mib=4096, distances=(21, 10)),
    )
    sysfs.write_host_root(tmp_path, nodes, {})
    node0 = tmp_path / "sys/devices/system/node/node0"
    assert (node0 / "cpulist").read_text() == "0-3,8\n"
    assert (node0 / "hugepages/hugepages-1048576kB/nr_hugepages").read_text() == "2\n"
    assert sysfs.numa_nodes(tmp_path) == nodes


def test_no_node_directory_means_no_numa_nodes(tmp_path: Path) -> None:
    assert sysfs.numa_nodes(tmp_path) == ()


def test_real_style_meminfo_is_parsed(tmp_path: Path) -> None:
    node = tmp_path / "sys/devices/system/node/node2"
    node.mkdir(parents=True)
    (node / "cpulist").write_text("32-47,160-175\n")
    (node / "distance").write_text("12 12 10 12\n")
    (node / "meminfo").write_text(
        "Node 2 MemTotal:       132103168 kB\nNode 2 MemFree:        1 kB\n"
    )
    (tmp_path / "sys/devices/system/node/possible").write_text("0-3\n")
    (read,) = sysfs.numa_nodes(tmp_path)
    assert (read.id, read.cpulist, read.memory_mib, read.distances) == (
        2,
        "32-47,160-175",
        129007,
        (12, 12, 10, 12),
    )


@pytest.mark.parametrize(
    ("kb", "name"), [(2048, "2Mi"), (1048576, "1Gi"), (64, "64Ki"), (32768, "32Mi")]
)
def test_hugepage_sizes_use_kubernetes_names(kb: int, name: str) -> None:
    assert sysfs.hugepage_name(kb) == name
    assert sysfs.hugepage_kb(name) == kb


def test_pcie_root_is_read_from_the_device_link(tmp_path):
    devices = tmp_path / "sys/bus/pci/devices"
    devices.mkdir(parents=True)
    real = tmp_path / "sys/devices/pci0000:17/0000:17:01.0/0000:18:00.0"
    real.mkdir(parents=True)
    (devices / "0000:18:00.0").symlink_to("../../../devices/pci0000:17/0000:17:01.0/0000:18:00.0")
    assert sysfs.pcie_root(tmp_path, "00000000:18:00.0") == "pci0000:17"
    assert sysfs.pcie_root(tmp_path, "00000000:19:00.0") is None
