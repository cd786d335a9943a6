"""Fixture loading, validation (file, key path, reason) and the dump/record round trip."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.errors import FixtureError
from agent.inventory import load_inventory
from agent.model import GpuLink, MigMode, NvlinkFabric, TopoLevel
from agent.nvml.fixture import (
    ScriptedEvent,
    builtin_names,
    dump,
    fixture_from_mapping,
    load_fixture,
)
from tests.builders.nvml import gpu_doc, mig_doc, node_doc, variant

BUILTINS = (
    "dgx-1p",
    "dgx-2",
    "dgx-a100",
    "dgx-a100-mig",
    "dgx-h100",
    "gb200-nvl72-node",
    "pcie-16x-nvlink-pairs",
    "pcie-4x-nvlink-pairs",
    "pcie-8x-no-nvlink",
    "single-t4",
    "vm-h200",
)


def test_builtin_names_lists_every_shipped_fixture() -> None:
    assert builtin_names() == BUILTINS


def _mig_gpu(migs: list[dict[str, Any]]) -> dict[str, Any]:
    return variant(variant(node_doc(), "gpus[0].migMode", "enabled"), "gpus[0].migDevices", migs)


def _three(cells: dict[tuple[int, int], str], fabric: str, default: str = "NV12") -> dict[str, Any]:
    doc = node_doc(gpus=3, cell=default, fabric=fabric)
    for (i, j), cell in cells.items():
        doc["topology"][i][j] = cell
    return doc


def _fabric(**fields: Any) -> dict[str, Any]:
    """A node whose GPU 0 has the fabric info `fields` over a complete registration."""
    complete = {"clusterUuid": _CLUSTER, "cliqueId": 1, "state": "completed", "status": "success"}
    return variant(node_doc(), "gpus[0].fabric", complete | fields)


_CLUSTER = "5c1f0e7a-3d2b-4c8e-9a61-0b7d2e4f9c13"

MALFORMED = [
    pytest.param(
        _fabric(state="done"),
        "test.yaml: gpus[0].fabric.state: 'done' is not one of notSupported, notStarted, "
        "inProgress, completed",
        id="unknown fabric state",
    ),
    pytest.param(
        _fabric(clusterUuid=_CLUSTER.upper()),
        f"test.yaml: gpus[0].fabric.clusterUuid: '{_CLUSTER.upper()}' is not in canonical "
        f"form ({_CLUSTER})",
        id="upper-case cluster UUID",
    ),
    pytest.param(
        _fabric(clusterUuid="rack-7"),
        "test.yaml: gpus[0].fabric.clusterUuid: 'rack-7' is not a UUID",
        id="cluster UUID that is not a UUID",
    ),
    pytest.param(
        _fabric(status="Broken"),
        "test.yaml: gpus[0].fabric.status: 'Broken' is not success or an NVML error word",
        id="unknown fabric status word",
    ),
    pytest.param(
        _fabric(cliqueId=2**32),
        "test.yaml: gpus[0].fabric.cliqueId: 4294967296 does not fit NVML's 32-bit clique ID",
        id="clique ID past 32 bits",
    ),
    pytest.param(
        _fabric(rack=3),
        "test.yaml: gpus[0].fabric.rack: unknown key (allowed: state, clusterUuid, cliqueId, "
        "status)",
        id="unknown fabric key",
    ),
    pytest.param(
        variant(node_doc(), "colour", "blue"),
        "test.yaml: colour: unknown key (allowed: version, driverVersion, cudaDriverVersion, gpus, "
        "topology, nvlinkFabric, numa, events, load)",
        id="unknown top-level key",
    ),
    pytest.param(
        variant(node_doc(), "gpus[1].serial", "1324"),
        "test.yaml: gpus[1].serial: unknown key (allowed: index, uuid, name, memoryMiB, pciBusId, "
        "numaNode, computeCapability, minor, migMode, migDevices, memoryAffinity, fabric, "
        "memoryReservedMiB)",
        id="unknown GPU key",
    ),
    pytest.param(
        variant(node_doc(), "gpus[0].uuid", ...),
        "test.yaml: gpus[0].uuid: required key is missing",
        id="missing uuid",
    ),
    pytest.param(
        variant(node_doc(), "gpus[0].memoryMiB", "80GB"),
        "test.yaml: gpus[0].memoryMiB: expected an integer, got a string ('80GB')",
        id="memory as a string",
    ),
    pytest.param(
        variant(node_doc(), "gpus[0].computeCapability", 8.0),
        'test.yaml: gpus[0].computeCapability: expected a string compute capability like "8.0", '
        "got a number (8.0)",
        id="unquoted compute capability",
    ),
    pytest.param(
        variant(node_doc(), "version", 2),
        "test.yaml: version: unsupported fixture version 2 (this gputopo reads version 1)",
        id="future version",
    ),
    pytest.param(
        variant(node_doc(), "topology", [["X", "NV12"]]),
        "test.yaml: topology: 1 row for 2 GPUs (the matrix must be square)",
        id="too few rows",
    ),
    pytest.param(
        variant(node_doc(), "topology[1]", ["NV12"]),
        "test.yaml: topology[1]: 1 cell in a row, expected 2 (the matrix must be square)",
        id="short row",
    ),
    pytest.param(
        _three({(0, 1): "PIX", (1, 0): "SYS"}, "none", default="SYS"),
        "test.yaml: topology[1][0]: SYS differs from topology[0][1] PIX "
        "(the matrix must be symmetric)",
        id="asymmetric matrix",
    ),
    pytest.param(
        variant(node_doc(), "topology[0][1]", "QPI"),
        "test.yaml: topology[0][1]: 'QPI' is not in the topo -m legend "
        "(X on the diagonal; NV<k>, PIX, PXB, PHB, NODE, SYS elsewhere)",
        id="cell outside the legend",
    ),
    pytest.param(
        variant(node_doc(), "topology[0][1]", "NV0"),
        "test.yaml: topology[0][1]: 'NV0' is not in the topo -m legend "
        "(X on the diagonal; NV<k>, PIX, PXB, PHB, NODE, SYS elsewhere)",
        id="zero NVLinks",
    ),
    pytest.param(
        variant(node_doc(), "topology[1][1]", "NV12"),
        "test.yaml: topology[1][1]: the diagonal must be X, got 'NV12'",
        id="diagonal not X",
    ),
    pytest.param(
        variant(node_doc(), "gpus[1].uuid", gpu_doc(0)["uuid"]),
        f"test.yaml: gpus[1].uuid: duplicate uuid {gpu_doc(0)['uuid']} (also gpus[0].uuid)",
        id="duplicate UUID",
    ),
    pytest.param(
        variant(node_doc(), "gpus[1].index", 0),
        "test.yaml: gpus[1].index: duplicate index 0 (also gpus[0].index)",
        id="duplicate index",
    ),
    pytest.param(
        variant(node_doc(), "gpus[1].index", 5),
        "test.yaml: gpus[1].index: expected 1: GPUs are listed in index order from 0",
        id="index gap",
    ),
    pytest.param(
        variant(node_doc(), "gpus[1].pciBusId", "00000000:10:00.0"),
        "test.yaml: gpus[1].pciBusId: duplicate pciBusId 00000000:10:00.0 (also gpus[0].pciBusId)",
        id="duplicate PCI bus id",
    ),
    pytest.param(
        variant(node_doc(), "gpus[0].pciBusId", "0000:10:00.0"),
        "test.yaml: gpus[0].pciBusId: '0000:10:00.0' is not valid "
        'PCI bus id like "00000000:18:00.0"',
        id="sysfs-style bus id",
    ),
    pytest.param(
        variant(node_doc(), "gpus[0].numaNode", 4),
        "test.yaml: gpus[0].numaNode: NUMA node 4 is not in numa (known: 0, 1; -1 = unknown)",
        id="bad NUMA reference",
    ),
    pytest.param(
        variant(node_doc(), "gpus[0].memoryAffinity", [0, 2]),
        "test.yaml: gpus[0].memoryAffinity[1]: NUMA node 2 is not in numa (known: 0, 1)",
        id="memory affinity names an unknown NUMA node",
    ),
    pytest.param(
        variant(node_doc(), "gpus[0].memoryAffinity", [1, 1]),
        "test.yaml: gpus[0].memoryAffinity[1]: NUMA node 1 is listed twice",
        id="memory affinity lists a node twice",
    ),
    pytest.param(
        variant(node_doc(), "gpus[0].memoryAffinity", []),
        "test.yaml: gpus[0].memoryAffinity: empty list "
        "(leave memoryAffinity out when NVML does not answer)",
        id="empty memory affinity",
    ),
    pytest.param(
        variant(node_doc(), "gpus[0].migDevices", [mig_doc("1g.10gb", 7, 0, 1)]),
        "test.yaml: gpus[0].migDevices: 1 MIG devices listed while migMode is disabled",
        id="MIG devices while MIG is disabled",
    ),
    pytest.param(
        _mig_gpu([mig_doc("3g.40gb", 2, 0, 4, 40192), mig_doc("2g.20gb", 3, 2, 2, 19968)]),
        "test.yaml: gpus[0].migDevices[1]: placement 2g.20gb@2:2 overlaps 3g.40gb@0:4 "
        "(gpus[0].migDevices[0])",
        id="overlapping MIG placements",
    ),
    pytest.param(
        _mig_gpu([mig_doc("2g.20gb", 3, 6, 2, 19968)]),
        "test.yaml: gpus[0].migDevices[0].start: "
        "2g.20gb cannot start at slice 6 (allowed: 0, 2, 4)",
        id="2g at slice 6",
    ),
    pytest.param(
        _mig_gpu([mig_doc("4g.40gb", 1, 4, 4, 40192)]),
        "test.yaml: gpus[0].migDevices[0].start: 4g.40gb cannot start at slice 4 (allowed: 0)",
        id="4g not at 0",
    ),
    pytest.param(
        _mig_gpu([mig_doc("3g.40gb", 2, 0, 3, 40192)]),
        "test.yaml: gpus[0].migDevices[0].size: 3g.40gb takes 4 memory slices, not 3",
        id="wrong placement size",
    ),
    pytest.param(
        _mig_gpu([mig_doc("1g.10gb+me", 7, 0, 1), mig_doc("1g.10gb+me", 8, 1, 1)]),
        "test.yaml: gpus[0].migDevices[1]: more than 1 1g.10gb+me instance(s) on one GPU",
        id="two +me instances",
    ),
    pytest.param(
        _mig_gpu([mig_doc("1g.10gb", 7, 0, 1), mig_doc("1g.10gb", 7, 1, 1)]),
        "test.yaml: gpus[0].migDevices[1].giId: GPU instance id 7 is already used by "
        "gpus[0].migDevices[0]",
        id="duplicate GPU instance id",
    ),
    pytest.param(
        _mig_gpu([mig_doc("1g.5gb", 7, 0, 1)]),
        "test.yaml: gpus[0].migDevices[0].profile: '1g.5gb' is not a MIG profile of this GPU "
        "(known: 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb)",
        id="40GB profile on an 80GB A100",
    ),
    pytest.param(
        variant(
            variant(node_doc(gpus=1, cell="X", fabric="none"), "gpus[0].name", "Tesla T4"),
            "gpus[0].migMode",
            "enabled",
        ),
        "test.yaml: gpus[0].migMode: MIG is not modelled for 'Tesla T4'",
        id="MIG on a GPU without MIG",
    ),
    pytest.param(
        _three({(0, 2): "NV6", (2, 0): "NV6"}, "nvswitch"),
        "test.yaml: topology[0][2]: NV6 cannot come from NVSwitch wiring: GPU0 has 12 switch links "
        "and GPU2 12, so the cell is NV12",
        id="NVSwitch cells that no wiring gives",
    ),
    pytest.param(
        node_doc(fabric="none"),
        "test.yaml: topology[0][1]: NV12 needs nvlinkFabric nvswitch or direct",
        id="NVLink without a fabric",
    ),
    pytest.param(
        node_doc(cell="NV40", fabric="direct"),
        "test.yaml: topology[0]: 40 direct NVLinks, more than a GPU has (36)",
        id="more direct links than NVML allows",
    ),
    pytest.param(
        variant(node_doc(), "numa[0].cpus", "0-3,x"),
        "test.yaml: numa[0].cpus: bad cpulist part 'x'",
        id="bad cpulist",
    ),
    pytest.param(
        variant(node_doc(), "numa[1].cpus", "3-7"),
        "test.yaml: numa[1].cpus: CPU 3 is also in numa[0]",
        id="CPU in two NUMA nodes",
    ),
    pytest.param(
        variant(node_doc(), "numa[1].distances", [21, 10, 30]),
        "test.yaml: numa[1].distances: has 3 entries for 2 NUMA nodes",
        id="distance row too long",
    ),
    pytest.param(
        variant(node_doc(), "numa[0].hugepages", {"3Xi": 1}),
        "test.yaml: numa[0].hugepages.3Xi: not a hugepage size: '3Xi' (expected e.g. 2Mi or 1Gi)",
        id="bad hugepage size",
    ),
    pytest.param(
        variant(node_doc(), "events", [{"afterSeconds": 1.0, "gpu": 7, "xid": 79}]),
        "test.yaml: events[0].gpu: no GPU with index 7 (2 GPUs)",
        id="event for a missing GPU",
    ),
    pytest.param(
        variant(node_doc(), "nvlinkFabric", "nvlink"),
        "test.yaml: nvlinkFabric: 'nvlink' is not one of nvswitch, direct, none",
        id="unknown fabric",
    ),
    pytest.param(
        ["not", "a", "mapping"],
        "test.yaml: expected a mapping, got a list",
        id="a list",
    ),
    pytest.param(None, "test.yaml: empty document", id="empty"),
]


@pytest.mark.parametrize(("document", "message"), MALFORMED)
def test_malformed_fixture_names_file_key_path_and_reason(document: Any, message: str) -> None:
    with pytest.raises(FixtureError) as info:
        fixture_from_mapping(document, "test.yaml") if isinstance(document, dict) else _parse(
            document
        )
    assert str(info.value) == message


def _parse(document: Any) -> None:
    from agent.nvml.fixture import parse_fixture

    parse_fixture(document, "test.yaml")


def test_valid_mig_layouts_from_the_placement_rules_load() -> None:
    layout = [
        mig_doc("3g.40gb", 2, 4, 4, 40192),
        mig_doc("2g.20gb", 5, 0, 2, 19968),
        mig_doc("1g.10gb", 13, 2, 1),
        mig_doc("1g.10gb", 14, 3, 1),
    ]
    gpu = fixture_from_mapping(_mig_gpu(layout), "t.yaml").inventory.gpus[0]
    assert gpu.mig_mode is MigMode.ENABLED
    assert gpu.mig_layout == "2g.20gb@0:2,1g.10gb@2:1,1g.10gb@3:1,3g.40gb@4:4"
    assert sum(m.compute_slices for m in gpu.mig_devices) == 7


def test_optional_keys_take_their_documented_defaults() -> None:
    doc = variant(variant(node_doc(), "numa", ...), "nvlinkFabric", ...)
    doc["topology"] = [["X", "SYS"], ["SYS", "X"]]
    fx = fixture_from_mapping(variant(doc, "gpus[1].numaNode", -1), "t.yaml")
    inv = fx.inventory
    assert [(n.id, n.distances) for n in inv.numa_nodes] == [(0, (10,))]
    assert inv.nvlink_fabric is NvlinkFabric.NONE
    assert inv.gpus[1].minor == 1
    assert inv.gpus[1].numa_node is None
    assert inv.gpus[0].mig_mode is MigMode.DISABLED
    assert fx.events == ()


def test_memory_affinity_loads_sorted_and_dumps_back() -> None:
    doc = variant(variant(node_doc(), "gpus[0].numaNode", -1), "gpus[0].memoryAffinity", [1, 0])
    inv = fixture_from_mapping(doc, "t.yaml").inventory
    assert inv.gpus[0].memory_affinity == (0, 1)
    assert inv.gpus[1].memory_affinity == ()
    again = fixture_from_mapping(yaml.safe_load(dump(inv)), "again.yaml").inventory
    assert again == inv
    assert "memoryAffinity" not in dump(load_fixture("vm-h200").inventory)


def test_missing_distances_default_to_linux_local_and_remote() -> None:
    doc = variant(variant(node_doc(), "numa[0].distances", ...), "numa[1].distances", ...)
    nodes = fixture_from_mapping(doc, "t.yaml").inventory.numa_nodes
    assert [n.distances for n in nodes] == [(10, 20), (20, 10)]


def test_unknown_builtin_and_unreadable_file_are_fixture_errors(tmp_path: Path) -> None:
    with pytest.raises(FixtureError, match=r"^dgx-z: no such built-in fixture \(built-in: dgx-1p"):
        load_fixture("dgx-z")
    missing = tmp_path / "gone.yaml"
    with pytest.raises(FixtureError, match=rf"^{missing}: cannot read: No such file"):
        load_fixture(missing)


@pytest.mark.parametrize("name", BUILTINS)
def test_dump_then_load_gives_an_equal_inventory(name: str, tmp_path: Path) -> None:
    fx = load_fixture(name)
    for fmt in ("yaml", "json"):
        path = tmp_path / f"{name}.{fmt}"
        path.write_text(dump(fx.inventory, fx.events, fmt=fmt))
        again = load_fixture(path)
        assert again.inventory == fx.inventory
        assert again.events == fx.events


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_fixture_is_what_the_backend_discovers_through_the_fake(name: str) -> None:
    assert load_inventory(name) == load_fixture(name).inventory


def test_dgx_a100_matches_the_reference_facts() -> None:
    inv = load_fixture("dgx-a100").inventory
    assert [g.numa_node for g in inv.gpus] == [3, 3, 1, 1, 7, 7, 5, 5]
    assert {inv.links.link(i, j) for i in range(8) for j in range(8) if i != j} == {
        GpuLink(nvlinks=12)
    }
    assert inv.gpus[0].pci_bus_id == "00000000:07:00.0"
    assert inv.gpus[0].product == "NVIDIA A100-SXM4-80GB"
    assert len(inv.numa_nodes) == 8
    assert inv.numa_nodes[3].cpulist == "48-63,176-191"
    assert inv.nvlink_fabric is NvlinkFabric.NVSWITCH


def test_dgx_a100_mig_has_four_layouts_and_scripted_events() -> None:
    fx = load_fixture("dgx-a100-mig")
    layouts = [g.mig_layout for g in fx.inventory.gpus[:4]]
    assert layouts == [
        ",".join(f"1g.10gb@{s}:1" for s in range(7)),
        "3g.40gb@0:4,2g.20gb@4:2,1g.10gb@6:1",
        "4g.40gb@0:4,3g.40gb@4:4",
        "3g.40gb@0:4,3g.40gb@4:4",
    ]
    assert all(g.mig_mode is MigMode.DISABLED for g in fx.inventory.gpus[4:])
    assert fx.events == (
        ScriptedEvent(after_s=20.0, gpu=0, xid=13, gi_id=11, ci_id=0),
        ScriptedEvent(after_s=30.0, gpu=5, xid=79),
    )


def test_dgx_1p_is_a_hybrid_cube_mesh() -> None:
    inv = load_fixture("dgx-1p").inventory
    row0 = [inv.links.link(0, j).cell for j in range(1, 8)]
    assert row0 == ["NV1", "NV1", "NV1", "NV1", "SYS", "SYS", "SYS"]
    assert inv.links.link(5, 1).cell == "NV1"
    assert inv.links.link(5, 2).cell == "SYS"
    assert inv.links.nvlink_islands() == (frozenset(range(8)),)


def test_pcie_fixtures_use_the_levels_the_brief_names() -> None:
    eight = load_fixture("pcie-8x-no-nvlink").inventory.links
    levels = {eight.link(i, j).level for i in range(8) for j in range(8) if i != j}
    assert levels == {TopoLevel.PIX, TopoLevel.NODE, TopoLevel.SYS}
    sixteen = load_fixture("pcie-16x-nvlink-pairs").inventory.links
    assert sixteen.nvlink_islands() == tuple(frozenset({k, k + 1}) for k in range(0, 16, 2))
    assert sixteen.link(0, 2).cell == "PIX"
    assert sixteen.link(0, 4).cell == "NODE"
    assert sixteen.link(0, 8).cell == "SYS"
    pairs = load_fixture("pcie-4x-nvlink-pairs").inventory.links
    assert pairs.nvlink_islands() == (frozenset({0, 1}), frozenset({2, 3}))


def test_json_dump_is_plain_json() -> None:
    doc = json.loads(dump(load_fixture("single-t4").inventory, fmt="json"))
    assert doc["gpus"][0]["name"] == "Tesla T4"
    assert doc["topology"] == [["X"]]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        pytest.param(
            "bad.yaml", "version: 1\ngpus: [1, 2\nx: 3\n",
            "bad.yaml:3:2: YAML syntax error: did not find expected ',' or ']' "
            "(while parsing a flow sequence at 2:7)",
            id="YAML",
        ),
        pytest.param(
            "bad.json", '{"version": 1,\n "gpus": [}', "bad.json:2:11: JSON syntax error: "
            "Expecting value", id="JSON",
        ),
    ],
)  # fmt: skip
def test_a_syntax_error_is_one_line_with_line_and_column(tmp_path, name, text, message) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(FixtureError) as info:
        load_fixture(path)
    assert str(info.value) == f"{tmp_path}/{message}"
