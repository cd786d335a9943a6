"""`SortedNames` (the snapshot's candidate index buckets) holds what a sorted list of distinct
names would: the same names, in order, the same length, through adds, removals and splits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.placement.sorted_names import SortedNames

NAMES = st.text(alphabet="abc0123", min_size=1, max_size=4)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), NAMES), max_size=200), st.integers(1, 4))
def test_adds_and_removals_keep_the_names_a_sorted_list_keeps(
    steps: list[tuple[bool, str]], block: int
) -> None:
    names = SortedNames(block)
    expected: list[str] = []
    for adding, name in steps:
        if adding and name not in expected:
            names.add(name)
            expected.append(name)
        elif not adding and name in expected:
            names.remove(name)
            expected.remove(name)
        assert list(names) == sorted(expected)
        assert len(names) == len(expected)


def test_removing_a_name_not_there_raises_key_error() -> None:
    names = SortedNames(2)
    for name in ("n1", "n3", "n5", "n7", "n9"):
        names.add(name)
    for missing in ("n0", "n4", "n8", "z"):
        with pytest.raises(KeyError):
            names.remove(missing)
    assert list(names) == ["n1", "n3", "n5", "n7", "n9"]
