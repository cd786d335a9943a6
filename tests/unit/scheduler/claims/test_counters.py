"""Partitionable devices (DRAPartitionableDevices, beta and on since 1.36): devices that consume
their pool's shared counters are allocated while the counters last, as Kubernetes' allocator
allocates them; a pool whose counters do not add up is invalid.

The node is a partitionable driver's GPU: counter set `gpu-0` of 8 memory slices and 80Gi; the
whole GPU takes all of it, a `<n>g` partition n slices and n x 10Gi."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.model import LinkMatrix, NodeInventory
from scheduler.claims.decision import ClaimNode, PodClaims
from scheduler.claims.model import AllocatedDevice, Allocation, Device, DeviceId, ResourceClaim
from scheduler.claims.parse import parse_slice
from scheduler.claims.slices import counters_left, node_devices
from scheduler.claims.usage import Usage
from tests.builders.claims import (
    DRIVER,
    allocator,
    claim,
    class_obj,
    consuming,
    counter_slice_obj,
    device_names,
    gpu_device,
    partition,
    partitioned_node,
    pod,
    request,
    slice_obj,
)
from tests.builders.topology import make_gpu, make_numa

PARTS = "parts.gputopo.io"
PARTS_CLASS = class_obj(PARTS, f'device.driver == "{DRIVER}"')


def sized(name: str, size: int, count: int = 1) -> dict[str, object]:
    """A request for `count` partitions of `size` slices (8: the whole GPU)."""
    selector = f'device.attributes["{DRIVER}"].size == {size}'
    return request(name, count, selector, deviceClassName=PARTS)


def one_gpu() -> ClaimNode:
    """GPU 0 whole, as two 4-slice halves, and as four 2-slice quarters."""
    devices = [partition(0, 8, 0)]
    devices += [partition(0, 4, i) for i in range(2)]
    devices += [partition(0, 2, i) for i in range(4)]
    return partitioned_node("n1", devices)


def place(
    node: ClaimNode, usage: Usage, *requests: dict[str, object], name: str = "c"
) -> list[str]:
    """The devices a claim of `requests` gets on `node` (added to `usage`), [] when none."""
    decision = allocator(PARTS_CLASS).place(
        pod(f"ns/{name}", claim(name, *requests)), [node], usage
    )
    if decision.node is None:
        return []
    for made in decision.claims:
        usage.add(made.allocation.devices)
    return device_names(decision)


def test_partitions_are_allocated_while_their_gpus_counters_last() -> None:
    node, usage = one_gpu(), Usage()
    assert place(node, usage, sized("half", 4)) == ["gpu-0-4g-0"]
    assert place(node, usage, sized("whole", 8)) == []  # half the slices are taken
    assert place(node, usage, sized("quarters", 2, 2)) == ["gpu-0-2g-0", "gpu-0-2g-1"]
    assert place(node, usage, sized("half", 4), name="d") == []  # 2 slices left: both taken
    decision = allocator(PARTS_CLASS).place(
        pod("ns/e", claim("e", sized("half", 4))), [node], usage
    )
    assert decision.reasons == (
        "claim ns/e request half: 0 of 1 matching devices are free and within their pools' "
        "shared counters on node n1",
    )


def test_one_claim_takes_no_more_than_the_counters_hold_together() -> None:
    """Each half fits alone; three together would take 12 of 8 slices."""
    node = one_gpu()
    assert place(node, Usage(), sized("halves", 4, 2)) == ["gpu-0-4g-0", "gpu-0-4g-1"]
    assert place(node, Usage(), sized("halves", 4, 1), sized("quarter", 2, 3)) == []
    decision = allocator(PARTS_CLASS).place(
        pod("ns/c", claim("c", sized("half", 4), sized("more", 4), sized("quarter", 2))),
        [node],
        Usage(),
    )
    assert decision.reasons == (
        "claims ns/c: no devices satisfy their constraints and their pools' shared counters "
        "together on node n1",
    )


def test_the_whole_gpu_leaves_no_partition() -> None:
    node, usage = one_gpu(), Usage()
    assert place(node, usage, sized("whole", 8)) == ["gpu-0"]
    for size in (4, 2):
        assert place(node, usage, sized("part", size)) == []


def test_a_shared_partition_takes_its_counters_once() -> None:
    """A device with allowMultipleAllocations takes its counters when first allocated; further
    shares take none (Kubernetes skips the counter check for a shared device in use)."""
    shared = partition(0, 4, 0)
    shared["allowMultipleAllocations"] = True
    node = partitioned_node("n1", [shared, partition(0, 4, 1), partition(0, 8, 0)])
    usage = Usage()
    memory = {"requests": {"memory": "10Gi"}}
    first = request("s", 1, deviceClassName=PARTS, capacity=memory)
    assert place(node, usage, first, name="a") == ["gpu-0-4g-0"]
    assert place(node, usage, first, name="b") == ["gpu-0-4g-0"]  # a second share, no counters
    assert place(node, usage, sized("whole", 8)) == []
    assert place(node, usage, sized("half", 4)) == ["gpu-0-4g-1"]
    whole = partition(0, 8, 0)
    whole["allowMultipleAllocations"] = True
    node = partitioned_node("n1", [whole])
    two = [request(f"s{i}", 1, deviceClassName=PARTS, capacity=memory) for i in range(2)]
    assert place(node, Usage(), *two) == ["gpu-0", "gpu-0"]  # one claim, its counters once


def test_counters_of_devices_held_by_anyone_are_taken() -> None:
    node = one_gpu()
    theirs = Allocation(
        devices=(AllocatedDevice(request="r", id=DeviceId(DRIVER, "n1", "gpu-0-2g-3")),)
    )
    usage = Usage.of([theirs])
    assert place(node, usage, sized("halves", 4, 2)) == []
    assert place(node, usage, sized("half", 4)) == ["gpu-0-4g-0"]


def test_a_pool_whose_counters_do_not_add_up_is_invalid() -> None:
    """A device consuming a counter set (or counter) its pool has not, or a set named twice,
    makes the whole pool invalid: none of its devices is allocated, the others' pools serve."""
    lacking = consuming(gpu_device(1), "gpu-9", slices="1")
    cases = {
        "its pool n1 is invalid: device gpu-1 consumes counter set gpu-9, which it has not": (
            [partition(0, 8, 0), lacking],
            {"gpu-0": {"slices": "8", "memory": "80Gi"}},
        ),
        "its pool n1 is invalid: device gpu-1 consumes counter cores, not in set gpu-0": (
            [partition(0, 8, 0), consuming(gpu_device(1), "gpu-0", cores="1")],
            {"gpu-0": {"slices": "8", "memory": "80Gi"}},
        ),
    }
    for why, (devices, sets) in cases.items():
        published = [slice_obj("n1", devices, count=2), counter_slice_obj("n1", sets)]
        found = node_devices([parse_slice(s) for s in published], "n1", {})
        assert {d.unsupported for d in found.devices} == {why}
        other = slice_obj("n1", [gpu_device(5)], name="n1-other", driver="other.example.com")
        other["spec"]["pool"]["name"] = "other"
        node = ClaimNode(
            name="n1", devices=node_devices([*map(parse_slice, published), parse_slice(other)],
                                            "n1", {})
        )  # fmt: skip
        any_device = class_obj(PARTS, "true")
        decision = allocator(any_device).place(
            pod("ns/p", claim("c", request("g", 2, deviceClassName=PARTS))), [node], Usage()
        )
        assert decision.reasons == (
            "claim ns/c request g: 1 of 2 devices are in a valid pool on node n1",
        )
    twice = counter_slice_obj("n1", {"gpu-0": {"slices": "8"}})
    twice["metadata"]["name"] = "n1-counters-again"
    published = [
        slice_obj("n1", [partition(0, 8, 0)], count=3),
        counter_slice_obj("n1", {"gpu-0": {"slices": "8", "memory": "80Gi"}}, count=3),
        twice,
    ]
    twice["spec"]["pool"]["resourceSliceCount"] = 3
    found = node_devices([parse_slice(s) for s in published], "n1", {})
    assert (
        found.devices[0].unsupported == "its pool n1 is invalid: counter set gpu-0 is named twice"
    )


