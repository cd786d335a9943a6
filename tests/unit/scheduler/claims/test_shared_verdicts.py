"""Nodes alike up to their pool names share one verdict (`verdicts._Likeness`), moved to their own
devices: on random node sets (a few device templates, each published by several nodes under their
own pools, with devices held and GPUs assumed by position), the decision an allocator gives a node
after deciding its look-alikes equals the one a fresh allocator computes for that node alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from random import Random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.gpuset import GpuSelector
from scheduler.claims.allocator import ClaimAllocator
from scheduler.claims.decision import ClaimNode, PodClaims
from scheduler.claims.model import AllocatedDevice, Allocation
from scheduler.claims.order import GpuMap
from scheduler.claims.parse import parse_claim, parse_slice
from scheduler.claims.slices import node_devices
from scheduler.claims.usage import Usage
from scheduler.claims.verdicts import NodeChanges
from scheduler.placement import Assignment, NodeState, PodRequest, Scoring, Snapshot
from scheduler.placement.scores import WeightedScore
from tests.builders.claims import (
    DRIVER,
    GIB,
    check_placed_as_fresh,
    claim_obj,
    classes,
    gpu_device,
    own_gpus,
    request,
    slice_obj,
    two_islands,
)

INVENTORY = two_islands()
SELECTOR = GpuSelector(INVENTORY.links, [g.numa_node for g in INVENTORY.gpus])
EXPRESSIONS = (
    f'device.attributes["{DRIVER}"].kind == "a"',
    f'device.attributes["{DRIVER}"].nvlinkIsland == 1',
    f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0',
)


@dataclass(frozen=True)
class NodeSet:
    nodes: tuple[ClaimNode, ...]
    usage: Usage


@st.composite
def templates(draw: st.DrawFn) -> list[dict[str, object]]:
    """Eight GPUs with random kinds, memory and sharing (odd GPUs only)."""
    return [
        gpu_device(
            g,
            nvlinkIsland=g // 4,
            kind=draw(st.sampled_from("ab")),
            shared=g % 2 == 1 and draw(st.booleans()),
            capacity={"memory": {"value": f"{draw(st.sampled_from([40, 80]))}Gi"}},
        )
        for g in range(8)
    ]


@st.composite
def node_sets(draw: st.DrawFn) -> NodeSet:
    """Up to six nodes from one or two templates; each holds one of a few sets of positions
    (shared devices: 8Gi taken), with its GPUs assumed on its state when it has one; every node
    has its own (equal) link matrix, and the one GPU selector or its own."""
    kinds = [draw(templates()) for _ in range(draw(st.integers(1, 2)))]
    with_state, extra, given = draw(st.booleans()), draw(st.booleans()), draw(st.booleans())
    nodes, held = [], []
    for i in range(draw(st.integers(2, 6))):
        name = f"node-{i}"
        objs = kinds[draw(st.integers(0, len(kinds) - 1))]
        slices = [parse_slice(slice_obj(name, objs))]
        if extra:
            slices.append(parse_slice(_extra_pool(name)))
        found = node_devices(slices, name, {})
        used = draw(st.sampled_from([(), (0,), (0, 1), (5,), (1, 4, 6)]))
        for g in used:
            dev = found.devices[g]
            taken = (
                {f"{DRIVER}/memory": Fraction(8 * GIB)} if dev.allow_multiple_allocations else {}
            )
            held.append(
                AllocatedDevice(
                    request="x", id=dev.id, share_id="s" if taken else None, consumed=taken
                )
            )
        state = None
        if with_state:
            alloc = {"cpu": 64_000, "memory": 1 << 40, "pods": 110, "nvidia.com/gpu": 8}
            layout = two_islands()  # its own link matrix, equal to the others'
            state = NodeState.from_inventory(name, layout, allocatable=alloc, selector=SELECTOR)
            if used:
                want = PodRequest(key=f"ns/held-{i}", gpus=len(used))
                state.add_pod(want, Assignment(node=name, gpus=tuple(used)))
        selector = SELECTOR if given else None  # else each map makes its own
        gpus = GpuMap.build(two_islands(), found.devices, selector=selector)
        nodes.append(ClaimNode(name=name, devices=found, gpus=gpus, state=state))
    return NodeSet(tuple(nodes), Usage.of([Allocation(devices=tuple(held))]))


def _extra_pool(node: str) -> dict[str, object]:
    """A second pool of the node (`<node>-more`, sorted after its own), whose devices have the
    names of the first ones: two GPUs not in the inventory and one more `gpu-0` there."""
    obj = slice_obj(node, [gpu_device(8), gpu_device(9)], name=f"{node}-more")
    spec = obj["spec"]
    assert isinstance(spec, dict)
    spec["pool"] = {"name": f"{node}-more", "generation": 1, "resourceSliceCount": 1}
    for device, name in zip(spec["devices"], ("gpu-0", "gpu-1"), strict=True):
        device["name"] = name
    return obj


@st.composite
def pods(draw: st.DrawFn) -> PodClaims:
    """One claim of one or two requests: a count or all, an optional selector and memory asked,
    and an optional constraint over the island."""
    requests = []
    for r in range(draw(st.integers(1, 2))):
        exactly: dict[str, object] = {"deviceClassName": "gpu.gputopo.io"}
        if draw(st.integers(0, 5)) == 0:
            exactly["allocationMode"] = "All"
        else:
            exactly["count"] = draw(st.integers(1, 4))
        chosen = draw(st.lists(st.sampled_from(EXPRESSIONS), max_size=1))
        if chosen:
            exactly["selectors"] = [{"cel": {"expression": e}} for e in chosen]
        if draw(st.booleans()):
            exactly["capacity"] = {"requests": {"memory": f"{draw(st.sampled_from([8, 40]))}Gi"}}
        requests.append({"name": f"r{r}", "exactly": exactly})
    kind = draw(st.sampled_from(["none", "matchAttribute", "distinctAttribute"]))
    constraints = [] if kind == "none" else [{kind: f"{DRIVER}/nvlinkIsland"}]
    return PodClaims(
        key="ns/p", claims=(parse_claim(claim_obj("c", *requests, constraints=constraints)),)
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(node_sets(), pods())
def test_a_shared_verdict_equals_the_one_the_node_computes_alone(
    found: NodeSet, pod: PodClaims
) -> None:
    shared = ClaimAllocator(classes())
    for node in found.nodes:
        got = shared.place(pod, [node], found.usage, explain=False)
        alone = ClaimAllocator(classes()).place(pod, [node], found.usage, explain=False)
        assert got == alone
        for made in got.claims:
            assert {d.id.pool for d in made.allocation.devices} <= {
                p for _d, p in node.devices.pools
            }


def _like_nodes(names: list[str], *, with_state: bool = True) -> list[ClaimNode]:
    """Nodes of `two_islands` GPUs, each GPU with a UUID of its own (in the node's inventory and
    its device), as real GPUs have: alike to every expression that does not read the UUID."""
    nodes = []
    for name in names:
        devices, inventory = own_gpus(name)
        found = node_devices([parse_slice(slice_obj(name, devices))], name, {})
        gpus = GpuMap.build(inventory, found.devices, selector=SELECTOR)
        state = None
        if with_state:
            state = NodeState.from_inventory(name, INVENTORY, allocatable={}, selector=SELECTOR)
        nodes.append(ClaimNode(name=name, devices=found, gpus=gpus, state=state))
    return nodes


def test_a_like_node_gets_its_own_devices_and_a_busier_one_is_not_alike() -> None:
    """node-a is decided first; node-b (alike) answers from it with its own devices; once node-b
    holds a GPU the nodes differ, and the next pod goes to node-b's GPU 1 (binpack)."""
    a, b = _like_nodes(["node-a", "node-b"])
    allocator = ClaimAllocator(classes())
    want = PodClaims(
        key="ns/p",
        claims=(
            parse_claim(
                claim_obj("c", {"name": "g", "exactly": {"deviceClassName": "gpu.gputopo.io"}})
            ),
        ),
    )
    usage = Usage()
    allocator.place(want, [a], usage)
    on_b = allocator.place(want, [b], usage)
    assert [d.id for d in on_b.claims[0].allocation.devices] == [b.devices.devices[0].id]
    usage.add(on_b.claims[0].allocation.devices)
    assert b.state is not None
    b.state.add_pod(PodRequest(key="ns/p", gpus=1), Assignment(node="node-b", gpus=on_b.gpus))
    second = allocator.place(want, [a, b], usage)
    assert second.node == "node-b"
    assert second.gpus == (1,)


