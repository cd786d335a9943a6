"""Queues in the scheduling loop (DESIGN §10): which leaf goes next, whether a unit is admitted,
and what users see about queues.

A unit (a pod, or a gang's pending members summed) is admitted in the same cycle as it is placed,
under `cache.lock`, so quota never admits what cannot be placed: its queue must be valid, a leaf,
not paused, and at every level used + request <= max. With only the implicit root and `default`
queue (no Queue or ElasticQuota objects) nothing is ordered or checked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scheduler.kubeapi.client import now_rfc3339
from scheduler.placement import Assignment
from scheduler.quota import Amounts, QueueOrder, add_into, admission_problem, request_amounts
from scheduler.quota.models import MODEL_SEP, base_of, models_named
from scheduler.quota.tree import Problem
from scheduler.runtime.cluster.cache import ClusterCache
from scheduler.runtime.cluster.podinfo import PodInfo
from scheduler.runtime.cluster.queuebook import QueueBook
from scheduler.runtime.pending import SchedulingQueue, UnitKey, UnitKind
from scheduler.runtime.queues.modelquota import ModelFilter, gang_breach, model_filter
from scheduler.runtime.queues.queuestatus import (
    PendingWork,
    QueueFigures,
    merge_patch,
    queue_figures,
    queue_status,
)
from scheduler.runtime.reporter import Reporter

__all__ = ["QueueGate"]

Obj = Mapping[str, Any]
CATEGORY = "queue"  # the pending_pods{reason} of a unit its queue holds back
NO_NODES = "ModelWithoutNodes"  # the condition on a Queue naming a model no node carries


class QueueGate:
    """Every method but `choose` runs with `cache.lock` held by the caller."""

    def __init__(self, cache: ClusterCache, queue: SchedulingQueue, reporter: Reporter) -> None:
        self._cache, self._queue, self._reporter = cache, queue, reporter
        self.figures: dict[str, QueueFigures] = {}  # as last reported (for the metrics)
        self._order = QueueOrder()

    @property
    def book(self) -> QueueBook:
        return self._cache.queues

    def on_queue(
        self, kind: str, etype: str, obj: Obj | None, items: list[Any] | None = None
    ) -> bool:
        """A Queue or ElasticQuota event, or a full list (`items`); True when the tree changed."""
        changed = self._cache.apply_queue(kind, etype, obj, items)
        if changed:
            self._report_problems()
        return changed

    def _report_problems(self) -> None:
        for name, problem in sorted(self.book.tree.problems.items()):
            found = self.book.object_of(name)
            if found is not None:
                self._reporter.warn(found[1], found[0], problem.reason, problem.message)

    def choose(self, heads: Mapping[str, tuple[UnitKey, int]]) -> str:
        """The leaf to pop from, given each leaf's head unit and its version (the order across
        queues); a head's demand is read only when its version is new to the order's memo."""
        with self._cache.lock:
            book = self.book
            return self._order.choose(
                book.tree,
                book.usage,
                book.capacity(),
                heads,
                lambda leaf: self.demand(heads[leaf][0]),
            )

    def demand(self, unit: UnitKey) -> Amounts:
        """What `unit` asks of its queue: the pod's request, or the gang's pending members'."""
        if unit.kind is UnitKind.POD:
            info = self._cache.pods.get(unit.key)
            return self.asked(info) if info is not None else {}
        total: dict[str, int] = {}
        for member in self._cache.members(unit.key):
            if member.pending and not member.gated:
                add_into(total, self.asked(member))
        return total

    def problem(self, infos: Sequence[PodInfo]) -> tuple[str, str] | None:
        """(category, message) when the queue holds `infos` (one unit) back, else None."""
        tree = self.book.tree
        if not infos or tree.trivial:
            return None
        leaf, why = self._cache.leaf_of(infos[0])
        if why is not None:
            return CATEGORY, why
        demand: dict[str, int] = {}
        for info in infos:
            add_into(demand, self.asked(info))
        breach = admission_problem(tree, self.book.usage, leaf, demand)
        return None if breach is None else (CATEGORY, breach)

    def model_filter(self, infos: Sequence[PodInfo]) -> ModelFilter:
        """The nodes `infos` (one admitted unit) may not use for its queue's model quotas."""
        if not infos or not self.book.tree.has_models:
            return ModelFilter()
        leaf = self._cache.leaf_of(infos[0])[0]
        requests = [info.request for info in infos]
        return model_filter(self.book, self._cache.snapshot, leaf, requests)

    def gang_problem(
        self, placed: Sequence[tuple[PodInfo, Assignment]]
    ) -> tuple[str, frozenset[str]] | None:
        """The model key a gang's placed members breach together and the nodes to leave out
        next (`gang_breach`); None: admitted."""
        if not placed or not self.book.tree.has_models:
            return None
        leaf = self._cache.leaf_of(placed[0][0])[0]
        return gang_breach(self.book, leaf, [(i.request, a) for i, a in placed])

    # -- status --------------------------------------------------------------------------
    def report(self) -> None:
        """Recompute every queue's figures; write the Queue statuses that changed."""
        book = self.book
        self.figures = queue_figures(book.tree, book.usage, self._pending(), book.capacity())
        stamp = now_rfc3339()
        models = book.nodes_by_model() if book.tree.has_models else {}
        for name, obj in sorted(book.queue_objs.items()):
            current = obj.get("status") or {}
            problem = book.tree.problems.get(name) or self._modelless(name, models)
            status = queue_status(self.figures.get(name), problem, current, stamp)
            if any(current.get(k) != v for k, v in status.items()):
                self._reporter.queue_status(obj, merge_patch(status, current))

    def _modelless(self, name: str, models: Mapping[str, object]) -> Problem | None:
        """A note (not a problem: nodes may come later) on model keys no known node carries."""
        spec = self.book.tree.specs.get(name)
        if spec is None or not self.book.tree.has_models:
            return None
        keys = sorted(k for k in (*spec.min, *spec.max) if MODEL_SEP in k)
        missing = sorted({k for k in keys if k.split(MODEL_SEP, 1)[1] not in models})
        if not missing:
            return None
        return Problem(NO_NODES, f"no node carries the GPU model of {', '.join(missing)}", False)

    def _pending(self) -> dict[str, PendingWork]:
        """Waiting units by leaf: a pod alone, or a gang once (its pending members summed)."""
        pending: dict[str, PendingWork] = {}
        gangs: set[object] = set()
        for info in self._cache.pods.values():
            if not info.pending or info.gated:
                continue
            work = pending.setdefault(self._cache.leaf_of(info)[0], PendingWork())
            if info.group_key is None or info.group_key not in gangs:
                work.units += 1
            if info.group_key is not None:
                gangs.add(info.group_key)
            add_into(work.resources, self.asked(info))
        return pending

    def asked(self, info: PodInfo) -> dict[str, int]:
        """What a waiting pod asks of its queue: its request, under its model's key too when it
        can run on one model only (its node selector names one `nvidia.com/gpu.product`), so
        admission, the order and within-guarantee see that model's key (DESIGN §10); the shares
        its claims take once placed are charged too."""
        amounts = request_amounts(info.request, claimed=info.claim_shares)
        models = models_named(info.request)
        if len(models) != 1:
            return amounts
        return amounts | self.book.on_model(amounts, next(iter(models)))

    def metric_samples(self) -> dict[str, list[tuple[tuple[str, ...], float]]]:
        """The per-queue gauges (`SchedulerMetrics.watch_queues`), from the last `report`."""
        with self._cache.lock:
            tree, figures = self.book.tree, dict(self.figures)
        out: dict[str, list[tuple[tuple[str, ...], float]]] = {}
        for name, fig in sorted(figures.items()):
            spec = tree.specs.get(name)
            if spec is None:
                continue
            rows = {"used": fig.used, "borrowed": fig.borrowed, "min": spec.min, "max": spec.max}
            rows["fair_share"] = fig.fair_share
            for suffix, amounts in rows.items():
                out.setdefault(suffix, []).extend(
                    ((name, r), _gauge(r, v)) for r, v in sorted(amounts.items())
                )
            out.setdefault("pending_units", []).append(((name,), float(fig.pending.units)))
            paused = tree.paused(name) is not None
            out.setdefault("paused", []).append(((name,), float(paused)))
        return out


def _gauge(resource: str, amount: int) -> float:
    """Quota units as the resource is usually counted (GPUs and CPUs whole, not thousandths;
    a model key as its plain resource)."""
    return amount / 1000 if base_of(resource) in ("cpu", "nvidia.com/gpu") else float(amount)
