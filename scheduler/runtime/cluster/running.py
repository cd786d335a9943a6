"""The units this scheduler may evict (DESIGN §11), kept in a `RunningIndex` as pods change.

A unit is a pod of this scheduler on its own, or a gang: every member of one PodGroup that is on
a node. Only pods of this scheduler that are bound or assumed, not finished and not terminating
(no `deletionTimestamp`), and not already chosen as a victim, are ever in a unit; a gang's
members above its `minMember` may be taken alone (`spare`), unless its group is evicted whole
(an upstream PodGroup's `disruptionMode.all`; under a CompositePodGroup of `disruptionMode.all`,
the unit is that whole subtree's, keyed by the CompositePodGroup). The cache calls `track`
whenever it charges a pod (added, updated, assumed, forgotten, deleted), so the index is always
current and the victim search never scans the cluster. Unit keys are `UnitKey` strings
(`pod/ns/name`, `gang/ns/name`), the keys the scheduling queue and the nominations use.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agent.objkey import ObjectKey
from scheduler.placement import Snapshot
from scheduler.preemption import Running, RunningIndex
from scheduler.runtime.cluster.podinfo import PodInfo, parse_time
from scheduler.runtime.pending import UnitKey, UnitKind

__all__ = ["RunningUnits", "unit_name"]

LeafOf = Callable[[PodInfo], str]


def unit_name(info: PodInfo) -> str:
    """The key of the unit `info` belongs to (its gang's when it has one)."""
    if info.group_key is not None:
        return str(UnitKey(UnitKind.GANG, info.group_key))
    return str(UnitKey(UnitKind.POD, info.key))


class RunningUnits:
    """The cache's running units; callers hold `cache.lock`."""

    def __init__(self, snapshot: Snapshot) -> None:
        """`snapshot`: the cache's live snapshot (where the index reads each pod's place)."""
        self.index = RunningIndex(snapshot)
        self._doomed: set[ObjectKey] = set()  # chosen as victims, their deletion not yet seen
        # What each single pod's unit was added with (request, node, start, generation).
        self._seen: dict[ObjectKey, tuple[object, str | None, object, int]] = {}
        self._generation = 0

    def eligible(self, info: PodInfo) -> bool:
        """May `info` be (part of) a victim?"""
        return info.ours and info.counted and not info.terminating and info.key not in self._doomed

    def doom(self, keys: Sequence[ObjectKey]) -> None:
        """`keys` were chosen as victims: never chosen again (the caller tracks them again)."""
        self._doomed.update(keys)

    def spare(self, keys: Sequence[ObjectKey]) -> None:
        """Their eviction failed: they may be chosen again (the caller tracks them again)."""
        self._doomed.difference_update(keys)

    def track_pod(self, key: ObjectKey, info: PodInfo | None, leaf_of: LeafOf) -> None:
        """A pod without a gang changed (None: gone). Most pod events change nothing the unit
        holds (a status update, our binding confirmed): those cost one tuple comparison."""
        if info is None or not self.eligible(info):
            if info is None:
                self._doomed.discard(key)
            if self._seen.pop(key, None) is not None:
                self.index.remove(str(UnitKey(UnitKind.POD, key)))
            return
        mark = (info.request, info.node, _start_text(info), self._generation)
        seen = self._seen.get(key)
        if seen is not None and seen[0] is mark[0] and seen[1:] == mark[1:]:
            return
        self._seen[key] = mark
        self.index.add(
            Running(
                key=str(UnitKey(UnitKind.POD, key)),
                pods=(key,),
                leaf=leaf_of(info),
                priority=info.request.priority,
                started=_started(info),
            )
        )

    def moved(self, keys: Sequence[ObjectKey]) -> None:
        """The node of `keys` (re)appeared: their units read their places again when tracked."""
        for key in keys:
            self._seen.pop(key, None)

    def invalidate(self) -> None:
        """The queues changed: every unit's leaf is read again when its pod is next tracked."""
        self._generation += 1

    def drop_gang(self, gkey: ObjectKey) -> None:
        """Gang `gkey`'s unit is gone (its pods are now in another's, or none)."""
        self.index.remove(str(UnitKey(UnitKind.GANG, gkey)))

    def track_gang(
        self,
        gkey: ObjectKey,
        members: Sequence[PodInfo],
        min_member: int,
        leaf_of: LeafOf,
        gone: ObjectKey | None = None,
        *,
        priority: int | None = None,
        whole: bool = False,
    ) -> None:
        """A member of gang `gkey` changed; `members`: its pods now (`gone`: one just deleted).
        `priority`: the group's own (None: its highest member's); `whole`: never taken member
        by member (an upstream group's `disruptionMode.all`)."""
        if gone is not None:
            self._doomed.discard(gone)
        name = str(UnitKey(UnitKind.GANG, gkey))
        running = [m for m in members if self.eligible(m)]
        if not running:
            self.index.remove(name)
            return
        self.index.add(
            Running(
                key=name,
                pods=tuple(m.key for m in running),
                leaf=leaf_of(running[0]),
                priority=max(m.request.priority for m in running) if priority is None else priority,
                started=min(_started(m) for m in running),
                spare=0 if whole else max(len(running) - min_member, 0),
            )
        )


def _start_text(info: PodInfo) -> object:
    return (info.obj.get("status") or {}).get("startTime")


def _started(info: PodInfo) -> float:
    """When the pod started (`status.startTime`), else when it was created."""
    return parse_time(_start_text(info)) or info.created
