"""`NodeSlots`' records: the log of slots in the order they changed, and the ids of the keys
(static shapes, states) slots are in."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["ChangeLog", "Interner"]

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
        self._users: dict[K, int] = {}
        self._idle: dict[K, None] = {}  # keys without users, oldest first
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
            self._users[key] = self._users.get(key, 0) + 1
            self._idle.pop(key, None)
        if previous is not None:
            self._users[previous] -= 1
            if not self._users[previous]:
                del self._users[previous]
                self._idle[previous] = None
                if len(self._idle) > self._keep:
                    oldest = next(iter(self._idle))
                    del self._idle[oldest], self._ids[oldest]
        return found
