"""The structured allocator's features, one by one, and the placement it adds (NVLink, binpack)."""

from __future__ import annotations

from fractions import Fraction

from agent.model import LinkMatrix, NodeInventory
from scheduler.claims.allocator import ClaimAllocator
from scheduler.claims.decision import ClaimNode
from scheduler.claims.model import AllocatedDevice, Allocation, DeviceId
from scheduler.claims.parse import parse_claim, parse_slice
from scheduler.claims.slices import node_devices
from scheduler.claims.status import allocation_status
from scheduler.claims.usage import Usage
from scheduler.placement import NodeState, Scoring
from scheduler.placement.scores import default_scoring
from tests.builders.claims import (
    DRIVER,
    GIB,
    GPU_CLASS,
    allocator,
    claim,
    claim_node,
    claim_obj,
    class_obj,
    classes,
    device_names,
    gpu_device,
    island_devices,
    pod,
    request,
    shared_slice_obj,
    slice_obj,
    two_islands,
)
from tests.builders.topology import gpu_uuid, make_gpu, make_numa

ISLAND = f"{DRIVER}/nvlinkIsland"


def held(node: str, *gpus: int) -> Usage:
    return Usage.of(
        [
            Allocation(
                devices=tuple(
                    AllocatedDevice(request="r", id=DeviceId(DRIVER, node, f"gpu-{g}"))
                    for g in gpus
                )
            )
        ]
    )


def test_two_gpus_come_from_one_nvlink_island_where_first_fit_spans_two() -> None:
    usage = held("n1", 0, 1, 4)  # free: 2, 3 (island 0) and 5, 6, 7 (island 1)
    with_topology = claim_node("n1", island_devices(), two_islands())
    first_fit = claim_node("n1", island_devices())
    want = pod("ns/p", claim("c", request("gpus", 3)))
    assert device_names(allocator().place(want, [with_topology], usage)) == [
        "gpu-5",
        "gpu-6",
        "gpu-7",
    ]
    assert device_names(allocator().place(want, [first_fit], usage)) == ["gpu-2", "gpu-3", "gpu-5"]


def test_match_attribute_keeps_devices_together_and_distinct_spreads_them() -> None:
    node = claim_node("n1", island_devices())
    usage = held("n1", 0, 1, 2)
    together = claim("c", request("gpus", 2), constraints=[{"matchAttribute": ISLAND}])
    assert device_names(allocator().place(pod("ns/p", together), [node], usage)) == [
        "gpu-4",
        "gpu-5",
    ]
    apart = claim("c", request("gpus", 2), constraints=[{"distinctAttribute": ISLAND}])
    assert device_names(allocator().place(pod("ns/p", apart), [node], usage)) == ["gpu-3", "gpu-4"]
    too_many = claim("c", request("gpus", 3), constraints=[{"distinctAttribute": ISLAND}])
    decision = allocator().place(pod("ns/p", too_many), [node], usage)
    assert decision.node is None
    assert "no devices satisfy their constraints together on node n1" in decision.reasons[0]


def test_constraint_across_two_requests_of_one_claim() -> None:
    node = claim_node("n1", island_devices())
    both = claim(
        "c",
        request("a", 1),
        request("b", 3),
        constraints=[{"requests": ["a", "b"], "matchAttribute": ISLAND}],
    )
    decision = allocator().place(pod("ns/p", both), [node], held("n1", 1))
    assert device_names(decision) == ["gpu-4", "gpu-5", "gpu-6", "gpu-7"]


def test_all_mode_takes_every_matching_device_or_none() -> None:
    node = claim_node("n1", island_devices())
    sel = f'device.attributes["{DRIVER}"].nvlinkIsland == 1'
    every = claim("c", request("gpus", 1, sel, allocationMode="All"))
    assert device_names(allocator().place(pod("ns/p", every), [node], Usage())) == [
        f"gpu-{g}" for g in range(4, 8)
    ]
    decision = allocator().place(pod("ns/p", every), [node], held("n1", 5))
    assert decision.reasons == (
        "claim ns/c request gpus: 3 of 4 matching devices are free on node n1",
    )


def test_all_mode_waits_for_an_incomplete_pool() -> None:
    found = node_devices([parse_slice(slice_obj("n1", [gpu_device(0)], count=2))], "n1", {})
    node = ClaimNode(name="n1", devices=found)
    every = claim("c", request("gpus", 1, allocationMode="All"))
    decision = allocator().place(pod("ns/p", every), [node], Usage())
    assert decision.reasons == ("claim ns/c request gpus: pool n1 is incomplete on node n1",)
    assert allocator().place(pod("ns/p", claim("d")), [node], Usage()).node == "n1"


