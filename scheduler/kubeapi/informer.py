"""List-then-watch of one collection, feeding a sink (client-go's reflector, in a thread).

The informer lists, hands the whole list to `sink.replace` (which drops what disappeared), counts
as synced, runs the steps `replace` left for after the sync (the scheduler's first pod list leaves
the pods waiting for it: `scheduler.runtime.intake`), then watches from the list's
resourceVersion and hands each event to `sink.event`. A watch that ends normally is resumed from
the last resourceVersion seen (bookmarks included); `410 Gone` means list again; `429` (the
server's cache of the kind still initialising, as a CRD's first request meets on a real API
server) waits `BUSY_RETRY`; any other failure waits `retry` seconds and lists again. A collection
whose CRD is not installed (404) counts as synced and empty, and is listed again every
`missing_retry` seconds; so does an `optional` one the scheduler may not read (403: an upgrade
that kept the old RBAC), so that it never holds up the others.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from scheduler.errors import ApiError, GoneError, NotFoundError
from scheduler.kubeapi.calls import Kind, WatchStream
from scheduler.kubeapi.client import KubeClient
from scheduler.kubeapi.decode import Listed

log = logging.getLogger(__name__)


class Sink(Protocol):
    def replace(
        self, kind: str, items: list[dict[str, Any]]
    ) -> Sequence[Callable[[], None]] | None: ...

    def replace_in_part(
        self, kind: str, items: list[Listed]
    ) -> Sequence[Callable[[], None]] | None: ...

    def event(self, kind: str, etype: str, obj: dict[str, Any]) -> None: ...


BUSY_RETRY = 0.2
"""Seconds before listing again after a 429 (the server's cache of the kind is initialising)."""


def _rv(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class Informer:
    def __init__(
        self,
        kube: KubeClient,
        kind: Kind,
        sink: Sink,
        stop: threading.Event,
        *,
        watch_timeout: int = 300,
        retry: float = 1.0,
        missing_retry: float = 30.0,
        optional: bool = False,
        first_in_part: bool = False,
    ) -> None:
        """`optional`: a 403 reads as "not served" (upstream PodGroups: DESIGN §15);
        `first_in_part`: the first list goes to `sink.replace_in_part` decoded in part
        (`KubeClient.list_in_part`), every later one whole to `sink.replace`."""
        self._kube, self.kind, self._sink, self._stop = kube, kind, sink, stop
        self._optional, self._first_in_part = optional, first_in_part
        self._watch_timeout, self._retry, self._missing_retry = watch_timeout, retry, missing_retry
        self.synced = threading.Event()
        self._stream: WatchStream | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self.run, name=f"informer-{kind.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """End the current watch at once. Call after setting `stop`: a watch still opening then
        sees `stop` and closes itself."""
        with self._lock:
            stream = self._stream
        if stream is not None:
            stream.close()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                resource_version = self._list()
                if resource_version is None:
                    self._stop.wait(self._missing_retry)
                    continue
                self._watch_from(resource_version)
            except GoneError:
                log.info("%s: watch expired, listing again", self.kind.name)
            except ApiError as exc:
                if not self._stop.is_set():
                    # 429 while the server's cache of the resource (re)initialises, as a real API
                    # server answers a CRD's first request: ready within moments, not a second.
                    retry = min(self._retry, BUSY_RETRY) if exc.status == 429 else self._retry
                    log.warning("%s: %s; retrying in %.1fs", self.kind.name, exc, retry)
                    self._stop.wait(retry)
            except Exception:
                log.exception("%s: informer failed; retrying in %.1fs", self.kind.name, self._retry)
                self._stop.wait(self._retry)

    def _list(self) -> str | None:
        """List into the sink; None when the resource is not served (CRD not installed)."""
        began = time.monotonic()
        in_part = self._first_in_part and not self.synced.is_set()
        listed: list[Listed] = []
        items: list[dict[str, Any]] = []
        try:
            if in_part:
                listed, resource_version = self._kube.list_in_part(self.kind)
            else:
                items, resource_version = self._kube.list(self.kind)
        except ApiError as exc:
            if isinstance(exc, NotFoundError):
                log.warning("%s: not served by the API server (CRD not installed?)", self.kind.name)
            elif self._optional and exc.status == 403:
                log.warning(
                    "%s: %s; read as empty until allowed (apply the RBAC)", self.kind.name, exc
                )
            else:
                raise
            self._sink.replace(self.kind.name, [])
            self.synced.set()
            return None
        listed_at = time.monotonic()
        later: Sequence[Callable[[], None]] | None = None
        try:
            if in_part:
                later = self._sink.replace_in_part(self.kind.name, listed)
            else:
                later = self._sink.replace(self.kind.name, items)
        except Exception:
            log.exception("%s: handling the list failed", self.kind.name)
        level = logging.DEBUG if self.synced.is_set() else logging.INFO
        log.log(
            level,
            "%s: listed %d in %.2f s, cached in %.2f s",
            self.kind.name,
            len(listed if in_part else items),
            listed_at - began,
            time.monotonic() - listed_at,
        )
        self.synced.set()
        if later:
            self._run_later(later, level)
        return resource_version

    def _run_later(self, later: Sequence[Callable[[], None]], level: int) -> None:
        """The steps the list left for after the sync, unless stopped; a failed one is logged
        and the others still run."""
        began = time.monotonic()
        for step in later:
            if self._stop.is_set():
                return
            try:
                step()
            except Exception:
                log.exception("%s: handling the list failed", self.kind.name)
        log.log(
            level,
            "%s: %d steps left for after the sync done in %.2f s",
            self.kind.name,
            len(later),
            time.monotonic() - began,
        )

    def _deliver(self, etype: str, obj: dict[str, Any]) -> None:
        """One event to the sink; a failure there is logged and does not stop the watch."""
        try:
            self._sink.event(self.kind.name, etype, obj)
        except Exception:
            log.exception("%s: handling %s %s failed", self.kind.name, etype, _rv(obj))

    def _watch_from(self, resource_version: str) -> None:
        while not self._stop.is_set():
            stream = self._kube.watch(self.kind, resource_version, self._watch_timeout)
            with self._lock:
                if self._stop.is_set():  # `close()` ran while the watch was opening
                    stream.close()
                    return
                self._stream = stream
            try:
                for etype, obj in stream.events():
                    if self._stop.is_set():
                        return
                    resource_version = _rv(obj) or resource_version
                    if etype in ("ADDED", "MODIFIED", "DELETED"):
                        self._deliver(etype, obj)
            finally:
                with self._lock:
                    self._stream = None
