"""`NodeSlots`' records: the log of slots in the order they changed, the ids of the keys
(static shapes, states) slots are in, and the slots in each state."""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Sequence
from typing import Generic, TypeVar, cast

import numpy as np
import numpy.typing as npt

__all__ = ["ChangeLog", "Interner", "StateMembers"]

IntArray = npt.NDArray[np.int64]

K = TypeVar("K", bound=Hashable)


class ChangeLog:
    """Slots in the order they changed; positions count every entry ever appended."""

    def __init__(self) -> None:
        self._slots: list[int] = []
        self._base = 0  # positions before this one were dropped

    def append(self, slot: int) -> None:
        self._slots.append(slot)

    @property
    def position(self) -> int:
        """The log's end: a class decided now has seen every change up to here."""
        return self._base + len(self._slots)

    def changed_after(self, seen: int) -> list[int] | None:
        """Slots changed after position `seen`; None when that part of the log is gone (then
        every slot must be looked at)."""
        if seen < self._base:
            return None
        return sorted(set(self._slots[seen - self._base :]))

    def trim(self, kept: int) -> None:
        """Drop the older half once more than `kept` entries are held."""
        if len(self._slots) > kept:
            cut = len(self._slots) // 2
            del self._slots[:cut]
            self._base += cut


class Interner(Generic[K]):
    """Ids for the keys slots are in (an id is never given to another key). A key no slot is
    in is kept a while (the last `idle` of them), so a node that leaves a state and comes back
    (assume, then forget) finds its id, and the verdicts cached for it, again."""

    def __init__(self, idle: int) -> None:
        self._ids: dict[K, int] = {}
        self._users: dict[int, int] = {}  # by id: a key (a tuple) is hashed once per `take`
        self._idle: dict[int, K] = {}  # ids without users, oldest first, and their keys
        self._keep = idle
        self._next = 0

    def __len__(self) -> int:
        return len(self._ids)

    def take(self, key: K | None, previous: K | None) -> int:
        """The id of `key` for a slot that was in `previous` (None: in nothing / leaving)."""
        found = -1
        if key is not None:
            found = self._ids.get(key, -1)
            if found < 0:
                found = self._ids[key] = self._next
                self._next += 1
            self._users[found] = self._users.get(found, 0) + 1
            self._idle.pop(found, None)
        if previous is not None:
            left = self._ids[previous]
            self._users[left] -= 1
            if not self._users[left]:
                del self._users[left]
                self._idle[left] = previous
                if len(self._idle) > self._keep:
                    oldest = next(iter(self._idle))
                    del self._ids[self._idle.pop(oldest)]
        return found


