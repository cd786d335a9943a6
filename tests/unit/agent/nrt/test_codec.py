"""NRT codec: encode, decode, the lossless round trip, schema validity and decode errors."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from agent.availability import ResourceCounts, compute_availability
from agent.errors import TopologyDecodeError
from agent.model import GpuLink, NodeInventory, TopoLevel
from agent.nrt import (
    API_VERSION,
    ATTR_FINGERPRINT,
    ATTR_SCHEMA,
    decode,
    encode,
    legacy_topology_policy,
)
from agent.numa_capacity import KubeletConfig, numa_capacity
from agent.nvml.fixture import builtin_names, load_fixture
from agent.resource_names import GPU_RESOURCE
from agent.shares import GPU_COMPUTE, GPU_MEMORY, Sharing
from tests.builders import openapi
from tests.builders.nrt import as_published
from tests.builders.topology import (
    INVENTORIES,
    MIG_LAYOUT,
    allocatable_of,
    dgx_h100,
    gpu_pod,
    gpu_uuid,
    mig_mixed,
    mig_uuid,
    no_numa,
    pcie_pairs,
)


def _fixture_inventories() -> list[pytest.param]:
    return [pytest.param(load_fixture(n).inventory, id=f"fixture {n}") for n in builtin_names()]


ALL_INVENTORIES = [
    pytest.param(make(), id=name) for name, make in INVENTORIES.items()
] + _fixture_inventories()


def build(
    inv: NodeInventory,
    *,
    snapshot=None,
    unhealthy=frozenset(),
    policy="single-numa-node",
    scope="pod",
):
    av = compute_availability(
        inv, numa_capacity(inv.numa_nodes, KubeletConfig()), snapshot, unhealthy
    )
    return av, encode(inv, av, node_name="node-a", policy=policy, scope=scope, owner_uid="uid-1")


def attrs(obj):
    return {a["name"]: a["value"] for a in obj["attributes"]}


def zone(obj, name):
    return next(z for z in obj["zones"] if z["name"] == name)


def normalized(inv: NodeInventory) -> NodeInventory:
    """What the NRT carries: amounts, not zero hugepage counts; a GPU's NUMA node as published
    (its zone's parent), not its sysfs reading and NVML memory affinity."""
    nodes = tuple(
        replace(n, hugepages=tuple(h for h in n.hugepages if h[1])) for n in inv.numa_nodes
    )
    return replace(as_published(inv), numa_nodes=nodes)


@pytest.mark.parametrize("inv", ALL_INVENTORIES)
def test_round_trip_is_lossless(inv: NodeInventory) -> None:
    snapshot = replace(allocatable_of(inv), pods=(gpu_pod("ns", "p0", str(inv.gpus[0].uuid)),))
    av, obj = build(inv, snapshot=snapshot)
    decoded = decode(obj)
    assert decoded.node_name == "node-a"
    assert decoded.inventory == normalized(inv)
    assert decoded.inventory.links.cells() == inv.links.cells()
    assert decoded.availability == av
    assert decoded.topology_manager_policy == "single-numa-node"
    assert decoded.topology_manager_scope == "pod"


@pytest.mark.parametrize("inv", ALL_INVENTORIES)
def test_no_node_zone_lists_a_gpu_resource_at_capacity_zero(inv: NodeInventory) -> None:
    _, obj = build(inv, snapshot=allocatable_of(inv))
    zero = [
        (z["name"], r["name"])
        for z in obj["zones"]
        if z["type"] == "Node"
        for r in z["resources"]
        if r["name"].startswith("nvidia.com/") and r["capacity"] == "0"
    ]
    assert zero == []


@pytest.mark.parametrize(
    ("inv", "parent", "gpu_lines"),
    [
        pytest.param(
            load_fixture("vm-h200").inventory,
            "node-0",
            {"node-0": "1"},
            id="the recorded H200 VM: one NUMA node, sysfs -1",
        ),
        pytest.param(no_numa(2), None, {}, id="two NUMA nodes, nothing known"),
        pytest.param(no_numa(2, (1,)), "node-1", {"node-1": "1"}, id="memory affinity node 1"),
    ],
)
def test_gpu_with_unknown_sysfs_numa_node_is_published_under_the_node_design_names(
    inv: NodeInventory, parent: str | None, gpu_lines: dict[str, str]
) -> None:
    _, obj = build(inv, snapshot=allocatable_of(inv))
    assert zone(obj, "gpu-0").get("parent") == parent
    listed = {
        z["name"]: r["capacity"]
        for z in obj["zones"]
        if z["type"] == "Node"
        for r in z["resources"]
        if r["name"] == GPU_RESOURCE
    }
    assert listed == gpu_lines
    assert decode(obj).inventory.gpus[0].numa_node == (
        None if parent is None else int(parent.removeprefix("node-"))
    )


@pytest.mark.parametrize("inv", ALL_INVENTORIES)
def test_every_encoded_object_validates_against_the_crd(inv: NodeInventory) -> None:
    _, obj = build(inv, snapshot=allocatable_of(inv))
    schema = openapi.version_schema(openapi.load_crd(), "v1alpha2")
    assert openapi.problems(schema, obj) == []


def test_schema_validator_rejects_what_the_crd_forbids() -> None:
    _, obj = build(dgx_h100())
    schema = openapi.version_schema(openapi.load_crd(), "v1alpha2")
    bad = copy.deepcopy(obj)
    bad["zones"][0]["resources"][0]["capacity"] = "12 cores"
    del bad["zones"][1]["type"]
    bad["zones"][2]["extra"] = 1
    bad["zones"][3]["resources"][0].pop("available")
    assert openapi.problems(schema, bad) == [
        "zones[0].resources[0].capacity: '12 cores' does not match the quantity pattern",
        "zones[1].type: required",
        "zones[2].extra: unknown field",
        "zones[3].resources[0].available: required",
    ]


def test_crd_identity() -> None:
    crd = openapi.load_crd()
    assert crd["metadata"]["name"] == "noderesourcetopologies.topology.node.k8s.io"
    assert crd["metadata"]["annotations"]["api-approved.kubernetes.io"].startswith("https://")
    spec = crd["spec"]
    assert (spec["group"], spec["scope"], spec["names"]["shortNames"]) == (
        "topology.node.k8s.io",
        "Cluster",
        ["node-res-topo"],
    )
    assert [(v["name"], v["served"], v["storage"]) for v in spec["versions"]] == [
        ("v1alpha1", True, False),
        ("v1alpha2", True, True),
    ]
    assert "x-kubernetes-preserve-unknown-fields" not in openapi.CRD_PATH.read_text(
        encoding="utf-8"
    )
    columns = {c["name"] for c in spec["versions"][1]["additionalPrinterColumns"]}
    assert {"GPUs", "Free", "Policy"} <= columns


def test_crd_is_a_valid_customresourcedefinition() -> None:
    import kubernetes_validate

    assert kubernetes_validate.validate(openapi.load_crd(), "1.28", strict=True) == "1.28"


def test_dgx_h100_object_shape() -> None:
    inv = dgx_h100()
    snapshot = replace(allocatable_of(inv), pods=(gpu_pod("ml", "a", str(gpu_uuid(1))),))
    _, obj = build(inv, snapshot=snapshot, unhealthy={gpu_uuid(6)})
    assert obj["apiVersion"] == API_VERSION
    assert obj["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": "uid-1"}
    ]
    assert obj["topologyPolicies"] == ["SingleNUMANodePodLevel"]
    assert [z["name"] for z in obj["zones"]] == ["node-0", "node-1"] + [
        f"gpu-{i}" for i in range(8)
    ]
    node0 = zone(obj, "node-0")
    assert node0["costs"] == [{"name": "node-0", "value": 10}, {"name": "node-1", "value": 21}]
    gpu_line = next(r for r in node0["resources"] if r["name"] == GPU_RESOURCE)
    assert gpu_line == {"name": GPU_RESOURCE, "capacity": "4", "allocatable": "4", "available": "3"}
    cpu_line = node0["resources"][0]
    assert cpu_line == {"name": "cpu", "capacity": "112", "allocatable": "112", "available": "112"}
    g6 = zone(obj, "gpu-6")
    assert g6["parent"] == "node-1"
    assert {c["value"] for c in g6["costs"]} == {82}
    assert len(g6["costs"]) == 7
    g6_attrs = {a["name"]: a["value"] for a in g6["attributes"]}
    assert g6_attrs["health"] == "Unhealthy"
    assert g6_attrs["nvlinkIsland"] == "0"
    top = attrs(obj)
    assert top[ATTR_SCHEMA] == "v1"
    assert top["gputopo.io/nvlinkIslands"] == "1"
    assert top["gputopo.io/allocationSource"] == "podresources"
    assert top[ATTR_FINGERPRINT].startswith("pfp0v001")
    assert (top["gputopo.io/gpuCount"], top["gputopo.io/gpusFree"]) == ("8", "6")


