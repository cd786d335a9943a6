"""PodDisruptionBudgets as the victim search counts them, the stock scheduler's way.

Victim pods are taken in order; each pod a budget covers uses one of that budget's
`disruptionsAllowed`; a pod that finds a covering budget with none left violates it (a pod counts
once however many budgets it violates). In the reprieve, the pieces whose pods would violate a
budget are given back first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .model import Budget

__all__ = ["BudgetBook"]


class BudgetBook:
    """The budgets of one search, with each pod's covering budgets looked up once."""

    def __init__(self, budgets: Sequence[Budget]) -> None:
        self._budgets = tuple(b for b in budgets if b.pods)
        self._covering: dict[str, tuple[Budget, ...]] = {}

    def __bool__(self) -> bool:
        return bool(self._budgets)

    def covering(self, pod: str) -> tuple[Budget, ...]:
        found = self._covering.get(pod)
        if found is None:
            found = self._covering[pod] = tuple(b for b in self._budgets if pod in b.pods)
        return found

    def violations(self, pods: Iterable[str]) -> tuple[int, tuple[str, ...]]:
        """How many of `pods` (taken in this order) violate a budget, and the budgets' names."""
        left: dict[str, int] = {}
        names: set[str] = set()
        count = sum(self._take(pod, left, names) for pod in pods)
        return count, tuple(sorted(names))

    def violating(self, groups: Iterable[Iterable[str]]) -> list[bool]:
        """For pod groups taken in this order, whether each holds a pod that violates a budget."""
        left: dict[str, int] = {}
        names: set[str] = set()
        return [any([self._take(pod, left, names) for pod in pods]) for pods in groups]

    def _take(self, pod: str, left: dict[str, int], names: set[str]) -> bool:
        """Use one disruption of each budget covering `pod`; True when one had none left."""
        violated = False
        for budget in self.covering(pod):
            remaining = left.get(budget.name, budget.allowed)
            if remaining > 0:
                left[budget.name] = remaining - 1
            else:
                violated = True
                names.add(budget.name)
        return violated
