"""A victim search never evicts for a unit where a starvation hold will keep it from starting:
a hold gives way to a reclaim on its nodes, not to a preemption of its priority
(`find_victims_where_it_may_start`, `Nominations.held_from`)."""

from __future__ import annotations

from scheduler.placement import PodRequest
from scheduler.preemption import (
    Nominations,
    PreemptionSettings,
    Preemptor,
    find_victims_where_it_may_start,
)
from scheduler.preemption.model import Eviction, NoChoice, VictimChoice, VictimReason

U = Preemptor(key="u", pods=(PodRequest(key="u", gpus=2),), leaf="a", priority=1)


def _choice(node: str, reason: VictimReason) -> VictimChoice:
    return VictimChoice(
        evictions=(Eviction(unit="v", pods=("v",), reason=reason),), nodes={"u": node}
    )


class _Search:
    """A search that places U on the first of `nodes` it may use; records what it excluded."""

    def __init__(self, nodes: list[str], reason: VictimReason = VictimReason.PREEMPT) -> None:
        self.nodes, self.reason = nodes, reason
        self.excluded: list[frozenset[str]] = []

    def __call__(self, u: Preemptor) -> VictimChoice | NoChoice:
        self.excluded.append(frozenset(u.excluded))
        for node in self.nodes:
            if node not in u.excluded:
                return _choice(node, self.reason)
        return NoChoice(reason="no victims")


def test_a_preemption_on_a_held_node_is_searched_again_off_it() -> None:
    search = _Search(["held", "free"])
    found = find_victims_where_it_may_start(U, frozenset({"held"}), search)
    assert isinstance(found, VictimChoice)
    assert dict(found.nodes) == {"u": "free"}
    assert search.excluded == [frozenset(), frozenset({"held"})]
    only_held = _Search(["held"])
    assert isinstance(find_victims_where_it_may_start(U, frozenset({"held"}), only_held), NoChoice)


def test_a_reclaim_may_take_a_held_node_and_no_hold_costs_one_search() -> None:
    reclaim = _Search(["held", "free"], VictimReason.RECLAIM)
    found = find_victims_where_it_may_start(U, frozenset({"held"}), reclaim)
    assert isinstance(found, VictimChoice)
    assert dict(found.nodes) == {"u": "held"}  # the hold gives way to it
    assert len(reclaim.excluded) == 1
    plain = _Search(["held", "free"])
    find_victims_where_it_may_start(U, frozenset(), plain)
    assert len(plain.excluded) == 1


def test_held_from_names_the_nodes_of_other_units_holds_of_at_least_its_priority() -> None:
    book = Nominations()
    settings = PreemptionSettings()
    assert book.hold("big", 1, {"b0": "n1"}, 8000, now=0.0, settings=settings)
    book.nominate("other", 5, {"o0": "n2"}, (), 0.0)
    assert book.held_from(1, "u") == frozenset({"n1"})  # a nomination is not a hold
    assert book.held_from(2, "u") == frozenset()  # a lower hold keeps a higher unit from nothing
    assert book.held_from(1, "big") == frozenset()  # its own