NAMES = ("node-a", "node-ab", "node-b", "node-c", "node-ca", "node-d")
"""Names where one is the start of another: ties go to the lowest name, as `max` over keys gave."""


@st.composite
def runs(draw: st.DrawFn) -> tuple[int, bool, list[tuple[str, int, int]]]:
    """A node count, whether nodes have states, and steps: ("pod"/"past", GPUs, selector: none,
    an island, or the GPUs of one node by their UUIDs) or ("load"/"unload", node, 0)."""
    count, with_state = draw(st.integers(2, len(NAMES))), draw(st.booleans())
    pod = st.tuples(
        st.sampled_from(["pod", "pod", "past"]),
        st.sampled_from([1, 1, 2, 8]),
        st.sampled_from([0, 0, 1, 3, 4]),
    )
    load = st.tuples(st.sampled_from(["load", "unload"]), st.integers(0, count - 1), st.just(0))
    return count, with_state, draw(st.lists(st.one_of(pod, pod, load), min_size=1, max_size=40))


def _gpu_pod(key: str, gpus: int, selector: int) -> PodClaims:
    """A pod of `gpus` GPUs; `selector` 1 or 2: of island 0 or 1; 3 or more: of the node
    `NAMES[selector - 3]` (by the UUIDs `_like_nodes` gives)."""
    exactly: dict[str, object] = {"deviceClassName": "gpu.gputopo.io", "count": gpus}
    if selector:
        expression = f'device.attributes["{DRIVER}"].nvlinkIsland == {selector - 1}'
        if selector >= 3:
            prefix = f"GPU-{NAMES[selector - 3]}-"
            expression = f'device.attributes["{DRIVER}"].uuid.startsWith("{prefix}")'
        exactly["selectors"] = [{"cel": {"expression": expression}}]
    return PodClaims(
        key=key, claims=(parse_claim(claim_obj(key[3:], {"name": "g", "exactly": exactly})),)
    )


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs())
def test_kept_verdicts_of_many_shapes_decide_as_a_fresh_allocator_on_changing_states(
    run: tuple[int, bool, list[tuple[str, int, int]]],
) -> None:
    """One allocator for the run (likenesses kept for every shape, a heap per node list, picks
    moved only for the chosen node) against a fresh one per pod, while pods of several shapes
    take devices and other pods load and unload the nodes' states (a GPU the claims do not see:
    the scores change, `Usage` does not); "past" decides (and applies nothing) on a copy of the
    usage made before an earlier pod, as a gang's what-if does, and a trial allocator alike the
    kept one (its likenesses shared) decides it on an empty usage, as a victim search's trial
    does, equal to a fresh allocator there."""
    count, with_state, steps = run
    nodes = _like_nodes(list(NAMES[:count]), with_state=with_state)
    kept, usage = ClaimAllocator(classes()), Usage()
    trial, empty = ClaimAllocator(classes(), alike=kept), Usage()
    copies = [usage.copy()]
    for i, (kind, value, selector) in enumerate(steps):
        if kind == "past":
            want = _gpu_pod(f"ns/p{i}", value, selector)
            past = copies[i % len(copies)]
            tried = trial.place(want, nodes, empty, explain=False)  # the trial first
            assert tried == ClaimAllocator(classes()).place(want, nodes, empty, explain=False)
            got = kept.place(want, nodes, past, explain=False)
            assert got == ClaimAllocator(classes()).place(want, nodes, past, explain=False)
            continue
        if kind != "pod":
            state = nodes[value].state
            if state is None:
                continue
            free = state.free_whole_gpus()
            if kind == "load" and free:  # a pod the claims do not see holds a GPU
                held = PodRequest(key=f"ns/other-{i}", cpu_milli=500, gpus=1)
                state.add_pod(held, Assignment(node=state.name, gpus=(free[-1],)))
            elif state.pods:
                state.remove_pod(sorted(state.pods)[0])
            continue
        want = _gpu_pod(f"ns/p{i}", value, selector)
        check_placed_as_fresh(kept, want, nodes, usage)
        copies.append(usage.copy())


