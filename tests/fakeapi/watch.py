"""Watch streams: the events after a resource version, filtered by selectors, as real servers do.

An object that starts matching the selectors arrives as ADDED, one that stops matching as DELETED.
Without a resource version (or with "0") the stream starts with an ADDED event per current object.
A resource version older than the kept history ends the stream with an ERROR event carrying a 410
`Status`, which `kubernetes.watch.Watch` turns into a retry or an `ApiException(410)`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping

from tests.fakeapi.api import Api
from tests.fakeapi.errors import ApiError, bad_request
from tests.fakeapi.objects import Ref
from tests.fakeapi.selectors import field_matcher, label_matcher
from tests.fakeapi.store import Obj, WatchEvent

IDLE_TICK_S = 0.2


def _translate(event: WatchEvent, match: Callable[[Obj], bool]) -> str | None:
    """The event type a selector-filtered watch shows, or None to skip it."""
    now = match(event.obj)
    before = event.old is not None and match(event.old)
    if event.type == "DELETED":
        return "DELETED" if before else None
    if event.type == "ADDED" or not before:
        return "ADDED" if now else None
    return "MODIFIED" if now else "DELETED"


def _start_rv(query: Mapping[str, str]) -> int | None:
    text = query.get("resourceVersion", "")
    if text in ("", "0"):
        return None
    try:
        return int(text)
    except ValueError as exc:
        raise bad_request(f"invalid resource version {text!r}") from exc


def stream(
    api: Api, ref: Ref, query: Mapping[str, str], stop: Callable[[], bool]
) -> Iterator[Obj | None]:
    """Watch events as dicts; `None` on idle ticks so the caller can notice a gone client.

    Bad selectors or resource versions raise `ApiError` here, before any event is produced.
    """
    labels = label_matcher(query.get("labelSelector"))
    fields = field_matcher(query.get("fieldSelector"), ref.rt)

    def match(obj: Obj) -> bool:
        if ref.namespace and obj["metadata"].get("namespace") != ref.namespace:
            return False
        return labels(obj) and fields(obj)

    try:
        timeout = float(query.get("timeoutSeconds") or 0)
    except ValueError as exc:
        raise bad_request(f"invalid timeoutSeconds {query['timeoutSeconds']!r}") from exc
    deadline = time.monotonic() + timeout if timeout > 0 else None
    bookmarks = query.get("allowWatchBookmarks", "").lower() == "true"
    return _events(api, ref, match, fields.equalities, _start_rv(query), deadline, bookmarks, stop)


def _events(
    api: Api,
    ref: Ref,
    match: Callable[[Obj], bool],
    equal: Mapping[str, str],
    rv: int | None,
    deadline: float | None,
    bookmarks: bool,
    stop: Callable[[], bool],
) -> Iterator[Obj | None]:
    if rv is None:
        objects, rv = api.store.snapshot(ref.rt, ref.namespace or None, equal)
        for obj in sorted(
            objects, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"])
        ):
            if match(obj):
                yield {"type": "ADDED", "object": api.present(ref, obj)}
    while True:
        wait = IDLE_TICK_S if deadline is None else min(IDLE_TICK_S, deadline - time.monotonic())
        if wait <= 0:
            if bookmarks:
                yield _bookmark(ref, rv)
            return
        try:
            events = api.store.events_after(ref.rt, rv, wait, stop)
        except ApiError as exc:
            yield {"type": "ERROR", "object": exc.status_body()}
            return
        if events is None:
            return
        if not events:
            yield None
        for event in events:
            rv = event.rv
            shown = _translate(event, match)
            if shown is not None:
                yield {"type": shown, "object": api.present(ref, event.obj)}


def _bookmark(ref: Ref, rv: int) -> Obj:
    return {
        "type": "BOOKMARK",
        "object": {
            "kind": ref.rt.kind,
            "apiVersion": ref.rt.api_version(ref.version),
            "metadata": {"resourceVersion": str(rv)},
        },
    }