def test_pcie_costs_decode_to_topo_cells() -> None:
    _, obj = build(pcie_pairs())
    costs = {c["name"]: c["value"] for c in zone(obj, "gpu-2")["costs"]}
    assert costs == {"gpu-0": 150, "gpu-1": 150, "gpu-3": 140}
    assert attrs(obj)["gputopo.io/nvlinkIslands"] == "3"
    decoded = decode(obj)
    assert decoded.inventory.links.link(2, 3) == GpuLink(level=TopoLevel.NODE)
    assert decoded.inventory.links.link(0, 1) == GpuLink(nvlinks=12)


def test_mig_zone_resources_and_layout() -> None:
    inv = mig_mixed()
    snapshot = replace(
        allocatable_of(inv),
        pods=(gpu_pod("a", "p", str(mig_uuid(0, 0)), resource="nvidia.com/mig-3g.40gb"),),
    )
    _, obj = build(inv, snapshot=snapshot)
    g0 = zone(obj, "gpu-0")
    g0_attrs = {a["name"]: a["value"] for a in g0["attributes"]}
    assert g0_attrs["migMode"] == "enabled"
    assert g0_attrs["migLayout"] == MIG_LAYOUT
    assert [(r["name"], r["available"]) for r in g0["resources"]] == [
        ("nvidia.com/mig-1g.10gb", "3"),
        ("nvidia.com/mig-3g.40gb", "0"),
    ]
    assert decode(obj).inventory.gpus[0].mig_layout == MIG_LAYOUT


