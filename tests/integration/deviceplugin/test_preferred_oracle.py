"""GetPreferredAllocation over real gRPC agrees with a brute-force oracle of the §4 objective.

The oracle reads the raw `topo -m` cells and NUMA nodes straight from the fixture file (not through
the model or the placement code) and tries every candidate set: most NVLinks summed over the pairs,
then the smallest summed PCIe distance (PIX 1, PXB 2, PHB 3, NODE 4, SYS 5), then the fewest NUMA
nodes (an unknown NUMA node counts as one more), then the lowest sorted indices.
"""

from __future__ import annotations

import random
from importlib import resources
from itertools import combinations

import pytest
import yaml

from tests.builders.kubelet import running_node

PCIE = {"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5}
CASES = 200


def raw_fixture(name: str) -> tuple[list[list[str]], list[int]]:
    text = resources.files("agent.nvml").joinpath("fixtures", f"{name}.yaml").read_text()
    doc = yaml.safe_load(text)
    return doc["topology"], [g["numaNode"] for g in doc["gpus"]]


def oracle(cells, numa, available, must, size):
    def key(combo):
        nv = pcie = 0
        for a, b in combinations(combo, 2):
            cell = cells[a][b]
            if cell.startswith("NV"):
                nv += int(cell[2:])
            else:
                pcie += PCIE[cell]
        numas = len({numa[g] if numa[g] >= 0 else "unknown" for g in combo})
        return (-nv, pcie, numas, combo)

    rest = sorted(set(available) - set(must))
    best = None
    for extra in combinations(rest, size - len(must)):
        combo = tuple(sorted((*must, *extra)))
        k = key(combo)
        if best is None or k < best:
            best = k
    return None if best is None else best[3]


@pytest.mark.parametrize("fixture", ["dgx-1p", "pcie-8x-no-nvlink", "pcie-16x-nvlink-pairs"])
def test_preferred_allocation_matches_the_brute_force_oracle(fixture: str) -> None:
    cells, numa = raw_fixture(fixture)
    n = len(cells)
    rng = random.Random(f"oracle-{fixture}")
    with running_node(fixture) as node:
        uuids = [node.uuid(i) for i in range(n)]
        index = {u: i for i, u in enumerate(uuids)}
        for _ in range(CASES):
            available = sorted(rng.sample(range(n), rng.randint(2, n)))
            size = rng.randint(1, min(len(available), 8))
            must = sorted(rng.sample(available, rng.randint(0, min(2, size))))
            want = oracle(cells, numa, available, must, size)
            got = node.kubelet.preferred(
                "nvidia.com/gpu", [uuids[i] for i in available], [uuids[i] for i in must], size
            )
            case = f"{fixture}: available={available} must={must} size={size}"
            assert tuple(sorted(index[u] for u in got)) == want, case