def test_first_available_falls_back_and_names_the_subrequest() -> None:
    node = claim_node("n1", island_devices())
    obj = claim_obj(
        "c",
        {
            "name": "gpus",
            "firstAvailable": [
                {"name": "eight", "deviceClassName": "gpu.gputopo.io", "count": 8},
                {"name": "four", "deviceClassName": "gpu.gputopo.io", "count": 4},
            ],
        },
    )
    decision = allocator().place(pod("ns/p", parse_claim(obj)), [node], held("n1", 0))
    results = decision.claims[0].allocation.devices
    assert {r.request for r in results} == {"gpus/four"}
    assert len(results) == 4


def test_consumable_capacity_shares_a_device_until_it_is_full() -> None:
    policy = {"default": "8Gi", "validRange": {"min": "4Gi", "step": "4Gi"}}
    shared = gpu_device(
        0, shared=True, capacity={"memory": {"value": "40Gi", "requestPolicy": policy}}
    )
    node = claim_node("n1", [shared])
    alloc = allocator()
    usage = Usage()
    taken = []
    for name, ask in (("a", "10Gi"), ("b", None), ("c", "16Gi")):
        extra = {"capacity": {"requests": {"memory": ask}}} if ask else {}
        decision = alloc.place(
            pod(f"ns/{name}", claim(name, request("g", 1, **extra))), [node], usage
        )
        made = decision.claims[0].allocation
        usage.add(made.devices)
        taken.append(made.devices[0].consumed[f"{DRIVER}/memory"] / GIB)
    assert taken == [12, 8, 16]  # 10Gi rounds up to the 4Gi step; no request takes the default
    full = alloc.place(
        pod("ns/d", claim("d", request("g", 1, capacity={"requests": {"memory": "8Gi"}}))),
        [node],
        usage,
    )
    assert full.reasons == (
        "claim ns/d request g: 0 of 1 matching devices are free with the capacity asked on node n1",
    )
    status = allocation_status(made)
    result = status["devices"]["results"][0]  # type: ignore[index]
    assert result["consumedCapacity"] == {"memory": str(16 * GIB)}
    assert len(result["shareID"]) == 36


def test_exclusive_device_must_hold_the_capacity_asked() -> None:
    node = claim_node("n1", [gpu_device(0), gpu_device(1, capacity={"memory": {"value": "141Gi"}})])
    big = claim("c", request("g", 1, capacity={"requests": {"memory": "100Gi"}}))
    decision = allocator().place(pod("ns/p", big), [node], Usage())
    assert device_names(decision) == ["gpu-1"]
    assert decision.claims[0].allocation.devices[0].consumed == {}


def test_taints_keep_devices_away_unless_tolerated() -> None:
    taint = {"key": "gpu.gputopo.io/unhealthy", "value": "xid", "effect": "NoSchedule"}
    node = claim_node("n1", [gpu_device(0, taints=[taint])])
    plain = claim("c", request("g"))
    decision = allocator().place(pod("ns/p", plain), [node], Usage())
    assert decision.reasons == (
        "claim ns/c request g: 0 of 1 devices tolerate their taints on node n1",
    )
    tolerant = claim(
        "c", request("g", tolerations=[{"key": "gpu.gputopo.io/unhealthy", "operator": "Exists"}])
    )
    assert allocator().place(pod("ns/p", tolerant), [node], Usage()).node == "n1"


