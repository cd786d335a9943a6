"""`select_gpus` (DESIGN §4 objective) against a brute-force oracle, and `pack_shared`."""

from __future__ import annotations

import itertools
import random
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.gpuset import GpuSelector, SharedSlot, objective, pack_shared, select_gpus
from agent.model import GpuLink, LinkMatrix, TopoLevel
from tests.builders.placement import links, random_links


def oracle(
    matrix: LinkMatrix,
    numa: list[int | None],
    available: list[int],
    must: list[int],
    size: int,
) -> tuple[int, ...] | None:
    """Every combination, ranked by (-NVLinks, PCIe, NUMA nodes, sorted indices)."""
    must_set = set(must)
    rest = sorted(set(available) - must_set)
    if size < len(must_set) or size - len(must_set) > len(rest):
        return None
    best = None
    for extra in itertools.combinations(rest, size - len(must_set)):
        chosen = tuple(sorted(must_set | set(extra)))
        nv, pc, nm = objective(matrix, numa, chosen)
        key = (-nv, pc, nm, chosen)
        if best is None or key < best:
            best = key
    return None if best is None else best[3]


def dgx1_like() -> LinkMatrix:
    """Two 4-GPU NVLink quads (NV2 inside, NV1 cross pairs), PCIe SYS otherwise."""
    cells = [["X"] * 8 for _ in range(8)]
    for a in range(8):
        for b in range(8):
            if a == b:
                continue
            if a // 4 == b // 4:
                cells[a][b] = "NV2"
            elif a % 4 == b % 4:
                cells[a][b] = "NV1"
            else:
                cells[a][b] = "SYS"
    return LinkMatrix.from_cells(cells)


NUMA8: list[int | None] = [0, 0, 0, 0, 1, 1, 1, 1]


@pytest.mark.parametrize(
    ("matrix", "available", "must", "size", "expected"),
    [
        pytest.param(
            links("nvswitch"), range(8), [], 4, (0, 1, 2, 3), id="nvswitch: lowest indices"
        ),
        pytest.param(
            links("nvswitch"), [1, 2, 5, 6, 7], [3], 4, (1, 2, 3, 5), id="must-include kept"
        ),
        pytest.param(links("pairs"), [0, 2, 3, 5], [], 2, (2, 3), id="NVLink pair beats lower idx"),
        pytest.param(links("pcie"), [1, 2, 4, 5], [], 2, (4, 5), id="PIX pair beats NODE pair"),
        pytest.param(links("pcie"), [0, 3, 4], [], 2, (0, 3), id="same NUMA beats SYS"),
        pytest.param(dgx1_like(), range(8), [], 4, (0, 1, 2, 3), id="DGX-1 quad"),
        pytest.param(dgx1_like(), [0, 1, 4, 5, 6], [], 3, (4, 5, 6), id="DGX-1 whole triple"),
        pytest.param(links("nvswitch"), range(8), [], 0, (), id="size 0"),
        pytest.param(links("nvswitch"), [0, 1], [], 3, None, id="too few GPUs"),
        pytest.param(links("nvswitch"), range(8), [1, 2], 1, None, id="must larger than size"),
        pytest.param(links("nvswitch"), [0, 9], [], 1, None, id="index outside matrix"),
    ],
)
def test_select_gpus_table(matrix, available, must, size, expected):
    assert select_gpus(matrix, NUMA8, list(available), must, size) == expected


def test_fewest_numa_nodes_breaks_pcie_ties():
    # Every pair is SYS: NVLink and PCIe sums tie, so the NUMA count decides.
    cells = [["X" if a == b else "SYS" for b in range(4)] for a in range(4)]
    numa: list[int | None] = [0, 1, 0, 1]
    assert select_gpus(LinkMatrix.from_cells(cells), numa, [0, 1, 2, 3], [], 2) == (0, 2)


def test_unknown_numa_counts_as_one_node_of_its_own():
    cells = [["X" if a == b else "SYS" for b in range(4)] for a in range(4)]
    numa: list[int | None] = [0, None, None, 1]
    assert objective(LinkMatrix.from_cells(cells), numa, (1, 2)) == (0, 5, 1)
    assert select_gpus(LinkMatrix.from_cells(cells), numa, [0, 1, 2, 3], [], 2) == (1, 2)


