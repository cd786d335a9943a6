"""The scheduler runtime's claim parts on a live cache, without a loop or an API server: the
cache, the claim book with `classes` and `slices`, the charges and a Placer on the snapshot, for
state machines that place pods as the cycle does."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.placement import Placer, default_scoring
from scheduler.runtime.claims.book import CLASSES, SLICES, ClaimBook
from scheduler.runtime.claims.placing import ClaimCharges
from scheduler.runtime.cluster.cache import ClusterCache
from scheduler.runtime.cluster.podinfo import PodInfo

__all__ = ["ClaimRuntime", "claim_runtime"]


@dataclass(frozen=True, slots=True)
class ClaimRuntime:
    """The parts, sharing one cache: `placer` decides on its live snapshot."""

    cache: ClusterCache
    book: ClaimBook
    charges: ClaimCharges
    placer: Placer

    def pod(self, name: str, namespace: str = "ns") -> PodInfo:
        """The cache's entry for pod `namespace/name`."""
        return next(i for i in self.cache.pods.values() if str(i.key) == f"{namespace}/{name}")


def claim_runtime(
    classes: Sequence[dict[str, Any]], slices: Sequence[dict[str, Any]]
) -> ClaimRuntime:
    cache, book = ClusterCache("gputopo-scheduler"), ClaimBook()
    book.replace(CLASSES, list(classes))
    book.replace(SLICES, list(slices))
    return ClaimRuntime(
        cache, book, ClaimCharges(book, cache), Placer(cache.snapshot, default_scoring())
    )
