"""The `/metrics`, `/healthz` and `/readyz` HTTP server both binaries run (`gputopo-agent run` on
`:9445`, `gputopo-scheduler run` on `:9446`), each over its own Prometheus registry.

`parse_address` reads the `--metrics-address` flag (`HOST:PORT`; port 0 binds an ephemeral port,
an IPv6 host is written in brackets).

What a connection may cost is bounded (`ServerLimits`), so that idle, half-sent or abandoned
connections cannot starve the kubelet's probes or grow the process:

- one thread accepts connections and reads request heads without blocking (a selector): a
  connection that has not sent its whole head costs a socket, not a thread. It gets
  `request_timeout_s` to send it; beyond `max_connections` such connections the oldest is closed;
- complete requests go to `workers` handler threads through a queue of at most `max_queued`;
  beyond that a request is answered 503 at once. A reply must be taken within `request_timeout_s`;
- every connection carries one request (`Connection: close`). A client that hangs up costs one
  DEBUG line; nothing else is logged per request.
"""

from __future__ import annotations

import logging
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)

TEXT = "text/plain; charset=utf-8"
MAX_HEAD_BYTES = 8192
"""A longer request head is answered 431: ours are a request line and a few headers."""
_POLL_S = 0.05  # how often the loops look at the stop flag and the deadlines
_ACCEPT_BATCH = 64  # connections accepted per wake-up, so reads are not starved by a flood