@pytest.mark.parametrize(
    ("gpus", "share", "trials"),
    [
        pytest.param(8, 0.0, 60, id="8 GPUs, PCIe only"),
        pytest.param(8, 0.4, 60, id="8 GPUs, mixed"),
        pytest.param(8, 1.0, 40, id="8 GPUs, all NVLink"),
        pytest.param(16, 0.3, 12, id="16 GPUs, mixed"),
        pytest.param(16, 0.0, 12, id="16 GPUs, PCIe only"),
    ],
)
def test_select_gpus_matches_brute_force(gpus, share, trials):
    rng = random.Random(gpus * 1000 + int(share * 10))
    for _ in range(trials):
        matrix = random_links(gpus, rng, share)
        numa = [rng.choice([0, 1, None]) for _ in range(gpus)]
        available = [g for g in range(gpus) if rng.random() < 0.85]
        must = rng.sample(available, rng.randint(0, min(2, len(available))))
        size = rng.choice([len(must), min(gpus, len(must) + 1), 4, gpus // 2, gpus - 2])
        got = select_gpus(matrix, numa, available, must, size)
        assert got == oracle(matrix, numa, available, must, size), (available, must, size)


def test_sixteen_choose_eight_is_fast():
    rng = random.Random(7)
    numa: list[int | None] = [g // 8 for g in range(16)]
    worst = 0.0
    for share in (0.0, 0.3, 1.0):
        matrix = random_links(16, rng, share)
        start = time.perf_counter()
        result = select_gpus(matrix, numa, range(16), [], 8)
        worst = max(worst, time.perf_counter() - start)
        assert result is not None
        assert len(result) == 8
    # Milliseconds on an idle core; generous so a loaded CI machine does not flake.
    assert worst < 0.25


def test_selector_memoises_and_agrees_with_function():
    matrix = random_links(8, random.Random(3), 0.4)
    sel = GpuSelector(matrix, NUMA8)
    first = sel.select([0, 1, 2, 3, 4, 5], [2], 3)
    assert first == sel.select([0, 1, 2, 3, 4, 5], [2], 3)
    assert first == select_gpus(matrix, NUMA8, [0, 1, 2, 3, 4, 5], [2], 3)
    assert sel.objective_of(first or ()) == objective(matrix, NUMA8, first or ())


def test_selector_rejects_numa_list_of_wrong_length():
    with pytest.raises(ValueError, match="numa_of has 3 entries for a 8-GPU"):
        GpuSelector(links("nvswitch"), [0, 0, 0])


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    avail_bits=st.integers(0, 255),
    must_bits=st.integers(0, 255),
    size=st.integers(0, 8),
)
def test_select_gpus_properties(seed, avail_bits, must_bits, size):
    matrix = random_links(8, random.Random(seed), 0.3)
    available = [g for g in range(8) if avail_bits >> g & 1]
    must = [g for g in range(8) if must_bits >> g & 1]
    got = select_gpus(matrix, NUMA8, available, must, size)
    again = select_gpus(matrix, NUMA8, list(reversed(available)), list(reversed(must)), size)
    assert got == again  # deterministic, order of the inputs irrelevant
    possible = len(must) <= size <= len(set(available) | set(must))
    assert (got is not None) == possible
    if got is not None:
        assert len(got) == size
        assert set(must) <= set(got) <= set(available) | set(must)
        assert list(got) == sorted(got)


def test_nvlink_pair_costs_no_pcie_distance():
    link = GpuLink(nvlinks=4, level=TopoLevel.SYS)
    assert link.pcie_distance == 0


# -- pack_shared -------------------------------------------------------------------------------
SLOTS = [
    SharedSlot("a0", 0, 0),
    SharedSlot("a1", 0, 0),
    SharedSlot("b0", 1, 0),
    SharedSlot("c0", 2, 1),
    SharedSlot("c1", 2, 1),
]


@pytest.mark.parametrize(
    ("must", "size", "used", "expected"),
    [
        pytest.param([], 1, set(), ("a0",), id="idle cluster: lowest GPU"),
        pytest.param([], 1, {2}, ("c0",), id="pack onto the busy GPU"),
        pytest.param([], 2, set(), ("a0", "b0"), id="replicas spread over GPUs"),
        pytest.param(["c1"], 2, set(), ("c1", "a0"), id="must first, then next GPU"),
        pytest.param(["b0"], 3, {2}, ("b0", "c0", "a0"), id="busy GPU before NUMA"),
        pytest.param([], 6, set(), (), id="not enough slots"),
        pytest.param(["zz"], 1, set(), (), id="unknown must-include"),
    ],
)
def test_pack_shared_table(must, size, used, expected):
    assert pack_shared(SLOTS, must, size, used) == expected


def test_pack_shared_prefers_numa_of_first_pick():
    slots = [SharedSlot("x", 0, 0), SharedSlot("y", 1, 1), SharedSlot("z", 2, 0)]
    assert pack_shared(slots, ["x"], 2, set()) == ("x", "z")