def test_devices_with_binding_conditions_come_last_and_their_allocation_waits() -> None:
    """Kubernetes' allocator tries pools whose devices have binding conditions after every
    other; an allocation of such a device carries its conditions (the bind waits for them), and
    one of a device that binds to its node is for that node alone."""
    plain = shared_slice_obj("fabric", "fabric", [gpu_device(0)], driver="b.example.com")
    attached = gpu_device(1)
    attached.update(bindingConditions=["Attached"], bindingFailureConditions=["AttachFailed"])
    attached["bindsToNode"] = True
    waiting = shared_slice_obj("attach", "attach", [attached], driver="a.example.com")
    found = node_devices([parse_slice(s) for s in (waiting, plain)], "n1", {})
    assert [d.name for d in found.devices] == ["gpu-0", "gpu-1"]  # a.example.com's pool last
    node = ClaimNode(name="n1", devices=found)
    any_gpu = class_obj(GPU_CLASS, 'device.attributes[device.driver].type == "gpu"')
    first = allocator(any_gpu).place(pod("ns/p", claim("c", request("g"))), [node], Usage())
    assert device_names(first) == ["gpu-0"]
    assert first.claims[0].allocation.node is None  # an allNodes slice's: any node
    assert not first.claims[0].allocation.waits
    both = allocator(any_gpu).place(pod("ns/q", claim("d", request("g", 2))), [node], Usage())
    allocation = both.claims[0].allocation
    assert allocation.waits
    assert allocation.node == "n1"  # bindsToNode
    status = allocation_status(allocation, now="2026-12-05T12:00:00Z")
    results = status["devices"]["results"]  # type: ignore[index]
    assert results[1]["bindingConditions"] == ["Attached"]
    assert results[1]["bindingFailureConditions"] == ["AttachFailed"]
    assert "bindingConditions" not in results[0]
    assert status["allocationTimestamp"] == "2026-12-05T12:00:00Z"
    assert "allocationTimestamp" not in allocation_status(first.claims[0].allocation, now="x")


def test_admin_access_takes_a_device_in_use_and_holds_nothing() -> None:
    node = claim_node("n1", [gpu_device(0)])
    usage = held("n1", 0)
    admin = claim("c", request("g", adminAccess=True))
    decision = allocator().place(pod("ns/p", admin), [node], usage)
    result = decision.claims[0].allocation.devices[0]
    assert result.admin_access
    assert allocation_status(decision.claims[0].allocation)["devices"]["results"][0]["adminAccess"]
    assert Usage.of([decision.claims[0].allocation]).exclusive == set()


def test_claims_allocated_by_anyone_count_as_used() -> None:
    status = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpus", "driver": DRIVER, "pool": "n1", "device": f"gpu-{g}"}
                    for g in range(7)
                ]
            }
        }
    }
    theirs = parse_claim(claim_obj("kube", request(), status=status))
    node = claim_node("n1", island_devices())
    usage = Usage.of([theirs.allocation] if theirs.allocation else [])
    decision = allocator().place(pod("ns/p", claim("c", request("g", 2))), [node], usage)
    assert decision.reasons == (
        "claim ns/c request g: 1 of 2 matching devices are free on node n1",
    )


def test_selector_miss_names_claim_request_expression_and_node() -> None:
    node = claim_node("n1", island_devices())
    sel = f'device.attributes["{DRIVER}"].numaNode == 0'
    decision = allocator().place(pod("ns/p", claim("c", request("gpus", 5, sel))), [node], Usage())
    assert decision.reasons == (
        f"claim ns/c request gpus: 4 of 5 devices match selector `{sel}` on node n1",
    )
    unknown = claim("c", {"name": "g", "exactly": {"deviceClassName": "tpu"}})
    assert allocator().place(pod("ns/p", unknown), [node], Usage()).reasons == (
        "claim ns/c request g: device class tpu not found",
    )


def test_nearest_miss_comes_first_across_nodes() -> None:
    near = claim_node("near", island_devices())
    far = claim_node("far", [gpu_device(0)])
    decision = allocator().place(
        pod("ns/p", claim("c", request("g", 4))), [far, near], held("near", 0, 1, 2, 3, 4)
    )
    assert decision.reasons[0].endswith("3 of 4 matching devices are free on node near")