def test_an_older_copy_of_the_usage_is_decided_on_its_own_devices() -> None:
    """Pods in a row on one `Usage` are scanned from its changes; a copy made before them still
    holds gpu-0 free, and a pod decided on it gets gpu-0 again, as a fresh allocator gives."""
    nodes = _like_nodes(["node-a", "node-b"], with_state=False)
    kept, usage = ClaimAllocator(classes()), Usage()
    before = usage.copy()
    taken = [
        check_placed_as_fresh(kept, _gpu_pod(f"ns/p{i}", 1, 0), nodes, usage) for i in range(3)
    ]
    assert [d.id.device for got in taken for d in got.claims[0].allocation.devices] == [
        "gpu-0",
        "gpu-1",
        "gpu-2",
    ]
    again = kept.place(_gpu_pod("ns/again", 1, 0), nodes, before, explain=False)
    assert [d.id.device for d in again.claims[0].allocation.devices] == ["gpu-0"]


class ForgetfulLog:
    """A `Snapshot`'s change log that, when told to, no longer remembers (`changed_since` gives
    None), as a snapshot does once the generation asked for is older than it keeps."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot, self.forgets = snapshot, False

    @property
    def generation(self) -> int:
        return self.snapshot.generation

    def changed_since(self, generation: int) -> list[str] | None:
        return None if self.forgets else self.snapshot.changed_since(generation)


_: NodeChanges = ForgetfulLog(Snapshot())


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs(), st.lists(st.booleans(), min_size=40, max_size=40))
def test_verdicts_kept_by_the_snapshots_change_log_decide_as_a_fresh_allocator(
    run: tuple[int, bool, list[tuple[str, int, int]]], forgets: list[bool]
) -> None:
    """As above, with the nodes' states in a `Snapshot` (loads assumed and forgotten through it)
    whose change log is given to `place`: only the nodes it names are looked at again, and when
    it no longer remembers (drawn per step) every node is compared again; "past" decides a gang
    of two such pods (and applies nothing)."""
    count, with_state, steps = run
    nodes = _like_nodes(list(NAMES[:count]), with_state=with_state)
    snapshot = Snapshot([n.state for n in nodes if n.state is not None])
    log, kept, usage = ForgetfulLog(snapshot), ClaimAllocator(classes()), Usage()
    for i, (kind, value, selector) in enumerate(steps):
        log.forgets = forgets[i]
        state = nodes[value].state if kind in ("load", "unload") else None
        if state is not None:
            free = state.free_whole_gpus()
            if kind == "load" and free:
                held = PodRequest(key=f"ns/other-{i}", cpu_milli=500, gpus=1)
                snapshot.assume(held, Assignment(node=state.name, gpus=(free[-1],)))
            elif state.pods:
                snapshot.forget(sorted(state.pods)[0])
        if kind == "past":
            gang = [_gpu_pod(f"ns/g{i}-{k}", value, selector) for k in range(2)]
            fresh = ClaimAllocator(classes()).place_gang(gang, nodes, usage)
            assert kept.place_gang(gang, nodes, usage, changes=log) == fresh
        if kind != "pod":
            continue
        want = _gpu_pod(f"ns/p{i}", value, selector)
        got = kept.place(want, nodes, usage, explain=False, changes=log)
        assert got == ClaimAllocator(classes()).place(want, nodes, usage, explain=False)
        if got.node is not None:
            for made in got.claims:
                usage.add(made.allocation.devices)
            if with_state:
                request = PodRequest(key=want.key, gpus=len(got.gpus))
                snapshot.assume(request, Assignment(node=got.node, gpus=got.gpus))


def _name_score(_pod: PodRequest, node: NodeState, _assignment: Assignment) -> float:
    """A score that is not shipped: it reads the node's name (the last letter, higher wins)."""
    return float(ord(node.name[-1]))


