"""Per-NUMA capacity and allocatable after the kubelet's reservations."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from agent.errors import ConfigError
from agent.model import NumaNode
from agent.numa_capacity import (
    CPU,
    HUGEPAGES_1GI,
    HUGEPAGES_2MI,
    MEMORY,
    KubeletConfig,
    numa_capacity,
)
from agent.quantity import MIB, format_milli, parse_quantity, resource_units, to_int, to_milli
from tests.builders.topology import make_numa

GIB = 1024 * MIB


def two_nodes() -> tuple[NumaNode, ...]:
    return make_numa([0, 1], ["0-7", "8-15"], memory_mib=64 * 1024)


@pytest.mark.parametrize(
    ("text", "milli"),
    [("100m", 100), ("2", 2000), ("1.5", 1500), ("1e3", 1_000_000), (3, 3000), ("0.0001", 1)],
)
def test_quantity_milli(text, milli) -> None:
    assert to_milli(text) == milli


@pytest.mark.parametrize(
    ("text", "value"), [("1Gi", GIB), ("100Mi", 100 * MIB), ("1G", 10**9), ("1k", 1000)]
)
def test_quantity_bytes(text, value) -> None:
    assert to_int(text) == value


@pytest.mark.parametrize("bad", ["", "1Qi", "abc", "1.2.3", True, None, "--1"])
def test_bad_quantities(bad) -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        parse_quantity(bad)


@pytest.mark.parametrize(
    ("resource", "value", "units"),
    [
        pytest.param("cpu", "1500m", 1500, id="cpu in millicores"),
        pytest.param("cpu", 2, 2000, id="whole cpus"),
        pytest.param("memory", "1Gi", GIB, id="memory in bytes"),
        pytest.param("nvidia.com/gpu", "2", 2, id="devices"),
        pytest.param("ephemeral-storage", "1.5", 2, id="rounded up"),
    ],
)
def test_resource_units(resource: str, value: object, units: int) -> None:
    assert resource_units(resource, value) == units


def test_format_milli() -> None:
    assert [format_milli(v) for v in (0, 2000, 1500, 7)] == ["0", "2", "1500m", "7m"]


def test_no_reservations_only_default_eviction_and_hugepages() -> None:
    caps = numa_capacity(two_nodes(), KubeletConfig())
    n0, n1 = caps
    assert n0.capacity[CPU] == 8000
    assert n0.capacity[HUGEPAGES_2MI] == 512 * 2 * MIB
    assert n0.capacity[HUGEPAGES_1GI] == 4 * GIB
    # hugepages are never ordinary memory; the 100Mi eviction threshold comes out of node 0
    assert n0.allocatable[MEMORY] == 64 * GIB - 512 * 2 * MIB - 4 * GIB - 100 * MIB
    assert n1.allocatable[MEMORY] == 64 * GIB
    assert n0.allocatable[CPU] == 8000


def test_reserved_system_cpus_come_out_of_their_nodes() -> None:
    config = KubeletConfig.from_data({"reservedSystemCPUs": "0-1,8", "kubeReserved": {"cpu": "4"}})
    n0, n1 = numa_capacity(two_nodes(), config)
    assert (n0.allocatable[CPU], n1.allocatable[CPU]) == (6000, 7000)


def test_static_cpu_manager_rounds_reservation_up_to_whole_cpus() -> None:
    data = {
        "cpuManagerPolicy": "static",
        "kubeReserved": {"cpu": "500m"},
        "systemReserved": {"cpu": "700m"},
    }
    n0, _ = numa_capacity(two_nodes(), KubeletConfig.from_data(data))
    assert n0.allocatable[CPU] == 6000


def plain_nodes(memory_mib: int) -> tuple[NumaNode, ...]:
    return (
        NumaNode(id=0, cpus=tuple(range(8)), memory_mib=memory_mib),
        NumaNode(id=1, cpus=tuple(range(8, 16)), memory_mib=memory_mib),
    )


def test_reservation_larger_than_a_node_spills_to_the_next() -> None:
    data = {
        "kubeReserved": {"cpu": "10", "memory": "70Gi"},
        "evictionHard": {"memory.available": "1Gi"},
    }
    n0, n1 = numa_capacity(plain_nodes(64 * 1024), KubeletConfig.from_data(data))
    assert (n0.allocatable[CPU], n1.allocatable[CPU]) == (0, 6000)
    assert (n0.allocatable[MEMORY], n1.allocatable[MEMORY]) == (0, 57 * GIB)


def test_eviction_percentage_is_of_total_memory() -> None:
    config = KubeletConfig.from_data({"evictionHard": {"memory.available": "10%"}})
    n0, n1 = numa_capacity(plain_nodes(1000), config)
    assert config.eviction_bytes(2000 * MIB) == 200 * MIB
    assert (n0.allocatable[MEMORY], n1.allocatable[MEMORY]) == (800 * MIB, 1000 * MIB)


def test_memory_manager_reserved_memory_per_numa() -> None:
    data = {
        "reservedMemory": [
            {"numaNode": 0, "limits": {"memory": "1Gi", "hugepages-1Gi": "1Gi"}},
            {"numaNode": 1, "limits": {"memory": "2Gi"}},
        ]
    }
    n0, n1 = numa_capacity(two_nodes(), KubeletConfig.from_data(data))
    assert n0.allocatable[HUGEPAGES_1GI] == 3 * GIB
    assert n0.allocatable[MEMORY] == 64 * GIB - 512 * 2 * MIB - 4 * GIB - GIB
    assert n1.allocatable[MEMORY] == 62 * GIB


def test_policy_and_scope_from_file_and_fallbacks() -> None:
    folder = Path(tempfile.mkdtemp(dir="/tmp"))
    path = folder / "config.yaml"
    path.write_text(
        "topologyManagerPolicy: single-numa-node\ntopologyManagerScope: pod\n", encoding="utf-8"
    )
    config = KubeletConfig.from_file(path, policy="restricted", scope="container")
    assert (config.topology_manager_policy, config.topology_manager_scope) == (
        "single-numa-node",
        "pod",
    )
    missing = KubeletConfig.from_file(folder / "absent.yaml", policy="restricted", scope="pod")
    assert (missing.topology_manager_policy, missing.topology_manager_scope) == (
        "restricted",
        "pod",
    )


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"kubeReserved": {"cpu": "lots"}}, "not a quantity"),
        ({"reservedSystemCPUs": "3-1"}, "bad cpulist"),
        ({"reservedMemory": [{"limits": {"memory": "1Gi"}}]}, r"reservedMemory\[0\].numaNode"),
    ],
)
def test_bad_kubelet_config_is_a_config_error(data, match) -> None:
    with pytest.raises(ConfigError, match=match):
        KubeletConfig.from_data(data)


def test_no_numa_information_gives_one_empty_node() -> None:
    (only,) = numa_capacity((), KubeletConfig())
    assert only.numa_id == 0
    assert only.capacity[CPU] == 0


def test_a_kubelet_config_with_a_yaml_error_is_one_warning_with_line_and_column(caplog) -> None:
    path = Path(tempfile.mkdtemp(dir="/tmp")) / "config.yaml"
    path.write_text("topologyManagerPolicy: [single\n", encoding="utf-8")
    config = KubeletConfig.from_file(path, policy="restricted", scope="pod")
    assert config.topology_manager_policy == "restricted"
    (record,) = [r for r in caplog.records if r.levelname == "WARNING"]
    message = record.getMessage()
    assert message.startswith(f"kubelet config not used: {path}:2:1: YAML syntax error: ")
    assert message.endswith("; using policy=restricted scope=pod")
    assert "\n" not in message
