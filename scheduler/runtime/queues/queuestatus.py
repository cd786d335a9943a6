"""What the scheduler writes to a Queue's status and exports per queue (DESIGN §10).

`status`: `used` and `borrowed` (what the subtree uses beyond its min) as quantities, `pending`
(units and their summed request), `fairShare`, and the conditions `Valid` (False with the problem
when the queue is unusable) plus a non-fatal problem (`Overcommitted`, `MinAboveParent`) as its
own condition. A condition keeps its `lastTransitionTime` while its status stays the same, so a
status that did not change is not written again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.quota import Amounts, QuotaTree, Usage, fair_shares, format_amount
from scheduler.quota.tree import Problem

__all__ = ["PendingWork", "QueueFigures", "merge_patch", "queue_figures", "queue_status"]

Obj = Mapping[str, Any]


@dataclass(slots=True)
class PendingWork:
    """Units waiting in one leaf and their summed request."""

    units: int = 0
    resources: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class QueueFigures:
    """One queue's numbers, in quota units (what the status and the metrics show)."""

    used: Amounts
    borrowed: Amounts
    fair_share: Amounts
    pending: PendingWork


def _quantities(amounts: Amounts) -> dict[str, str]:
    return {r: format_amount(r, v) for r, v in sorted(amounts.items()) if v}


def queue_figures(
    tree: QuotaTree, usage: Usage, pending: Mapping[str, PendingWork], capacity: Amounts
) -> dict[str, QueueFigures]:
    """Figures for every queue of the tree; a parent's pending work is its leaves' summed."""
    shares = fair_shares(tree, usage, {q: w.resources for q, w in pending.items()}, capacity)
    totals: dict[str, PendingWork] = {q: PendingWork() for q in tree.specs}
    for leaf, work in pending.items():
        for queue in tree.paths.get(leaf, ()):
            totals[queue].units += work.units
            for r, v in work.resources.items():
                totals[queue].resources[r] = totals[queue].resources.get(r, 0) + v
    out = {}
    for name, spec in tree.specs.items():
        used = usage.used(name)
        borrowed = {r: v - spec.min.get(r, 0) for r, v in used.items() if r in tree.managed}
        out[name] = QueueFigures(
            used=dict(used),
            borrowed={r: v for r, v in borrowed.items() if v > 0},
            fair_share=shares.get(name, {}),
            pending=totals[name],
        )
    return out


def _conditions(problem: Problem | None, current: Obj, stamp: str) -> list[dict[str, str]]:
    if problem is not None and problem.fatal:
        wanted = [("Valid", "False", problem.reason, problem.message)]
    else:
        wanted = [("Valid", "True", "Valid", "")]
        if problem is not None:
            wanted.append((problem.reason, "True", problem.reason, problem.message))
    before = {c.get("type"): c for c in current.get("conditions") or () if isinstance(c, dict)}
    conditions = []
    for kind, status, reason, message in wanted:
        old = before.get(kind) or {}
        since = old.get("lastTransitionTime") if old.get("status") == status else None
        conditions.append(
            {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastTransitionTime": str(since or stamp),
            }
        )
    return conditions


def queue_status(
    figures: QueueFigures | None, problem: Problem | None, current: Obj, stamp: str
) -> dict[str, Any]:
    """The status to write (`figures` None: the queue is not in the tree)."""
    status: dict[str, Any] = {"conditions": _conditions(problem, current, stamp)}
    if figures is None:
        return status | {"used": {}, "borrowed": {}, "fairShare": {}, "pending": {"units": 0}}
    return status | {
        "used": _quantities(figures.used),
        "borrowed": _quantities(figures.borrowed),
        "fairShare": _quantities(figures.fair_share),
        "pending": {
            "units": figures.pending.units,
            "resources": _quantities(figures.pending.resources),
        },
    }


def merge_patch(status: Mapping[str, Any], current: Obj) -> dict[str, Any]:
    """`status` as a JSON merge patch over `current`: map entries that are gone become null."""
    patch: dict[str, Any] = {}
    for key, value in status.items():
        old = current.get(key)
        if isinstance(value, Mapping) and isinstance(old, Mapping):
            patch[key] = merge_patch(value, old)
        else:
            patch[key] = value
    for key in current:
        if key not in status:
            patch[key] = None
    return patch