def test_a_score_that_is_not_shipped_decides_every_node_afresh() -> None:
    """Under a score that reads node names, nodes alike in every device and state are not
    alike: the pod goes to the node the score likes best (node-c), not to the first name."""
    nodes = _like_nodes(["node-a", "node-b", "node-c"])
    scoring = Scoring(scores=(WeightedScore("name", 1.0, _name_score),), candidate_limit=0)
    allocator = ClaimAllocator(classes(), scoring=scoring)
    usage = Usage()
    first = allocator.place(_gpu_pod("ns/p0", 1, 0), nodes, usage, explain=False)
    assert first.node == "node-c"
    for made in first.claims:
        usage.add(made.allocation.devices)
    second = allocator.place(_gpu_pod("ns/p1", 1, 0), nodes, usage, explain=False)
    assert (second.node, [d.id.device for d in second.claims[0].allocation.devices]) == (
        "node-c",
        ["gpu-1"],
    )


def test_a_shape_scanned_rarely_is_decided_as_a_fresh_allocator_after_many_moves() -> None:
    """Three nodes whose states load and unload at random (through the snapshot, whose log is
    given), a 1-GPU pod decided after most steps and a 2-GPU pod of island 1 after few: the
    nodes change class hundreds of times, far more than a list's log of moves keeps, so the
    rare shape's view often finds the log cleared since its last scan; every decision equals a
    fresh allocator's."""
    rng = Random(7)
    nodes = _like_nodes(["node-a", "node-b", "node-c"])
    snapshot = Snapshot([n.state for n in nodes if n.state is not None])
    kept, usage = ClaimAllocator(classes()), Usage()
    decided = set()
    for i in range(600):
        state = rng.choice([n.state for n in nodes if n.state is not None])
        free = state.free_whole_gpus()
        if free and (not state.pods or rng.random() < 0.5):
            held = PodRequest(key=f"ns/other-{i}", cpu_milli=500, gpus=1)
            snapshot.assume(held, Assignment(node=state.name, gpus=(rng.choice(free),)))
        elif state.pods:
            snapshot.forget(rng.choice(sorted(state.pods)))
        want = _gpu_pod(f"ns/p{i}", 2, 2) if rng.random() < 0.1 else _gpu_pod(f"ns/p{i}", 1, 0)
        got = kept.place(want, nodes, usage, explain=False, changes=snapshot)
        assert got == ClaimAllocator(classes()).place(want, nodes, usage, explain=False)
        decided.add(got.node)
    assert decided == {"node-a", "node-b", "node-c"}