def parse_address(address: str) -> tuple[str, int]:
    """`:9445` -> ("", 9445); `127.0.0.1:0`; `[::1]:9445`. ValueError names the address."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"bad address {address!r}: expected HOST:PORT (port 0 = ephemeral)")
    return host.strip("[]"), int(port)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerLimits:
    """What connections may cost; see the module docstring."""

    request_timeout_s: float = 5.0
    workers: int = 4
    max_connections: int = 256
    max_queued: int = 64


@dataclass(slots=True)
class _Pending:
    """A connection still sending its request head."""

    peer: str
    deadline: float
    head: bytearray = field(default_factory=bytearray)


@dataclass(frozen=True, slots=True)
class _Request:
    conn: socket.socket
    peer: str
    head: bytes


class MetricsServer:
    """Serves `/metrics`, `/healthz` and `/readyz` on its own threads; `port` is the bound port.

    `/readyz` answers 200 while `ready()` is true, else 503 with `unready_reason()` in the body;
    `/healthz` the same for `healthy()`.
    """

    def __init__(
        self,
        address: str,
        registry: CollectorRegistry,
        *,
        ready: Callable[[], bool] = lambda: True,
        healthy: Callable[[], bool] = lambda: True,
        unready_reason: Callable[[], str] = lambda: "",
        limits: ServerLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        host, port = parse_address(address)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.create_server((host, port), family=family, backlog=1024)
        self._listener.setblocking(False)
        self._registry, self._ready, self._healthy = registry, ready, healthy
        self._unready_reason = unready_reason
        self._limits = limits = limits or ServerLimits()
        self._clock = clock
        self._pending: dict[socket.socket, _Pending] = {}  # oldest first; the accept thread's
        self._queue: queue.Queue[_Request] = queue.Queue(maxsize=limits.max_queued)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._serve, name="metrics", daemon=True)]
        self._threads += [
            threading.Thread(target=self._work, name=f"metrics-{n}", daemon=True)
            for n in range(limits.workers)
        ]
        self._crowded_logged_at = float("-inf")

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    def start(self) -> MetricsServer:
        for thread in self._threads:
            thread.start()
        log.info("metrics on port %s", self.port)
        return self

    def stop(self) -> None:
        """Stop accepting and close every connection; a reply being sent may finish."""
        self._stop.set()
        if self._threads[0].is_alive():
            self._threads[0].join(timeout=5)
        self._listener.close()
        self._drain()

    # -- the accept/read thread ------------------------------------------------------------------
    def _serve(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            while not self._stop.is_set():
                for key, _ in selector.select(timeout=_POLL_S):
                    if key.fileobj is self._listener:
                        self._accept(selector)
                    else:
                        assert isinstance(key.fileobj, socket.socket)
                        self._receive(selector, key.fileobj)
                self._expire(selector)
            for conn in list(self._pending):
                self._close(selector, conn)

    def _accept(self, selector: selectors.BaseSelector) -> None:
        for _ in range(_ACCEPT_BATCH):
            try:
                conn, address = self._listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:  # e.g. out of file descriptors: try again on the next wake-up
                log.debug("metrics server: accept failed: %s", exc)
                return
            if len(self._pending) >= self._limits.max_connections:
                self._crowded(selector)
            conn.setblocking(False)
            peer = f"{address[0]}:{address[1]}"
            deadline = self._clock() + self._limits.request_timeout_s
            self._pending[conn] = _Pending(peer, deadline)
            selector.register(conn, selectors.EVENT_READ)

    def _crowded(self, selector: selectors.BaseSelector) -> None:
        """Too many connections without a request: close the oldest."""
        oldest = next(iter(self._pending))
        log.debug(
            "metrics client %s: closed, too many open connections", self._pending[oldest].peer
        )
        self._close(selector, oldest)
        now = self._clock()
        if now - self._crowded_logged_at >= 60.0:
            self._crowded_logged_at = now
            log.warning(
                "metrics server: %d connections sent no request; closing the oldest",
                self._limits.max_connections,
            )

    def _receive(self, selector: selectors.BaseSelector, conn: socket.socket) -> None:
        pending = self._pending[conn]
        try:
            data = conn.recv(4096)
        except BlockingIOError:
            return
        except OSError as exc:
            log.debug("metrics client %s hung up: %s", pending.peer, exc)
            self._close(selector, conn)
            return
        if not data:
            log.debug("metrics client %s hung up before sending a request", pending.peer)
            self._close(selector, conn)
            return
        pending.head += data
        end = head_end(pending.head)
        too_long = (end if end >= 0 else len(pending.head)) > MAX_HEAD_BYTES
        if end < 0 and not too_long:
            return
        selector.unregister(conn)
        del self._pending[conn]
        head = b"" if too_long else bytes(pending.head[:end])  # b"": answered 431
        self._dispatch(_Request(conn, pending.peer, head))

    def _dispatch(self, request: _Request) -> None:
        if not request.head:
            _reply_now(request, HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE)
            return
        try:
            self._queue.put_nowait(request)
        except queue.Full:
            log.debug("metrics client %s: 503, every handler is busy", request.peer)
            _reply_now(request, HTTPStatus.SERVICE_UNAVAILABLE)

    def _expire(self, selector: selectors.BaseSelector) -> None:
        """Close connections whose request head is late (deadlines grow in insertion order)."""
        now = self._clock()
        while self._pending:
            conn, pending = next(iter(self._pending.items()))
            if pending.deadline > now:
                return
            log.debug("metrics client %s: closed, no request within the timeout", pending.peer)
            self._close(selector, conn)

    def _close(self, selector: selectors.BaseSelector, conn: socket.socket) -> None:
        selector.unregister(conn)
        del self._pending[conn]
        conn.close()

    # -- the handler threads ---------------------------------------------------------------------
    def _work(self) -> None:
        while not self._stop.is_set():
            try:
                request = self._queue.get(timeout=_POLL_S)
            except queue.Empty:
                continue
            self._answer(request)

    def _answer(self, request: _Request) -> None:
        try:
            reply = self._respond(request)
            request.conn.settimeout(self._limits.request_timeout_s)
            request.conn.sendall(reply)
        except OSError as exc:  # reset, broken pipe, or the reply not taken within the timeout
            log.debug("metrics client %s hung up: %s", request.peer, exc)
        finally:
            request.conn.close()

    def _respond(self, request: _Request) -> bytes:
        method, path = request_line(request.head)
        if method not in {"GET", "HEAD"}:
            status = HTTPStatus.BAD_REQUEST if not method else HTTPStatus.METHOD_NOT_ALLOWED
            return response(status, f"{status.phrase.lower()}\n".encode())
        try:
            status, body, content_type = self._route(path)
        except Exception:
            log.exception("metrics server: answering %s failed", path)
            status, body, content_type = HTTPStatus.INTERNAL_SERVER_ERROR, b"internal error\n", TEXT
        return response(status, body, content_type, with_body=method == "GET")

    def _route(self, path: str) -> tuple[HTTPStatus, bytes, str]:
        if path == "/metrics":
            return HTTPStatus.OK, generate_latest(self._registry), CONTENT_TYPE_LATEST
        if path in {"/healthz", "/readyz"}:
            if (self._healthy if path == "/healthz" else self._ready)():
                return HTTPStatus.OK, b"ok\n", TEXT
            why = self._unready_reason() if path == "/readyz" else ""
            body = f"not ready: {why}\n" if why else "not ready\n"
            return HTTPStatus.SERVICE_UNAVAILABLE, body.encode(), TEXT
        return HTTPStatus.NOT_FOUND, b"not found\n", TEXT

    def _drain(self) -> None:
        """Close the connections still queued when the server stops."""
        while True:
            try:
                self._queue.get_nowait().conn.close()
            except queue.Empty:
                return


def head_end(data: bytes | bytearray) -> int:
    """The length of the request head in `data` (through its blank line), or -1 if incomplete."""
    for blank in (b"\r\n\r\n", b"\n\n"):
        at = data.find(blank)
        if at >= 0:
            return at + len(blank)
    return -1


def request_line(head: bytes) -> tuple[str, str]:
    """(method, path without query) of a request head; ("", "") when it is not HTTP/1.x."""
    parts = head.split(b"\n", 1)[0].strip().split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        return "", ""
    return parts[0].decode("latin-1"), parts[1].decode("latin-1").split("?", 1)[0]


def response(
    status: HTTPStatus, body: bytes, content_type: str = TEXT, *, with_body: bool = True
) -> bytes:
    """A whole HTTP/1.1 response; the connection closes after it."""
    head = (
        f"HTTP/1.1 {status.value} {status.phrase}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + (body if with_body else b"")


def _reply_now(request: _Request, status: HTTPStatus) -> None:
    """Answer from the accept thread without waiting: a short reply into an empty send buffer."""
    try:
        request.conn.send(response(status, f"{status.phrase.lower()}\n".encode()))
    except OSError as exc:
        log.debug("metrics client %s hung up: %s", request.peer, exc)
    finally:
        request.conn.close()