def test_nodes_whose_counters_differ_are_not_alike() -> None:
    """Two nodes with the same devices but different shared counters decide apart (a verdict
    kept for one is not moved to the other)."""
    small = partitioned_node("a", [partition(0, 4, 0), partition(0, 4, 1)])
    sets = {"gpu-0": {"slices": "4", "memory": "40Gi"}}
    published = [
        slice_obj("a", [partition(0, 4, 0), partition(0, 4, 1)], count=2),
        counter_slice_obj("a", sets),
    ]
    smaller = ClaimNode(
        name="b", devices=node_devices([parse_slice(s) for s in published], "a", {})
    )
    alloc = allocator(PARTS_CLASS)
    both = claim("c", sized("halves", 4, 2))
    assert alloc.place(pod("ns/c", both), [small, smaller], Usage()).node == "a"
    assert alloc.place(pod("ns/c", both), [smaller, small], Usage()).node == "a"
    assert alloc.place(pod("ns/c", both), [smaller], Usage()).node is None


def test_partitions_prefer_a_gpu_already_partitioned() -> None:
    """With the node's GPUs known, a partition goes to the GPU whose partitions are in use,
    keeping the other GPU whole."""
    inventory = NodeInventory(
        gpus=(make_gpu(0, 0), make_gpu(1, 0)),
        links=LinkMatrix.from_cells([["X", "NV4"], ["NV4", "X"]]),
        numa_nodes=make_numa([0], ["0-7"]),
        driver_version="1",
        cuda_driver_version=1,
    )
    devices = [partition(g, 8, 0) for g in range(2)]
    devices += [partition(g, 2, i) for g in range(2) for i in range(4)]
    node = partitioned_node("n1", devices, gpus=2, inventory=inventory)
    usage = Usage.of(
        [
            Allocation(
                devices=(AllocatedDevice(request="r", id=DeviceId(DRIVER, "n1", "gpu-1-2g-0")),)
            )
        ]
    )
    assert place(node, usage, sized("quarter", 2)) == ["gpu-1-2g-1"]
    assert place(node, usage, sized("whole", 8)) == ["gpu-0"]