@st.composite
def large_specs(draw: st.DrawFn) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """The requests and constraints of a claim most node sets cannot serve: 3 to 9 GPUs, some
    of one kind or island, some within one island."""
    chosen = draw(st.lists(st.sampled_from(EXPRESSIONS), max_size=1))
    constraints: list[dict[str, object]] = []
    if draw(st.booleans()):
        constraints.append({"matchAttribute": f"{DRIVER}/nvlinkIsland"})
    return [request("r0", draw(st.integers(3, 9)), *chosen)], constraints


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(node_sets(), large_specs(), st.integers(1, 4), st.booleans())
def test_the_nearest_misses_asked_for_are_the_first_of_every_nodes_misses(
    found: NodeSet,
    spec: tuple[list[dict[str, object]], list[dict[str, object]]],
    shown: int,
    shipped: bool,
) -> None:
    """Asked for the nearest `shown` misses (the scheduler's refusal message), an allocator
    gives the first `shown` of every node's misses, nearest first, and how many others there
    are; a second pod of the same shape, refused on the same nodes, is told its own claim's
    misses (the nearest nodes kept for the shape), and once the first node's devices are all
    held the misses are found again. With a score that is not shipped (no classes kept), the
    same."""
    requests, constraints = spec
    scoring = None
    if not shipped:
        scoring = Scoring(scores=(WeightedScore("name", 1.0, _name_score),), candidate_limit=0)
    kept = ClaimAllocator(classes(), scoring=scoring)
    busier = found.usage.copy()  # then every device of the first node held
    free = [d for d in found.nodes[0].devices.devices if busier.is_free(d)]
    busier.add([AllocatedDevice(request="x", id=d.id) for d in free])
    for name, usage in (("c", found.usage), ("d", found.usage), ("c", busier)):
        claim = parse_claim(claim_obj(name, *requests, constraints=constraints))
        pod = PodClaims(key=f"ns/p-{name}", claims=(claim,))
        every = ClaimAllocator(classes(), scoring=scoring).place(pod, found.nodes, usage)
        got = kept.place(pod, found.nodes, usage, shown=shown)
        if every.node is not None:
            assert got == every
            continue
        assert got.reasons == every.reasons[:shown]
        assert got.unshown == len(every.reasons) - len(got.reasons)
        assert all(f"ns/{name}" in text for text in got.reasons if text != "no nodes")