class StateMembers:
    """The slots in each state a slot is in, and a dense row per such state (`rows`: per slot,
    -1 where no node is), kept up to date by `move` (a bisection per change): a pod class
    evaluates one verdict per live state and spreads it to the slots with one gather over
    `rows`, instead of a pass over every slot. A row freed when its state's last slot leaves is
    reused. A row's slots are kept in node-name order (`names`: the node name per slot, read
    when a slot moves, which it does before it leaves its name), so each row names its first
    slot by name (`first_slots`: a class reads a state's verdict there), and the best slots of
    many states come from the states' heads (`best_slots`), not from a pass over the slots."""

    def __init__(self, names: Sequence[str | None]) -> None:
        self.rows: IntArray = np.zeros(0, dtype=np.int64)
        self._names = cast("Sequence[str]", names)  # read only at slots that hold a node
        self._name = self._names.__getitem__
        self._row: dict[int, int] = {}  # state id -> row
        self._members: list[list[int]] = []  # row -> the slots in its state, by node name,
        # after `_heads[row]` entries of slots that left from the front (dropped in one go
        # once they are half: nodes mostly leave a state in name order, the idle one above all,
        # and a list's front is not taken out one by one, which moves all the rest each time)
        self._heads: list[int] = []
        self._states: list[int] = []  # row -> state id (-1: row free)
        self._first: list[int] = []  # row -> its first slot by name (-1: row free)
        self._first_array: IntArray = np.full(1, -1, dtype=np.int64)  # the same, then -1s
        self._sizes: IntArray = np.zeros(1, dtype=np.int64)  # row -> its slots, then 0s
        self._free: list[int] = []

    @property
    def row_count(self) -> int:
        """Rows in use or free: arrays indexed by row are this long (plus one for -1)."""
        return len(self._states)

    def grow(self, capacity: int) -> None:
        """Room for `capacity` slots (new slots hold no node)."""
        extra = capacity - len(self.rows)
        if extra > 0:
            self.rows = np.concatenate((self.rows, np.full(extra, -1, dtype=np.int64)))

    def move(self, slot: int, before: int, after: int) -> None:
        """Slot `slot` left state `before` for state `after` (-1: none)."""
        if before == after:
            return
        if before >= 0:
            self._leave(slot, self._row[before])
        if after < 0:
            self.rows[slot] = -1
            return
        row = self._row.get(after, -1)
        if row < 0:
            row = self._free.pop() if self._free else self._new_row()
            self._states[row], self._row[after] = after, row
        members, head = self._members[row], self._heads[row]
        at = bisect.bisect_left(members, self._name(slot), lo=head, key=self._name)
        if at == head and head:
            self._heads[row] = at = head - 1
            members[at] = slot
        else:
            members.insert(at, slot)
        self._sizes[row] += 1
        if at == self._heads[row]:
            self._name_first(row, slot)
        self.rows[slot] = row

    def _leave(self, slot: int, row: int) -> None:
        members, head = self._members[row], self._heads[row]
        at = bisect.bisect_left(members, self._name(slot), lo=head, key=self._name)
        first = at == head
        if first:
            head += 1
            if 2 * head > len(members):
                del members[:head]
                head = 0
            self._heads[row] = head
        else:
            del members[at]
        self._sizes[row] -= 1
        if head == len(members):
            members.clear()
            self._heads[row] = 0
            del self._row[self._states[row]]
            self._states[row] = -1
            self._name_first(row, -1)
            self._free.append(row)
        elif first:
            self._name_first(row, members[head])

    def _new_row(self) -> int:
        row = len(self._states)
        self._states.append(-1)
        self._members.append([])
        self._heads.append(0)
        self._first.append(-1)
        if len(self._first_array) < row + 2:
            grown = np.full(2 * (row + 2), -1, dtype=np.int64)
            grown[: len(self._first_array)] = self._first_array
            self._first_array = grown
            sizes = np.zeros(len(grown), dtype=np.int64)
            sizes[: len(self._sizes)] = self._sizes
            self._sizes = sizes
        return row

    def _name_first(self, row: int, slot: int) -> None:
        self._first[row] = slot
        self._first_array[row] = slot

    def first_slots(self) -> IntArray:
        """Per row, its first slot by name (-1: a free row), then -1 (for `rows`' -1)."""
        return self._first_array[: len(self._states) + 1]

    def best_slots(self, level: IntArray, count: int) -> list[int]:
        """The `count` slots first by (their row's `level`, node name), in no order; `level`
        per row as `first_slots` gives them (the last for no row). The rows by level, their
        sizes summed to find the level where `count` is reached: every row before it whole,
        and the first names of that level's rows: O(rows + count × the rows of that level),
        not O(slots). Fewer when the rows run out."""
        order = np.argsort(level, kind="stable")
        reached = np.cumsum(self._sizes[: len(level)][order])
        if not len(order) or reached[-1] <= count:
            return self._rows_slots(order)
        cut = int(np.searchsorted(reached, count))  # the first row by level that reaches it
        ranked = level[order]
        start = int(np.searchsorted(ranked, ranked[cut], side="left"))
        stop = int(np.searchsorted(ranked, ranked[cut], side="right"))
        taken = self._rows_slots(order[:start])
        need = count - len(taken)
        heads = self._rows_slots(order[start:stop], need)
        taken.extend(heads if stop - start == 1 else sorted(heads, key=self._name)[:need])
        return taken

    def _rows_slots(self, rows: IntArray, limit: int | None = None) -> list[int]:
        """The slots of rows `rows` (row indices, or the last: of no node), the first `limit`
        by name of each, in no order: the rows of one slot by one gather of their first slots
        (`first_slots`; most rows a rebuild reads hold one node), the others one by one."""
        if limit is not None and limit < 1:
            return []
        sizes = self._sizes[rows]
        taken: list[int] = self._first_array[rows[sizes == 1]].tolist()
        for row in rows[sizes > 1].tolist():
            taken.extend(self._row_slots(row, limit))
        return taken

    def _row_slots(self, row: int, limit: int | None = None) -> list[int]:
        """Row `row`'s slots by name, the first `limit` of them (none for the row of no node)."""
        if row >= len(self._members):
            return []
        head = self._heads[row]
        return self._members[row][head : None if limit is None else head + limit]

    def live(self) -> list[tuple[int, int, int]]:
        """(state id, row, its first slot by name) for each state some slot is in."""
        return [
            (state, row, first)
            for row, (state, first) in enumerate(zip(self._states, self._first, strict=True))
            if state >= 0
        ]
