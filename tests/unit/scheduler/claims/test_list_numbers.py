"""A node list's number (`Verdicts.list_number`): the same nodes in the same order keep their
number however the list is given (the very tuple again, an equal tuple, a list), and other
nodes or another order never get it; a list seen before gets its number back."""

from __future__ import annotations

from scheduler.claims.verdicts import Verdicts
from scheduler.placement import default_scoring
from tests.builders.claims import claim_node, island_devices


def test_a_list_keeps_its_number_however_it_is_given_and_no_other_list_gets_it() -> None:
    a, b, c = (claim_node(n, island_devices()) for n in ("a", "b", "c"))
    verdicts = Verdicts(default_scoring())
    first = (a, b)
    number = verdicts.list_number(first)
    assert verdicts.list_number(first) == number  # the very tuple: known by identity
    assert verdicts.list_number((a, b)) == number  # an equal tuple
    assert verdicts.list_number([a, b]) == number  # an equal list
    others = {verdicts.list_number(nodes) for nodes in ((b, a), (a, c), (a, b, c), (a,))}
    assert number not in others
    assert len(others) == 4
    assert verdicts.list_number(first) == number  # seen before: its number back
    same_name = claim_node("a", island_devices())  # another view of a node named a
    assert verdicts.list_number((same_name, b)) not in others | {number}