def test_without_podresources_no_fingerprint_and_source_none() -> None:
    _, obj = build(dgx_h100())
    top = attrs(obj)
    assert top["gputopo.io/allocationSource"] == "none"
    assert ATTR_FINGERPRINT not in top
    assert decode(obj).availability.fingerprint == ""


@pytest.mark.parametrize(
    ("policy", "scope", "legacy"),
    [
        ("none", "container", "None"),
        ("restricted", "pod", "RestrictedPodLevel"),
        ("best-effort", "container", "BestEffortContainerLevel"),
    ],
)
def test_legacy_topology_policies(policy, scope, legacy) -> None:
    assert legacy_topology_policy(policy, scope) == legacy


def _break(path: str):
    """Edits that make a valid object undecodable, with the field the error must name."""

    def edit(obj):
        z = {x["name"]: x for x in obj["zones"]}
        if path == "kind":
            obj["kind"] = "ConfigMap"
        elif path == "schema":
            obj["attributes"] = [a for a in obj["attributes"] if a["name"] != ATTR_SCHEMA]
        elif path == "cost-missing":
            z["gpu-1"]["costs"] = z["gpu-1"]["costs"][:-1]
        elif path == "cost-bad":
            z["gpu-1"]["costs"][0]["value"] = 105
        elif path == "asymmetric":
            z["gpu-1"]["costs"][0]["value"] = 90
        elif path == "uuid":
            z["gpu-2"]["attributes"] = [a for a in z["gpu-2"]["attributes"] if a["name"] != "uuid"]
        elif path == "quantity":
            z["node-0"]["resources"][1]["available"] = "lots"
        elif path == "parent":
            z["gpu-0"]["parent"] = "node-9"
        elif path == "gap":
            obj["zones"] = [x for x in obj["zones"] if x["name"] != "gpu-3"]
        elif path == "zones":
            obj["zones"] = {"node-0": {}}
        return obj

    return edit


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        pytest.param(
            _break("kind"), r"node-a: kind: expected NodeResourceTopology", id="foreign kind"
        ),
        pytest.param(
            _break("schema"),
            r"node-a: attributes.gputopo.io/schema: not written by gputopo",
            id="no schema",
        ),
        pytest.param(
            _break("cost-missing"),
            r"zones\[3\] \(gpu-1\).costs: no cost to gpu-7",
            id="missing cost",
        ),
        pytest.param(
            _break("cost-bad"),
            r"\(gpu-1\).costs: to gpu-0: not a gputopo GPU cost: 105",
            id="bad cost",
        ),
        pytest.param(
            _break("asymmetric"),
            r"zones\[\*\].costs: link matrix is not symmetric",
            id="asymmetric",
        ),
        pytest.param(_break("uuid"), r"\(gpu-2\).attributes.uuid: is required", id="no uuid"),
        pytest.param(
            _break("quantity"),
            r"\(node-0\).resources\[1\].available: not a quantity",
            id="bad quantity",
        ),
        pytest.param(
            _break("parent"),
            r"\(gpu-0\).parent: names node-9, which is not a Node zone",
            id="bad parent",
        ),
        pytest.param(
            _break("gap"), r"zones: GPU zones must be gpu-0..gpu-6", id="gap in GPU zones"
        ),
        pytest.param(_break("zones"), r"zones: expected a list, got dict", id="zones not a list"),
    ],
)
def test_decode_errors_name_node_and_field(edit, match) -> None:
    _, obj = build(dgx_h100())
    with pytest.raises(TopologyDecodeError, match=match):
        decode(edit(copy.deepcopy(obj)))


