"""Object storage with etcd-like resource versions and a bounded watch history per resource.

Stored objects are never mutated in place: a write builds a new dict and swaps it in, so readers may
serialize what they got without holding a lock. Each resource type has its own lock (a
`threading.Condition` that also wakes its watchers); only the resource-version counter is shared.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from tests.fakeapi.errors import ApiError, gone
from tests.fakeapi.resources import ResourceType
from tests.fakeapi.selectors import field_value

Obj = dict[str, Any]
T = TypeVar("T")


def clone(value: T) -> T:
    """A deep copy of JSON-like data (dicts, lists, scalars); much faster than `copy.deepcopy`."""
    return cast(T, _clone(value))


def _clone(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clone(v) for v in value]
    return value


class Delete:
    """Returned by a mutation function: remove the object."""


DELETE = Delete()


@dataclass(frozen=True, slots=True)
class WatchEvent:
    rv: int
    type: str  # ADDED, MODIFIED or DELETED
    obj: Obj
    old: Obj | None


class Bucket:
    """The objects of one resource type, keyed by namespace then name, and their recent events."""

    def __init__(self, rt: ResourceType) -> None:
        self.rt = rt
        self.cond = threading.Condition()
        self.objects: dict[str, dict[str, Obj]] = {}
        self.history: list[WatchEvent] = []
        self.compacted_rv = 0
        self.closed = False
        # field label -> value -> keys (an ordered set) of the objects with that value
        self.index: dict[str, dict[str, dict[tuple[str, str], None]]] = {
            label: {} for label in rt.indexed_fields
        }

    def find(self, ns: str, name: str) -> Obj | None:
        return self.objects.get(ns, {}).get(name)

    def reindex(self, key: tuple[str, str], old: Obj | None, new: Obj | None) -> None:
        for label, by_value in self.index.items():
            before = field_value(old, label) if old is not None else None
            after = field_value(new, label) if new is not None else None
            if before == after:
                continue
            if before is not None:
                keys = by_value.get(before, {})
                keys.pop(key, None)
                if not keys:
                    by_value.pop(before, None)
            if after is not None:
                by_value.setdefault(after, {})[key] = None

    def iter_objects(self, ns: str | None, equal: Mapping[str, str] | None = None) -> Iterator[Obj]:
        label = next((k for k in equal or {} if k in self.index), None)
        if label is not None and equal is not None:
            for key in self.index[label].get(equal[label], {}):
                if ns is None or key[0] == ns:
                    yield self.objects[key[0]][key[1]]
            return
        if ns is not None:
            yield from self.objects.get(ns, {}).values()
            return
        for by_name in self.objects.values():
            yield from by_name.values()


class Store:
    """All buckets plus the global resource-version counter. Thread-safe."""

    def __init__(self, history_limit: int = 50_000) -> None:
        self._history_limit = history_limit
        self._rv_lock = threading.Lock()
        self._rv = 1
        self._buckets_lock = threading.Lock()
        self._buckets: dict[str, Bucket] = {}
        # owner uid -> (qualified resource, namespace, name) of objects naming it in ownerReferences
        self._dependents: dict[str, dict[tuple[str, str, str], None]] = {}

    def bucket(self, rt: ResourceType) -> Bucket:
        with self._buckets_lock:
            found = self._buckets.get(rt.qualified)
            if found is None:
                found = self._buckets[rt.qualified] = Bucket(rt)
            elif found.rt != rt:
                found.rt = rt  # a CRD changed (versions, scope): its objects stay
            return found

    def drop(self, rt: ResourceType) -> None:
        """Forget every object of a resource type (its CRD was deleted) and end its watches."""
        with self._buckets_lock:
            found = self._buckets.pop(rt.qualified, None)
        if found is not None:
            with found.cond:
                found.closed = True
                found.cond.notify_all()

    def current_rv(self) -> int:
        with self._rv_lock:
            return self._rv

    def _next_rv(self) -> int:
        with self._rv_lock:
            self._rv += 1
            return self._rv

    def get(self, rt: ResourceType, ns: str, name: str) -> Obj | None:
        bucket = self.bucket(rt)
        with bucket.cond:
            return bucket.find(ns, name)

    def snapshot(
        self, rt: ResourceType, ns: str | None, equal: Mapping[str, str] | None = None
    ) -> tuple[list[Obj], int]:
        """The objects (of one namespace, or all) and the resource version they are current at.

        `equal` (field label -> value) may narrow the result through an index; callers still
        filter, since fields without an index are not applied here.
        """
        bucket = self.bucket(rt)
        with bucket.cond:
            return list(bucket.iter_objects(ns, equal)), self.current_rv()

    def mutate(
        self,
        rt: ResourceType,
        ns: str,
        name: str,
        change: Callable[[Obj | None], Obj | Delete | None],
    ) -> Obj | None:
        """Atomically replace one object by `change(current)`.

        `change` returns the new object (a fresh dict it may fill in), `DELETE`, or the current
        object itself / `None` for "no change" (then nothing is written and no event is sent).
        It may raise `ApiError`; nothing is written then. Returns what is stored afterwards
        (for a delete: the last state).
        """
        bucket = self.bucket(rt)
        with bucket.cond:
            old = bucket.find(ns, name)
            new = change(old)
            if new is None or new is old:
                return old
            if isinstance(new, Delete):
                return self._remove(bucket, ns, name, old)
            if old is not None and _same_content(old, new):
                return old
            rv = self._next_rv()
            new.setdefault("metadata", {})["resourceVersion"] = str(rv)
            bucket.objects.setdefault(ns, {})[name] = new
            bucket.reindex((ns, name), old, new)
            self._track_owners(bucket.rt, ns, name, old, new)
            self._record(bucket, WatchEvent(rv, "MODIFIED" if old else "ADDED", new, old))
            return new

    def _remove(self, bucket: Bucket, ns: str, name: str, old: Obj | None) -> Obj | None:
        if old is None:
            return None
        rv = self._next_rv()
        gone_obj = dict(old)
        gone_obj["metadata"] = dict(old["metadata"], resourceVersion=str(rv))
        by_name = bucket.objects[ns]
        del by_name[name]
        bucket.reindex((ns, name), old, None)
        self._track_owners(bucket.rt, ns, name, old, None)
        if not by_name:
            del bucket.objects[ns]
        self._record(bucket, WatchEvent(rv, "DELETED", gone_obj, old))
        return gone_obj

    def _track_owners(
        self, rt: ResourceType, ns: str, name: str, old: Obj | None, new: Obj | None
    ) -> None:
        before, after = _owner_uids(old), _owner_uids(new)
        if before == after:
            return
        key = (rt.qualified, ns, name)
        with self._buckets_lock:
            for uid in before - after:
                deps = self._dependents.get(uid, {})
                deps.pop(key, None)
                if not deps:
                    self._dependents.pop(uid, None)
            for uid in after - before:
                self._dependents.setdefault(uid, {})[key] = None

    def dependents(self, owner_uid: str) -> list[tuple[str, str, str]]:
        """(qualified resource, namespace, name) of every object owned by `owner_uid`."""
        with self._buckets_lock:
            return list(self._dependents.get(owner_uid, {}))

    def _record(self, bucket: Bucket, event: WatchEvent) -> None:
        bucket.history.append(event)
        if len(bucket.history) > 2 * self._history_limit:
            cut = len(bucket.history) - self._history_limit
            bucket.compacted_rv = bucket.history[cut - 1].rv
            del bucket.history[:cut]
        bucket.cond.notify_all()

    def compact(self) -> None:
        """Drop every watch event so far, as etcd compaction does: older versions get 410."""
        with self._buckets_lock:
            buckets = list(self._buckets.values())
        for bucket in buckets:
            with bucket.cond:
                bucket.history.clear()
                bucket.compacted_rv = self.current_rv()

    def wake_all(self) -> None:
        with self._buckets_lock:
            buckets = list(self._buckets.values())
        for bucket in buckets:
            with bucket.cond:
                bucket.cond.notify_all()

    def events_after(
        self, rt: ResourceType, after_rv: int, timeout: float, stop: Callable[[], bool]
    ) -> list[WatchEvent] | None:
        """Events newer than `after_rv`, waiting up to `timeout`; `None`: the stream must end."""
        bucket = self.bucket(rt)
        with bucket.cond:
            if after_rv < bucket.compacted_rv:
                raise too_old(after_rv, bucket.compacted_rv)
            ready = bucket.cond.wait_for(
                lambda: bucket.closed or stop() or _newer(bucket, after_rv), timeout
            )
            if bucket.closed or stop():
                return None
            if not ready:
                return []
            start = bisect.bisect_right(bucket.history, after_rv, key=lambda e: e.rv)
            return bucket.history[start:]


def _owner_uids(obj: Obj | None) -> set[str]:
    if obj is None:
        return set()
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return {str(r["uid"]) for r in refs if isinstance(r, dict) and r.get("uid")}


def _newer(bucket: Bucket, after_rv: int) -> bool:
    return bool(bucket.history) and bucket.history[-1].rv > after_rv


def too_old(rv: int, oldest: int) -> ApiError:
    return gone(f"too old resource version: {rv} ({oldest})")


def _same_content(old: Obj, new: Obj) -> bool:
    """Equal but for resourceVersion and managedFields times: an update that changes nothing."""
    return _strip(old) == _strip(new)


def _strip(obj: Obj) -> Obj:
    meta = dict(obj.get("metadata") or {})
    meta.pop("resourceVersion", None)
    entries = meta.get("managedFields")
    if isinstance(entries, list):
        meta["managedFields"] = [
            {k: v for k, v in e.items() if k != "time"} if isinstance(e, dict) else e
            for e in entries
        ]
    return dict(obj, metadata=meta)
