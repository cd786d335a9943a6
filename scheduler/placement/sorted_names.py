"""`SortedNames`: distinct node names kept in ascending order under adds and removals.

The snapshot's candidate index (`Snapshot.candidates`) keeps one bucket of names per key, and a
bucket is walked in name order. The bucket of idle 8-GPU nodes holds most of a big cluster's
nodes, and a plain sorted list shifts half of them on every insert or removal (tens of
thousands of pointers per decision at 40,000 nodes). Here the names sit in sorted blocks of at
most `2 * block` names, found by their first names: an add or a removal shifts one block.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator

__all__ = ["SortedNames"]

BLOCK = 512
"""Names per block after a split (a block splits in two once it holds more than twice this)."""


class SortedNames:
    """Distinct names in ascending order: `add`, `remove`, `len` and iteration in order."""

    def __init__(self, block: int = BLOCK) -> None:
        self._block = max(1, block)
        self._blocks: list[list[str]] = []
        self._firsts: list[str] = []  # each block's first name, ascending
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[str]:
        for block in self._blocks:
            yield from block

    def add(self, name: str) -> None:
        """Insert `name`, which must not be here yet."""
        if not self._blocks:
            self._blocks.append([name])
            self._firsts.append(name)
            self._count = 1
            return
        i = max(0, bisect_right(self._firsts, name) - 1)
        block = self._blocks[i]
        insort(block, name)
        self._firsts[i] = block[0]
        self._count += 1
        if len(block) > 2 * self._block:
            half = len(block) // 2
            self._blocks[i : i + 1] = [block[:half], block[half:]]
            self._firsts[i : i + 1] = [block[0], block[half]]

    def remove(self, name: str) -> None:
        """Take `name` out; KeyError when it is not here."""
        i = bisect_right(self._firsts, name) - 1
        block = self._blocks[i] if i >= 0 else []
        j = bisect_left(block, name)
        if j == len(block) or block[j] != name:
            raise KeyError(name)
        del block[j]
        self._count -= 1
        if block:
            self._firsts[i] = block[0]
        else:
            del self._blocks[i]
            del self._firsts[i]