def test_class_selectors_and_config_reach_the_allocation() -> None:
    cfg = {"opaque": {"driver": DRIVER, "parameters": {"sharing": "none"}}}
    cls = class_obj("gpu.gputopo.io", f'device.attributes["{DRIVER}"].numaNode == 1', config=[cfg])
    node = claim_node("n1", island_devices())
    decision = ClaimAllocator(classes(cls)).place(
        pod("ns/p", claim("c", request("g", 1))), [node], Usage()
    )
    status = allocation_status(decision.claims[0].allocation)
    assert device_names(decision) == ["gpu-4"]
    assert status["devices"]["config"] == [  # type: ignore[index]
        {
            "source": "FromClass",
            "requests": ["g"],
            "opaque": {"driver": DRIVER, "parameters": {"sharing": "none"}},
        }
    ]
    assert status["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["n1"]  # type: ignore[index]


def test_binpack_prefers_the_fuller_node() -> None:
    nodes = [claim_node("a", island_devices()), claim_node("b", island_devices())]
    decision = allocator().place(pod("ns/p", claim("c", request("g", 2))), nodes, held("b", 0))
    assert decision.node == "b"
    decision = allocator().place(pod("ns/p", claim("c", request("g", 2))), nodes, Usage())
    assert decision.node == "a"  # ties go to the lowest name


def test_placement_scoring_ranks_nodes_with_their_state() -> None:
    inventory = two_islands()
    states = {n: NodeState.from_inventory(n, inventory, allocatable={}) for n in ("a", "b")}
    states["b"].gpu_free[0] = 0  # GPU 0 of b is in use: binpack prefers b
    states["b"].used_milli = 1000
    nodes = [
        ClaimNode(name=n, devices=claim_node(n, island_devices()).devices, state=states[n])
        for n in ("a", "b")
    ]
    scoring = Scoring.from_weights({"binpack": 1.0}, prefer_used_nodes=True)
    decision = ClaimAllocator(classes(), scoring=scoring).place(
        pod("ns/p", claim("c")), nodes, Usage()
    )
    assert decision.node == "b"


def test_devices_no_topology_maps_pack_as_gpus_do_not_spread_as_cpu_pods() -> None:
    """A foreign driver's GPUs on nodes without NodeResourceTopology (no GPU map): the claim
    pod packs onto the node whose devices are in use, with the shipped scores and binpack alike
    (scored as a pod without GPUs, the shipped scores spread it to the emptiest node)."""
    states = {n: NodeState(name=n, allocatable={"cpu": 64_000, "memory": 256 << 30}) for n in "ab"}
    nodes = [
        ClaimNode(name=n, devices=claim_node(n, island_devices()).devices, state=states[n])
        for n in "ab"
    ]
    usage = held("b", 0)
    for scoring in (default_scoring(), Scoring.from_weights({"binpack": 1.0})):
        decision = ClaimAllocator(classes(), scoring=scoring).place(
            pod("ns/p", claim("c")), nodes, usage
        )
        assert decision.node == "b"


def test_gang_is_all_or_none_and_a_shared_claim_is_allocated_once() -> None:
    node = claim_node("n1", island_devices())
    shared = claim("shared", request("g", 2))
    pods = [pod(f"ns/w{i}", claim(f"own{i}", request("g", 2)), shared) for i in range(3)]
    decision = allocator().place_gang(pods, [node], Usage())
    assert decision.placed
    new = [c for p in decision.pods for c in p.claims if c.new]
    assert sorted(str(c.claim.key) for c in new) == ["ns/own0", "ns/own1", "ns/own2", "ns/shared"]
    assert len({d.id for c in new for d in c.allocation.devices}) == 8
    four = [*pods, pod("ns/w3", claim("own3", request("g", 2)))]
    failed = allocator().place_gang(four, [node], Usage())
    assert not failed.placed
    assert failed.pods == ()
    assert failed.reasons[0].startswith("pod ns/w3: claim ns/own3 request g: 0 of 2 matching")


def test_an_allocated_claim_pins_the_pod_to_its_node() -> None:
    status = {
        "allocation": {
            "devices": {"results": []},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]}
                ]
            },
        }
    }
    done = parse_claim(claim_obj("c", request(), status=status))
    nodes = [claim_node("a", island_devices()), claim_node("b", island_devices())]
    decision = allocator().place(pod("ns/p", done), nodes, Usage())
    assert decision.node == "b"
    assert not decision.claims[0].new


def test_share_ids_are_deterministic() -> None:
    shared = gpu_device(0, shared=True, capacity={"memory": {"value": "40Gi"}})
    node = claim_node("n1", [shared])
    want = pod("ns/p", claim("c", request("g", 1, capacity={"requests": {"memory": "1Gi"}})))
    one = allocator().place(want, [node], Usage()).claims[0].allocation.devices[0]
    two = allocator().place(want, [node], Usage()).claims[0].allocation.devices[0]
    assert one.share_id == two.share_id
    assert one.consumed == {f"{DRIVER}/memory": Fraction(GIB)}