# Property: random partitions of two GPUs, some held, and random claims; the allocator's answer
# is the first a first-fit oracle finds (every combination in node order, counters summed
# separately) and never takes more of a counter than is left.


@dataclass(frozen=True)
class Case:
    node: ClaimNode
    claims: tuple[ResourceClaim, ...]
    usage: Usage


@st.composite
def cases(draw: st.DrawFn) -> Case:
    objs = []
    for gpu in range(2):
        sizes = draw(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=5))
        for i, size in enumerate(sizes):
            objs.append(partition(gpu, size, i))
            if size == 8:
                objs[-1]["name"] = f"gpu-{gpu}-whole-{i}"
    node = partitioned_node("n1", objs, gpus=2)
    held = [
        AllocatedDevice(request="x", id=dev.id)
        for dev in node.devices.devices
        if draw(st.integers(0, 4)) == 0
    ]
    claims = []
    for c in range(draw(st.integers(1, 2))):
        requests = [
            sized(f"r{r}", draw(st.sampled_from([1, 2, 4, 8])), draw(st.integers(1, 2)))
            for r in range(draw(st.integers(1, 2)))
        ]
        claims.append(claim(f"c{c}", *requests))
    return Case(node, tuple(claims), Usage.of([Allocation(devices=tuple(held))]))


