"""Invariants of claim allocation, on random devices and claims (Hypothesis).

- every allocation satisfies every selector (class and request) and every constraint, with the
  right count per request;
- nothing is allocated twice, and shared capacity is never exceeded (with what was held before);
- with no topology preference the answer is the first a first-fit allocator finds (an oracle
  written separately: every combination in node order, checked whole), and it exists exactly
  when the oracle finds one; with a topology preference an answer exists exactly then too;
- the decision is deterministic;
- pods placed in turn on one `Usage` (each decision added to it), and a gang's members, never
  take a device twice nor more of a shared device's capacity than is left, all together.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.model import LinkMatrix, NodeInventory
from scheduler.claims.allocator import ClaimAllocator
from scheduler.claims.decision import ClaimNode, PodClaims, PodDecision
from scheduler.claims.model import (
    AllocatedDevice,
    Allocation,
    Alternative,
    ClaimKey,
    Device,
    DeviceId,
    ResourceClaim,
)
from scheduler.claims.order import GpuMap
from scheduler.claims.parse import parse_claim, parse_slice
from scheduler.claims.search import applies
from scheduler.claims.selectors import Selectors
from scheduler.claims.slices import NodeDevices, node_devices
from scheduler.claims.usage import Usage
from scheduler.placement import NodeState
from tests.builders.claims import (
    DRIVER,
    GIB,
    check_placed_as_fresh,
    claim_obj,
    classes,
    gpu_device,
    slice_obj,
)
from tests.builders.topology import make_gpu, make_numa

SELECTORS = (
    f'device.attributes["{DRIVER}"].kind == "a"',
    f'device.attributes["{DRIVER}"].numa == 0',
    f'device.capacity["{DRIVER}"].memory.compareTo(quantity("16Gi")) >= 0',
)
ATTRS = (f"{DRIVER}/island", f"{DRIVER}/numa")


@dataclass(frozen=True)
class Case:
    devices: tuple[Device, ...]
    claims: tuple[ResourceClaim, ...]
    usage: Usage
    inventory: NodeInventory


@st.composite
def cases(draw: st.DrawFn) -> Case:
    n = draw(st.integers(3, 7))
    objs = []
    for g in range(n):
        shared = draw(st.booleans()) and g % 2 == 1
        memory = draw(st.sampled_from([8, 16, 40]))
        objs.append(
            gpu_device(
                g,
                island=draw(st.integers(0, 2)),
                numa=draw(st.integers(0, 1)),
                kind=draw(st.sampled_from("ab")),
                shared=shared,
                capacity={"memory": {"value": f"{memory}Gi"}},
            )
        )
    devices = node_devices([parse_slice(slice_obj("n1", objs))], "n1", {}).devices
    held = []
    for dev in devices:
        if draw(st.integers(0, 4)) == 0:
            consumed = (
                {f"{DRIVER}/memory": Fraction(8 * GIB)} if dev.allow_multiple_allocations else {}
            )
            held.append(
                AllocatedDevice(
                    request="x", id=dev.id, share_id="s" if consumed else None, consumed=consumed
                )
            )
    claims = tuple(draw(claims_of(i)) for i in range(draw(st.integers(1, 2))))
    return Case(devices, claims, Usage.of([Allocation(devices=tuple(held))]), _inventory(n))


@st.composite
def claims_of(draw: st.DrawFn, index: int) -> ResourceClaim:
    requests = []
    for r in range(draw(st.integers(1, 2 - index))):
        exactly: dict[str, object] = {
            "deviceClassName": "gpu.gputopo.io",
            "count": draw(st.integers(1, 2)),
        }
        chosen = draw(st.lists(st.sampled_from(SELECTORS), max_size=1))
        if chosen:
            exactly["selectors"] = [{"cel": {"expression": e}} for e in chosen]
        if draw(st.booleans()):
            exactly["capacity"] = {"requests": {"memory": f"{draw(st.sampled_from([4, 8, 16]))}Gi"}}
        requests.append({"name": f"r{r}", "exactly": exactly})
    constraints = []
    kind = draw(st.sampled_from(["none", "matchAttribute", "distinctAttribute"]))
    if kind != "none":
        constraints.append({kind: draw(st.sampled_from(ATTRS))})
    return parse_claim(claim_obj(f"c{index}", *requests, constraints=constraints))


def _inventory(n: int) -> NodeInventory:
    cells = [
        ["X" if a == b else "NV4" if a // 2 == b // 2 else "SYS" for b in range(n)]
        for a in range(n)
    ]
    return NodeInventory(
        gpus=tuple(make_gpu(i, i % 2) for i in range(n)),
        links=LinkMatrix.from_cells(cells),
        numa_nodes=make_numa([0, 1], ["0-3", "4-7"]),
        driver_version="1",
        cuda_driver_version=1,
    )


def decide(case: Case, topology: bool) -> PodDecision:
    node = ClaimNode(
        name="n1",
        devices=NodeDevices(node="n1", devices=case.devices),
        gpus=GpuMap.build(case.inventory, case.devices) if topology else None,
    )
    return ClaimAllocator(classes()).place(_pod(case), [node], case.usage)


def _pod(case: Case) -> PodClaims:
    return PodClaims(key="ns/p", claims=case.claims)


def check_valid(case: Case, decision: PodDecision) -> None:
    """Selectors, counts, constraints, no device twice, capacity never exceeded."""
    sel = Selectors()
    by_id = {d.id: d for d in case.devices}
    cls = classes()["gpu.gputopo.io"]
    exclusive: list[DeviceId] = []
    consumed: dict[DeviceId, Fraction] = {}
    for made in decision.claims:
        results = made.allocation.devices
        for req in made.claim.spec.requests:
            alt = req.alternatives[0]
            mine = [r for r in results if r.request == alt.name]
            assert len(mine) == alt.count
            for res in mine:
                dev = by_id[res.id]
                assert all(sel.matches(e, dev) for e in (*cls.selectors, *alt.selectors))
        for con in made.claim.spec.constraints:
            attr = con.match_attribute or con.distinct_attribute or ""
            values = [by_id[r.id].attributes[attr] for r in results if applies(con, r.request)]
            assert len(set(values)) == (1 if con.match_attribute else len(values)) or not values
        for res in results:
            if res.consumed:
                consumed[res.id] = (
                    consumed.get(res.id, Fraction(0)) + res.consumed[f"{DRIVER}/memory"]
                )
            else:
                exclusive.append(res.id)
    assert len(exclusive) == len(set(exclusive))
    assert not set(exclusive) & case.usage.exclusive
    assert not set(exclusive) & set(case.usage.consumed)
    for dev_id, amount in consumed.items():
        assert amount <= case.usage.left(by_id[dev_id], f"{DRIVER}/memory")


def first_fit(case: Case) -> list[tuple[str, str, DeviceId]] | None:
    """The oracle: requests in order, device combinations in node order, each answer checked."""
    sel = Selectors()
    cls = classes()["gpu.gputopo.io"]
    slots = [(c, req.alternatives[0]) for c in case.claims for req in c.spec.requests]

    def options(alt: Alternative) -> list[Device]:
        exprs = (*cls.selectors, *alt.selectors)
        return [d for d in case.devices if all(sel.matches(e, d) for e in exprs)]

    for answer in itertools.product(
        *(itertools.combinations(options(a), a.count) for _c, a in slots)
    ):
        if _ok(case, slots, answer):
            return [
                (str(c.key), a.name, d.id)
                for (c, a), devs in zip(slots, answer, strict=True)
                for d in devs
            ]
    return None


def _ok(
    case: Case,
    slots: Sequence[tuple[ResourceClaim, Alternative]],
    answer: Sequence[Sequence[Device]],
) -> bool:
    taken: set[DeviceId] = set()
    left: dict[DeviceId, Fraction] = {}
    for (_claim, alt), devs in zip(slots, answer, strict=True):
        want = alt.capacity.get("memory")
        for dev in devs:
            cap = dev.capacity[f"{DRIVER}/memory"].value
            if not dev.allow_multiple_allocations:
                if (
                    dev.id in taken
                    or not case.usage.is_free(dev)
                    or (want is not None and cap < want)
                ):
                    return False
                taken.add(dev.id)
                continue
            room = left.get(dev.id, case.usage.left(dev, f"{DRIVER}/memory"))
            need = cap if want is None else want
            if need > room:
                return False
            left[dev.id] = room - need
    for claim in case.claims:
        for con in claim.spec.constraints:
            attr = con.match_attribute or con.distinct_attribute or ""
            vals = [
                d.attributes[attr]
                for (c, a), devs in zip(slots, answer, strict=True)
                if c is claim and applies(con, a.name)
                for d in devs
            ]
            if len(set(vals)) != (1 if con.match_attribute and vals else len(vals)):
                return False
    return True


SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(cases())
def test_first_fit_answer_equals_the_oracle_and_is_valid(case: Case) -> None:
    decision = decide(case, topology=False)
    expected = first_fit(case)
    got = [
        (str(c.claim.key), d.request, d.id) for c in decision.claims for d in c.allocation.devices
    ]
    assert (decision.node is not None) == (expected is not None)
    if expected is not None:
        assert got == expected
        check_valid(case, decision)


@SETTINGS
@given(cases())
def test_topology_answer_is_valid_exists_when_first_fit_does_and_is_deterministic(
    case: Case,
) -> None:
    decision = decide(case, topology=True)
    assert (decision.node is not None) == (first_fit(case) is not None)
    if decision.node is not None:
        check_valid(case, decision)
    assert decide(case, topology=True) == decision


@st.composite
def pod_sequences(draw: st.DrawFn) -> list[tuple[int, str | None]]:
    """(GPUs, selector or None) per pod."""
    selector = st.sampled_from([None, SELECTORS[1], f'device.attributes["{DRIVER}"].island == 1'])
    return draw(st.lists(st.tuples(st.integers(1, 4), selector), min_size=1, max_size=12))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod_sequences(), st.booleans())
def test_kept_verdicts_decide_as_a_fresh_allocator_does(
    pods: list[tuple[int, str | None]], with_state: bool
) -> None:
    """The memoised path (one allocator for the run) against a fresh allocator per pod."""
    inventory = _inventory(4)
    objs = [gpu_device(g, island=g // 2, numa=g % 2, kind="a") for g in range(4)]
    nodes = []
    for name in ("n1", "n2", "n3"):
        found = node_devices([parse_slice(slice_obj(name, objs))], name, {})
        state = NodeState.from_inventory(name, inventory, allocatable={}) if with_state else None
        nodes.append(
            ClaimNode(
                name=name, devices=found, gpus=GpuMap.build(inventory, found.devices), state=state
            )
        )
    kept = ClaimAllocator(classes())
    usage = Usage()
    for i, (size, sel) in enumerate(pods):
        want = PodClaims(
            key=f"ns/p{i}",
            claims=(
                parse_claim(
                    claim_obj(
                        f"c{i}",
                        {
                            "name": "g",
                            "exactly": {
                                "deviceClassName": "gpu.gputopo.io",
                                "count": size,
                                **({"selectors": [{"cel": {"expression": sel}}]} if sel else {}),
                            },
                        },
                    )
                ),
            ),
        )
        check_placed_as_fresh(kept, want, nodes, usage)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(1, 4), min_size=1, max_size=6), st.integers(0, 7), st.booleans())
def test_a_gang_is_all_or_none_and_takes_no_device_twice(
    sizes: list[int], held_count: int, share_one: bool
) -> None:
    objs = [gpu_device(g, island=g // 4, numa=g // 4, kind="a") for g in range(8)]
    found = node_devices([parse_slice(slice_obj("n1", objs))], "n1", {})
    node = ClaimNode(name="n1", devices=found)
    held = Usage.of(
        [
            Allocation(
                devices=tuple(
                    AllocatedDevice(request="x", id=found.devices[g].id) for g in range(held_count)
                )
            )
        ]
    )
    shared = parse_claim(
        claim_obj("shared", {"name": "g", "exactly": {"deviceClassName": "gpu.gputopo.io"}})
    )
    pods = []
    for i, size in enumerate(sizes):
        own = parse_claim(
            claim_obj(
                f"c{i}",
                {"name": "g", "exactly": {"deviceClassName": "gpu.gputopo.io", "count": size}},
            )
        )
        pods.append(PodClaims(key=f"ns/p{i}", claims=(own, shared) if share_one else (own,)))
    decision = ClaimAllocator(classes()).place_gang(pods, [node], held)
    needed = sum(sizes) + (1 if share_one else 0)
    assert decision.placed == (needed <= 8 - held_count)
    if not decision.placed:
        assert decision.pods == ()
        assert decision.reasons
        return
    new = [c for p in decision.pods for c in p.claims if c.new]
    taken = [d.id for c in new for d in c.allocation.devices]
    assert len(taken) == len(set(taken)) == needed
    assert not set(taken) & held.exclusive
    assert len(decision.pods) == len(sizes)


@st.composite
def pod_runs(draw: st.DrawFn) -> tuple[Case, list[tuple[ResourceClaim, ...]], bool]:
    """A node's devices and what is held there (`cases`), a second node like it, pods of one or
    two claims each (their own), and whether the nodes have GPU maps (topology order)."""
    case = draw(cases())
    pods = []
    for j in range(draw(st.integers(1, 5))):
        claims = tuple(draw(claims_of(i)) for i in range(draw(st.integers(1, 2))))
        pods.append(
            tuple(replace(c, key=ClaimKey(c.key.namespace, f"p{j}-{c.key.name}")) for c in claims)
        )
    return case, pods, draw(st.booleans())


def _two_nodes(case: Case, topology: bool) -> list[ClaimNode]:
    twin = tuple(replace(d, id=DeviceId(d.id.driver, "n2", d.id.device)) for d in case.devices)
    return [
        ClaimNode(
            name=name,
            devices=NodeDevices(node=name, devices=devices),
            gpus=GpuMap.build(case.inventory, devices) if topology else None,
        )
        for name, devices in (("n1", case.devices), ("n2", twin))
    ]


def check_together(
    nodes: Sequence[ClaimNode], held: Usage, decisions: Sequence[PodDecision]
) -> None:
    """Across every pod: no device exclusively twice (nor one held before, nor one shared),
    a pod's devices on its node, and a shared device's capacity never exceeded."""
    by_id = {d.id: d for n in nodes for d in n.devices.devices}
    exclusive: list[DeviceId] = []
    consumed: dict[DeviceId, Fraction] = {}
    for decision in decisions:
        for made in decision.claims:
            assert made.allocation.node == decision.node
            for res in made.allocation.devices:
                assert res.id.pool == decision.node
                if res.consumed:
                    amount = res.consumed[f"{DRIVER}/memory"]
                    consumed[res.id] = consumed.get(res.id, Fraction(0)) + amount
                else:
                    exclusive.append(res.id)
    assert len(exclusive) == len(set(exclusive))
    assert not set(exclusive) & (held.exclusive | set(held.consumed) | set(consumed))
    for dev_id, amount in consumed.items():
        assert amount <= held.left(by_id[dev_id], f"{DRIVER}/memory")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod_runs())
def test_pods_placed_in_turn_on_one_usage_never_share_a_device_or_overfill_one(
    run: tuple[Case, list[tuple[ResourceClaim, ...]], bool],
) -> None:
    """One allocator and one `Usage` for a run of pods, each decision added to it as the runtime
    does: every allocation valid when made, and all of them together too."""
    case, pods, topology = run
    nodes = _two_nodes(case, topology)
    allocator = ClaimAllocator(classes())
    usage = case.usage.copy()
    decisions = []
    for j, claims in enumerate(pods):
        before = usage.copy()
        decision = allocator.place(PodClaims(key=f"ns/p{j}", claims=claims), nodes, usage)
        if decision.node is None:
            assert decision.reasons
            continue
        devices = tuple(d for n in nodes for d in n.devices.devices)
        check_valid(Case(devices, claims, before, case.inventory), decision)
        for made in decision.claims:
            usage.add(made.allocation.devices)
        decisions.append(decision)
    check_together(nodes, case.usage, decisions)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod_runs())
def test_a_gang_of_random_claims_is_all_or_none_and_valid_together(
    run: tuple[Case, list[tuple[ResourceClaim, ...]], bool],
) -> None:
    """A gang of random claims on two nodes: all or none; when placed, each member's claims
    valid on their own and all of them together (no device twice, no capacity exceeded)."""
    case, pods, topology = run
    nodes = _two_nodes(case, topology)
    members = [PodClaims(key=f"ns/p{j}", claims=claims) for j, claims in enumerate(pods)]
    decision = ClaimAllocator(classes()).place_gang(members, nodes, case.usage)
    if not decision.placed:
        assert decision.pods == ()
        assert decision.reasons
        return
    assert [p.node is not None for p in decision.pods] == [True] * len(members)
    check_together(nodes, case.usage, decision.pods)
    devices = tuple(d for n in nodes for d in n.devices.devices)
    for member, got in zip(members, decision.pods, strict=True):
        check_valid(Case(devices, member.claims, case.usage, case.inventory), got)
