"""The NRT GPU cost encoding: `100 - k` for k NVLinks, `100 + topology level` otherwise."""

from __future__ import annotations

import pytest

from agent.model import GpuLink, TopoLevel
from agent.nrt.decode import decode
from agent.nrt.wire import gpu_cost, link_of_cost
from tests.builders.claims import two_islands
from tests.builders.nrt import make_nrt


@pytest.mark.parametrize(
    ("link", "cost"),
    [
        pytest.param(GpuLink(nvlinks=18), 82, id="NV18"),
        pytest.param(GpuLink(nvlinks=1), 99, id="NV1"),
        pytest.param(GpuLink(level=TopoLevel.PIX), 110, id="PIX"),
        pytest.param(GpuLink(level=TopoLevel.NODE), 140, id="NODE"),
        pytest.param(GpuLink(level=TopoLevel.SYS), 150, id="SYS"),
    ],
)
def test_cost_round_trip(link, cost) -> None:
    assert gpu_cost(link) == cost
    assert link_of_cost(cost) == link


@pytest.mark.parametrize("cost", [0, 100, 105, 151, -3])
def test_cost_no_link_encodes_to(cost) -> None:
    with pytest.raises(ValueError, match=f"not a gputopo GPU cost: {cost} "):
        link_of_cost(cost)


def test_nodes_decoded_apart_share_their_link_cells() -> None:
    """Two nodes' NRTs of one layout decode to equal link matrices whose cells are the same
    objects: comparing them (the claims' and placement's classes of like nodes do, node by
    node) then costs an identity check a cell."""
    first = decode(make_nrt("n1", two_islands())).inventory.links
    second = decode(make_nrt("n2", two_islands())).inventory.links
    assert first is not second
    assert first == second
    assert all(
        a is b
        for row_a, row_b in zip(first.rows, second.rows, strict=True)
        for a, b in zip(row_a, row_b, strict=True)
    )
