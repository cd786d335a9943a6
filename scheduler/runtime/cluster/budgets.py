"""PodDisruptionBudgets (`policy/v1`) as the victim search reads them (DESIGN §11).

Each budget is read once per event: its namespace, its selector and `status.disruptionsAllowed`
(0 while the disruption controller has not processed its current spec: `observedGeneration`
below `generation`, as the Eviction API treats it). The pods it covers (same namespace, selector
matched; no selector covers nothing, `{}` every pod) are kept incrementally: a pod event checks
the few budgets of its namespace, a budget event its namespace's pods. A selector the scheduler
cannot read covers nothing and is logged once. Callers hold `cache.lock`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.objkey import ObjectKey, key_of
from scheduler.placement.request import LabelSelector
from scheduler.preemption import Budget
from scheduler.runtime.cluster.podinfo import PodInfo
from scheduler.runtime.cluster.podrules import label_selector

__all__ = ["BudgetBook"]

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]


def _allowed(obj: Obj) -> int:
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    if int(status.get("observedGeneration") or 0) < int(meta.get("generation") or 0):
        return 0
    return max(int(status.get("disruptionsAllowed") or 0), 0)


def _labels(info: PodInfo) -> Mapping[str, str]:
    return (info.obj.get("metadata") or {}).get("labels") or {}


@dataclass(slots=True)
class _Entry:
    namespace: str
    selector: LabelSelector | None
    allowed: int
    pods: set[ObjectKey]


class BudgetBook:
    def __init__(self) -> None:
        self._entries: dict[ObjectKey, _Entry] = {}
        self._by_namespace: dict[str, set[ObjectKey]] = {}
        self._budgets: tuple[Budget, ...] | None = ()  # None: changed since last built

    def replace(self, items: Iterable[Obj], pods: Iterable[PodInfo]) -> None:
        """A full list of budgets."""
        listed = list(items)
        for key in set(self._entries) - {key_of(o) for o in listed}:
            self._drop(key)
        everyone = list(pods)
        for obj in listed:
            self.apply("ADDED", obj, everyone)

    def apply(self, etype: str, obj: Obj, pods: Iterable[PodInfo]) -> None:
        """One budget event; `pods`: every pod the cache holds (scanned for its namespace)."""
        key = key_of(obj)
        if etype == "DELETED":
            self._drop(key)
            return
        namespace = str((obj.get("metadata") or {}).get("namespace") or "default")
        try:
            selector = label_selector((obj.get("spec") or {}).get("selector"), "spec.selector")
            allowed = _allowed(obj)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            log.warning("PodDisruptionBudget %s covers no pod here: %s", key, exc)
            selector, allowed = None, 0
        old = self._entries.get(key)
        if old is not None and old.selector == selector and old.namespace == namespace:
            if old.allowed != allowed:
                old.allowed, self._budgets = allowed, None
            return
        self._drop(key)
        covered = set()
        if selector is not None:
            covered = {
                p.key for p in pods if p.namespace == namespace and selector.matches(_labels(p))
            }
        self._entries[key] = _Entry(namespace, selector, allowed, covered)
        self._by_namespace.setdefault(namespace, set()).add(key)
        self._budgets = None

    def on_pod(self, key: ObjectKey, info: PodInfo | None, namespace: str) -> None:
        """A pod changed (None: deleted): the budgets of its namespace cover it or not."""
        for name in self._by_namespace.get(namespace, ()):
            entry = self._entries[name]
            covers = (
                info is not None
                and entry.selector is not None
                and entry.selector.matches(_labels(info))
            )
            if covers != (key in entry.pods):
                if covers:
                    entry.pods.add(key)
                else:
                    entry.pods.discard(key)
                self._budgets = None

    def budgets(self) -> tuple[Budget, ...]:
        """Every budget covering at least one pod, as the search reads them."""
        if self._budgets is None:
            self._budgets = tuple(
                Budget(name=name, allowed=e.allowed, pods=frozenset(e.pods))
                for name, e in sorted(self._entries.items())
                if e.pods
            )
        return self._budgets

    def keys(self) -> list[ObjectKey]:
        return list(self._entries)

    def _drop(self, key: ObjectKey) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._by_namespace.get(entry.namespace, set()).discard(key)
            self._budgets = None