def mig_device(gpu: int, slot: int) -> dict[str, object]:
    return {
        "name": f"gpu-{gpu}-mig-1g10gb-19-{slot}",
        "attributes": {
            "type": {"string": "mig"},
            "uuid": {"string": f"MIG-{gpu}-{slot}"},
            "parentUUID": {"string": gpu_uuid(gpu)},
            "profile": {"string": "1g.10gb"},
        },
        "capacity": {"memory": {"value": "10Gi"}},
    }


def test_mig_devices_go_to_a_gpu_already_in_use() -> None:
    layout = "1g.10gb@0:1,1g.10gb@1:1"
    inventory = NodeInventory(
        gpus=(make_gpu(0, 0, mig=layout), make_gpu(1, 0, mig=layout)),
        links=LinkMatrix.from_cells([["X", "PXB"], ["PXB", "X"]]),
        numa_nodes=make_numa([0], ["0-31"]),
        driver_version="550.54.15",
        cuda_driver_version=12040,
    )
    mig_class = class_obj("mig.gputopo.io", f'device.attributes["{DRIVER}"].type == "mig"')
    node = claim_node("n1", [mig_device(g, s) for g in (0, 1) for s in (0, 1)], inventory)
    usage = Usage.of(
        [
            Allocation(
                devices=(
                    AllocatedDevice(
                        request="r", id=DeviceId(DRIVER, "n1", "gpu-1-mig-1g10gb-19-0")
                    ),
                )
            )
        ]
    )
    want = claim("c", {"name": "m", "exactly": {"deviceClassName": "mig.gputopo.io"}})
    decision = ClaimAllocator(classes(mig_class)).place(pod("ns/p", want), [node], usage)
    assert device_names(decision) == ["gpu-1-mig-1g10gb-19-1"]
    first_fit = claim_node("n1", [mig_device(g, s) for g in (0, 1) for s in (0, 1)])
    decision = ClaimAllocator(classes(mig_class)).place(pod("ns/p", want), [first_fit], usage)
    assert device_names(decision) == ["gpu-0-mig-1g10gb-19-0"]


def test_a_share_goes_to_the_fullest_shared_device_that_fits() -> None:
    devices = [gpu_device(g, shared=True, capacity={"memory": {"value": "40Gi"}}) for g in range(3)]
    node = claim_node("n1", devices, two_islands())
    usage = Usage()
    for g, used in ((1, 30), (2, 20)):
        usage.add(
            [
                AllocatedDevice(
                    request="r",
                    id=DeviceId(DRIVER, "n1", f"gpu-{g}"),
                    share_id="s",
                    consumed={f"{DRIVER}/memory": Fraction(used * GIB)},
                )
            ]
        )
    small = claim("c", request("g", 1, capacity={"requests": {"memory": "8Gi"}}))
    assert device_names(allocator().place(pod("ns/p", small), [node], usage)) == ["gpu-1"]
    big = claim("c", request("g", 1, capacity={"requests": {"memory": "16Gi"}}))
    assert device_names(allocator().place(pod("ns/p", big), [node], usage)) == ["gpu-2"]


def test_a_pod_that_fits_nowhere_is_remembered_until_usage_changes() -> None:
    node = claim_node("n1", island_devices())
    alloc = allocator()
    usage = held("n1", *range(7))
    want = pod("ns/p", claim("c", request("g", 2)))
    assert alloc.place(want, [node], usage, explain=False).node is None
    assert alloc.place(want, [node], usage, explain=False).node is None
    assert alloc.place(want, [node], held("n1", *range(6)), explain=False).node == "n1"


def test_a_gang_with_a_domain_fits_in_one_domain_the_tightest() -> None:
    nodes = {n: claim_node(n, island_devices()) for n in ("a1", "a2", "b1", "b2")}
    domains = {"rack-a": [nodes["a1"], nodes["a2"]], "rack-b": [nodes["b1"], nodes["b2"]]}
    usage = held("b1", 0, 1, 2, 3)  # rack-b has 12 free GPUs, rack-a 16
    pods = [pod(f"ns/w{i}", claim(f"c{i}", request("g", 4))) for i in range(3)]
    decision = allocator().place_gang(pods, list(nodes.values()), usage, domains=domains)
    assert {p.node for p in decision.pods} == {"b1", "b2"}
    big = [pod(f"ns/w{i}", claim(f"c{i}", request("g", 8))) for i in range(3)]
    failed = allocator().place_gang(big, list(nodes.values()), usage, domains=domains)
    assert not failed.placed
    assert [r.split(":")[0] for r in failed.reasons] == ["domain rack-a", "domain rack-b"]