def _left(case: Case, taken: Sequence[Device]) -> dict[str, dict[str, Fraction]]:
    """Each GPU's counters after the held devices and `taken`, summed from scratch."""
    left = {
        name: dict(counters)
        for sets in case.node.devices.counters.values()
        for name, counters in sets
    }
    held = case.usage.exclusive
    for dev in [*(d for d in case.node.devices.devices if d.id in held), *taken]:
        for name, consumed in dev.consumes:
            for counter, amount in consumed:
                left[name][counter] -= amount
    return left


def first_fit(case: Case) -> list[DeviceId] | None:
    slots = [req.alternatives[0] for c in case.claims for req in c.spec.requests]
    free = [d for d in case.node.devices.devices if d.id not in case.usage.exclusive]

    def options(alt_size: int) -> list[Device]:
        return [d for d in free if d.attributes[f"{DRIVER}/size"] == alt_size]

    sizes = [int(a.selectors[0].rsplit("== ", 1)[1]) for a in slots]
    for answer in itertools.product(
        *(
            itertools.combinations(options(size), a.count)
            for size, a in zip(sizes, slots, strict=True)
        )
    ):
        taken = [d for devs in answer for d in devs]
        if len({d.id for d in taken}) < len(taken):
            continue
        if all(v >= 0 for counters in _left(case, taken).values() for v in counters.values()):
            return [d.id for d in taken]
    return None


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(cases())
def test_the_answer_is_first_fits_and_stays_within_the_counters(case: Case) -> None:
    decision = allocator(PARTS_CLASS).place(
        PodClaims(key="ns/p", claims=case.claims), [case.node], case.usage
    )
    expected = first_fit(case)
    assert (decision.node is not None) == (expected is not None)
    if expected is None:
        return
    got = [d.id for made in decision.claims for d in made.allocation.devices]
    assert got == expected
    by_id = {d.id: d for d in case.node.devices.devices}
    left = _left(case, [by_id[i] for i in got])
    assert all(v >= 0 for counters in left.values() for v in counters.values())


def _three_nodes() -> list[ClaimNode]:
    """n1 and n2 alike (one GPU: whole, two halves, four quarters); n3 the same devices with
    half the counters (4 slices): a class of its own."""
    devices = [partition(0, 8, 0), *(partition(0, 4, i) for i in range(2))]
    devices += [partition(0, 2, i) for i in range(4)]
    nodes = [partitioned_node(n, devices) for n in ("n1", "n2")]
    published = [
        slice_obj("n3", devices, count=2),
        counter_slice_obj("n3", {"gpu-0": {"slices": "4", "memory": "40Gi"}}),
    ]
    found = node_devices([parse_slice(s) for s in published], "n3", {})
    return [*nodes, ClaimNode(name="n3", devices=found)]


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from([2, 4, 8]), st.integers(1, 2)), min_size=1, max_size=8))
def test_kept_verdicts_decide_as_a_fresh_allocator_does_with_counters(
    pods: list[tuple[int, int]],
) -> None:
    """Pods placed in turn on one usage: the allocator that keeps verdicts (like nodes decided
    once, their picks moved) decides each as a fresh one does, and no node's counters go
    below 0."""
    nodes, usage = _three_nodes(), Usage()
    kept = allocator(PARTS_CLASS)
    for i, (size, count) in enumerate(pods):
        want = pod(f"ns/p{i}", claim(f"c{i}", sized("part", size, count)))
        got = kept.place(want, nodes, usage, explain=False)
        assert got == allocator(PARTS_CLASS).place(want, nodes, usage, explain=False)
        for made in got.claims:
            usage.add(made.allocation.devices)
    for node in nodes:
        left = counters_left(node.devices, lambda d: d in usage.exclusive)
        assert all(v >= 0 for sets in left.values() for c in sets.values() for v in c.values())
