"""Per-queue figures of an event-mode run with queues: GPU-time, waits and guarantee deficit.

For every queue of the tree but the root (`default` only when a job used it):

* GPU-time: GPU-seconds its subtree's pods held (a GPU share counts its fraction); peak: the
  most GPUs they held at once; per GPU model key the tree names (`nvidia.com/gpu@<model>`), the
  GPU-seconds held on that model's nodes;
* wait p50 / p99: seconds from a job's arrival to the start of each of its pods (nearest rank,
  over the pods that started; `pods` and `podsStarted` say how many did not);
* guarantee deficit: GPU-seconds of guarantee owed and not given. While the queue has work
  pending that is within its guarantee (`scheduler.quota.within_guarantee` holds for the first
  waiting unit of one of its leaves) and its GPUs in use are below its `min`, it accrues
  min(min - used, its pending GPU demand) per second.

Figures are integrated between events, over the state each scheduling pass left.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agent.model import MILLI_PER_GPU
from agent.resource_names import GPU_RESOURCE
from scheduler.quota import DEFAULT_QUEUE, ROOT, QuotaTree, Usage, within_guarantee
from scheduler.quota.models import MODEL_SEP, base_of

__all__ = ["QueueMeter", "QueueReport", "percentile"]


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueReport:
    name: str
    parent: str | None
    min_gpus: float  # 0: no guarantee
    max_gpus: float | None  # None: unlimited
    pods: int
    pods_started: int
    gpu_seconds: float
    peak_gpus: float
    wait_p50: float | None
    wait_p99: float | None
    deficit_gpu_seconds: float
    model_gpu_seconds: Mapping[str, float] = field(default_factory=dict)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank `q` quantile (0 < q <= 1) of `values`; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


class QueueMeter:
    """Accumulates the figures; the run calls `arrived`, `started` (after charging the pod to
    the usage), `settle` and `advance`."""

    def __init__(self, tree: QuotaTree, usage: Usage) -> None:
        self.tree = tree
        self.usage = usage
        self.queues = [q for q in _depth_first(tree) if q != ROOT]
        self.gpu_milli_seconds = dict.fromkeys(self.queues, 0.0)
        self.model_keys = sorted(
            k for k in tree.managed if MODEL_SEP in k and base_of(k) == GPU_RESOURCE
        )
        self.model_milli_seconds = {q: dict.fromkeys(self.model_keys, 0.0) for q in self.queues}
        self.deficit_milli_seconds = dict.fromkeys(self.queues, 0.0)
        self.pending_milli = dict.fromkeys(self.queues, 0)
        self.pods = dict.fromkeys(self.queues, 0)
        self.peak_milli = dict.fromkeys(self.queues, 0)
        self.waits: dict[str, list[float]] = {q: [] for q in self.queues}
        self._shortfall: dict[str, int] = {}

    def arrived(self, leaf: str, pods: int, gpu_milli: int) -> None:
        for queue in self.tree.paths[leaf]:
            self.pods[queue] += pods
            self.pending_milli[queue] += gpu_milli

    def started(self, leaf: str, gpu_milli: int, wait: float) -> None:
        for queue in self.tree.paths[leaf]:
            self.pending_milli[queue] -= gpu_milli
            self.waits[queue].append(wait)
            used = self.usage.used(queue).get(GPU_RESOURCE, 0)
            self.peak_milli[queue] = max(self.peak_milli[queue], used)

    def requeued(self, leaf: str, gpu_milli: int) -> None:
        """A pod of `leaf` was evicted: it is pending again."""
        for queue in self.tree.paths[leaf]:
            self.pending_milli[queue] += gpu_milli

    def restarted(self, leaf: str, gpu_milli: int) -> None:
        """An evicted pod started again (its wait was counted the first time)."""
        for queue in self.tree.paths[leaf]:
            self.pending_milli[queue] -= gpu_milli

    def settle(self, heads: Mapping[str, Mapping[str, int]]) -> None:
        """After a scheduling pass: `heads` maps each leaf with work to its first unit's demand."""
        owed: set[str] = set()
        for leaf, demand in heads.items():
            if within_guarantee(self.tree, self.usage, leaf, demand):
                owed.update(self.tree.paths[leaf])
        self._shortfall = {}
        for queue in owed:
            low = self.tree.specs[queue].min.get(GPU_RESOURCE, 0)
            gap = low - self.usage.used(queue).get(GPU_RESOURCE, 0)
            if gap > 0:
                self._shortfall[queue] = min(gap, self.pending_milli[queue])

    def advance(self, seconds: float) -> None:
        """The state `settle` saw lasted `seconds`."""
        if seconds <= 0:
            return
        for queue in self.queues:
            used_of = self.usage.used(queue)
            self.gpu_milli_seconds[queue] += used_of.get(GPU_RESOURCE, 0) * seconds
            for key in self.model_keys:
                self.model_milli_seconds[queue][key] += used_of.get(key, 0) * seconds
        for queue, gap in self._shortfall.items():
            self.deficit_milli_seconds[queue] += gap * seconds

    def reports(self) -> tuple[QueueReport, ...]:
        return tuple(self._report(q) for q in self.queues if q != DEFAULT_QUEUE or self.pods[q])

    def _report(self, queue: str) -> QueueReport:
        spec = self.tree.specs[queue]
        top = spec.max.get(GPU_RESOURCE)
        waits = self.waits[queue]
        return QueueReport(
            name=queue,
            parent=spec.parent,
            min_gpus=spec.min.get(GPU_RESOURCE, 0) / MILLI_PER_GPU,
            max_gpus=None if top is None else top / MILLI_PER_GPU,
            pods=self.pods[queue],
            pods_started=len(waits),
            gpu_seconds=round(self.gpu_milli_seconds[queue] / MILLI_PER_GPU, 2),
            peak_gpus=self.peak_milli[queue] / MILLI_PER_GPU,
            wait_p50=_rounded(percentile(waits, 0.50)),
            wait_p99=_rounded(percentile(waits, 0.99)),
            deficit_gpu_seconds=round(self.deficit_milli_seconds[queue] / MILLI_PER_GPU, 2),
            model_gpu_seconds={
                k: round(v / MILLI_PER_GPU, 2) for k, v in self.model_milli_seconds[queue].items()
            },
        )


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _depth_first(tree: QuotaTree) -> list[str]:
    out, stack = [], [ROOT]
    while stack:
        queue = stack.pop()
        out.append(queue)
        stack.extend(reversed(tree.children[queue]))
    return out
