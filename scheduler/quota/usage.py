"""What each queue's subtree uses: the requests of the pods charged to its leaves.

Usage is derived from pods, never stored elsewhere: the runtime charges every pod of this
scheduler that is bound or assumed (and not finished) to its leaf, and `rebuild` recounts after
the tree changed. Pure bookkeeping; the caller serialises access.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

from scheduler.quota.amounts import Amounts, add_into
from scheduler.quota.spec import ROOT
from scheduler.quota.tree import QuotaTree

__all__ = ["Changes", "Charge", "Usage"]

Charge = tuple[str, Amounts]  # (leaf queue, amounts)


@dataclass(slots=True)
class Changes:
    """Queues whose usage rose (`up`) or fell (`down`) since the watcher last emptied these."""

    up: set[str] = field(default_factory=set)
    down: set[str] = field(default_factory=set)


class Usage:
    def __init__(self, tree: QuotaTree) -> None:
        self.tree = tree
        self._charges: dict[Hashable, Charge] = {}
        self._used: dict[str, dict[str, int]] = {}
        self._watchers: list[Changes] = []
        self.version = 0

    def watch(self) -> Changes:
        """Where usage rises and falls from now on (the watcher empties the sets)."""
        changes = Changes()
        self._watchers.append(changes)
        return changes

    def used(self, queue: str) -> Mapping[str, int]:
        """What `queue`'s subtree uses (`root`: everything charged)."""
        return self._used.get(queue, {})

    def charge(self, key: Hashable, charge: Charge | None) -> None:
        """Set what `key` (a pod) uses: `charge`, or nothing when None."""
        old = self._charges.get(key)
        if old == charge:
            return
        if old is not None:
            self._apply(old, -1)
            del self._charges[key]
        if charge is not None:
            self._charges[key] = charge
            self._apply(charge, 1)
        self.version += 1

    def charged(self, key: Hashable) -> Charge | None:
        return self._charges.get(key)

    def rebuild(self, tree: QuotaTree, leaf_of: Mapping[Hashable, str | None]) -> None:
        """Recount under `tree`; `leaf_of` gives each charged key's leaf now (None: uncharged)."""
        old = self._charges
        self.tree, self._charges, self._used = tree, {}, {}
        for changes in self._watchers:
            changes.up.update(tree.specs)
            changes.down.update(tree.specs)
        for key, (_, amounts) in old.items():
            leaf = leaf_of.get(key)
            if leaf is not None:
                self.charge(key, (leaf, amounts))
        self.version += 1

    def _apply(self, charge: Charge, sign: int) -> None:
        leaf, amounts = charge
        path = self.tree.paths.get(leaf, ())
        for queue in (*path, ROOT):
            add_into(self._used.setdefault(queue, {}), amounts, sign)
        for changes in self._watchers:
            (changes.up if sign > 0 else changes.down).update(path)