@pytest.mark.parametrize("obj", [None, [], {"metadata": {}}, {"kind": "NodeResourceTopology"}])
def test_decode_without_a_name(obj) -> None:
    with pytest.raises(TopologyDecodeError, match=r"\(unnamed\): metadata.name: missing"):
        decode(obj)


def test_decode_a_foreign_nfd_object() -> None:
    nfd = {
        "apiVersion": API_VERSION,
        "kind": "NodeResourceTopology",
        "metadata": {"name": "worker-3"},
        "zones": [
            {
                "name": "node-0",
                "type": "Node",
                "resources": [{"name": "cpu", "capacity": 8, "allocatable": 8, "available": 4}],
            }
        ],
        "attributes": [{"name": "topologyManagerPolicy", "value": "none"}],
    }
    with pytest.raises(
        TopologyDecodeError, match=r"worker-3: attributes.gputopo.io/schema: not written by gputopo"
    ):
        decode(nfd)


def test_gpus_free_counts_whole_gpus_and_mig_gpus_apart() -> None:
    """On a node with GPUs in MIG mode, `gpusFree` counts only what `nvidia.com/gpu` can get."""
    from agent.nvml.fixture import load_fixture

    inv = load_fixture("dgx-a100-mig").inventory
    _, obj = build(inv)
    top = attrs(obj)
    assert (top["gputopo.io/gpuCount"], top["gputopo.io/gpusFree"]) == ("8", "4")
    assert top["gputopo.io/migGpus"] == "4"


def _shared(av, sharing: Sharing, shares: int):
    """`av` with every GPU shared: the replica, gpu-memory and gpu-compute lines added."""
    gpus = tuple(
        replace(
            g,
            sharing=sharing,
            shares=shares,
            resources=(
                ResourceCounts(name=GPU_RESOURCE, capacity=shares, allocatable=shares, available=1),
                ResourceCounts(
                    name=GPU_MEMORY, capacity=80 << 30, allocatable=80 << 30, available=5
                ),
                ResourceCounts(name=GPU_COMPUTE, capacity=100, allocatable=100, available=40),
            ),
        )
        for g in av.gpus
    )
    return replace(av, gpus=gpus)


@pytest.mark.parametrize("sharing", [Sharing.TIME_SLICING, Sharing.MPS])
def test_shared_gpu_zones_round_trip_with_sharing_and_shares(sharing: Sharing) -> None:
    inv = dgx_h100()
    av, _ = build(inv, snapshot=allocatable_of(inv))
    shared = _shared(av, sharing, 4)
    obj = encode(inv, shared, node_name="node-a")
    gpu0 = zone(obj, "gpu-0")
    assert attrs(gpu0)["sharing"] == str(sharing)
    assert attrs(gpu0)["shares"] == "4"
    assert {r["name"]: r["available"] for r in gpu0["resources"]} == {
        GPU_RESOURCE: "1",
        GPU_MEMORY: "5",
        GPU_COMPUTE: "40",
    }
    assert decode(obj).availability == shared
    schema = openapi.version_schema(openapi.load_crd(), "v1alpha2")
    assert openapi.problems(schema, obj) == []


def test_unshared_gpu_zones_say_sharing_none_and_no_shares() -> None:
    _, obj = build(dgx_h100())
    assert attrs(zone(obj, "gpu-3"))["sharing"] == "none"
    assert "shares" not in attrs(zone(obj, "gpu-3"))


def _set_attr(obj, zone_name: str, name: str, value: str | None):
    z = zone(obj, zone_name)
    z["attributes"] = [a for a in z["attributes"] if a["name"] != name]
    if value is not None:
        z["attributes"].append({"name": name, "value": value})
    return obj


@pytest.mark.parametrize(
    ("name", "value", "match"),
    [
        pytest.param(
            "sharing", "mig", r"\(gpu-1\).attributes.sharing: unknown sharing 'mig'", id="bad word"
        ),
        pytest.param(
            "shares",
            None,
            r"\(gpu-1\).attributes.shares: is required on a shared GPU",
            id="no shares",
        ),
        pytest.param(
            "shares", "0", r"\(gpu-1\).attributes.shares: must be at least 1, got 0", id="zero"
        ),
    ],
)
def test_decode_rejects_a_bad_sharing_attribute(name, value, match) -> None:
    inv = dgx_h100()
    av, _ = build(inv)
    obj = encode(inv, _shared(av, Sharing.MPS, 4), node_name="node-a")
    with pytest.raises(TopologyDecodeError, match=match):
        decode(_set_attr(obj, "gpu-1", name, value))


def test_an_object_without_sharing_attributes_decodes_as_not_shared() -> None:
    _, obj = build(dgx_h100())
    decoded = decode(_set_attr(obj, "gpu-2", "sharing", None))
    assert decoded.availability.gpus[2].sharing is Sharing.NONE
    assert decoded.availability.gpus[2].shares == 0