def test_a_claim_of_one_gpu_by_its_uuid_is_not_decided_on_a_like_node() -> None:
    """node-a and node-b differ only in their GPUs' UUIDs: a plain pod decided first makes them
    one class; a claim of node-b's gpu-5 by its UUID is decided on its own and gets it."""
    nodes = _like_nodes(["node-a", "node-b"])
    allocator, usage = ClaimAllocator(classes()), Usage()
    plain = allocator.place(_gpu_pod("ns/plain", 1, 0), nodes, usage)
    assert plain.node == "node-a"
    expression = f'device.attributes["{DRIVER}"].uuid == "GPU-node-b-gpu-5"'
    exactly = {
        "deviceClassName": "gpu.gputopo.io",
        "selectors": [{"cel": {"expression": expression}}],
    }
    want = PodClaims(
        key="ns/one", claims=(parse_claim(claim_obj("one", {"name": "g", "exactly": exactly})),)
    )
    got = allocator.place(want, nodes, usage)
    assert got.node == "node-b"
    assert [d.id.device for d in got.claims[0].allocation.devices] == ["gpu-5"]


def test_nodes_that_differ_in_an_attribute_a_constraint_reads_are_not_alike() -> None:
    """node-a's GPUs in four groups of two by `group`, node-b's all in one: a claim of four GPUs
    that must match in `group` misses on node-a and gets node-b's (no selector reads `group`,
    the constraint does)."""
    nodes = []
    for name, group in (("node-a", lambda g: g // 2), ("node-b", lambda g: 0)):
        devices = [
            gpu_device(g, nvlinkIsland=g // 4, numaNode=g // 4, group=group(g)) for g in range(8)
        ]
        found = node_devices([parse_slice(slice_obj(name, devices))], name, {})
        nodes.append(ClaimNode(name=name, devices=found))
    exactly = {"deviceClassName": "gpu.gputopo.io", "count": 4}
    claim = claim_obj(
        "four",
        {"name": "g", "exactly": exactly},
        constraints=[{"matchAttribute": f"{DRIVER}/group"}],
    )
    got = ClaimAllocator(classes()).place(
        PodClaims(key="ns/four", claims=(parse_claim(claim),)), nodes, Usage()
    )
    assert got.node == "node-b"
