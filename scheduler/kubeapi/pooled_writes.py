"""Small JSON writes over the `kubernetes` client's own urllib3 connection pool, without the
client's per-call machinery.

The scheduler makes two or three writes per pod (the binding, its `Scheduled` Event, at times
`PodScheduled=False`); through the client each costs far more CPU than the decision itself
(request models, header dicts, retry and timeout objects, `http.client`'s e-mail header parser).
`PooledWriter` takes a connection from the client's pool (opened, TLS included, by urllib3 as for
any other call), writes the whole request with one `sendall`, reads the answer with `httptools`
(llhttp: `Content-Length`, chunked, or until close; 1xx interim answers skipped), and returns the
connection to the pool when it may be reused. Only a direct pool is used: behind a proxy the
caller takes the client's own path (`usable` is False).

A failure to send or to read raises `OSError` or `urllib3.exceptions.HTTPError` (the
connection is closed, never reused); an HTTP error status is an answer, returned like any other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httptools
import urllib3
from urllib3.exceptions import ClosedPoolError, ProtocolError

_RECV_SIZE = 65536
_MAX_HEAD = 1 << 20  # bytes read before the answer's headers ended
_FRAMING = (b"content-length", b"transfer-encoding")
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class Answer:
    """An HTTP answer: status, reason phrase and the whole body."""

    status: int
    reason: str
    body: bytes


class _Message:
    """`httptools` callbacks collecting one answer; 1xx interim answers are dropped."""

    def __init__(self, method: str) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.head_only = method == "HEAD"
        self.reason, self.body, self.framed = b"", [b""], False
        self.headers_done = self.done = self.extra = self.keep = False

    def on_message_begin(self) -> None:
        self.extra = self.done  # a second answer: the connection is out of step

    def on_status(self, status: bytes) -> None:
        if not self.done:
            self.reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in _FRAMING:
            self.framed = True

    def on_headers_complete(self) -> None:
        self.headers_done = True
        if self.head_only and not self.done and self.parser.get_status_code() >= 200:
            self._finish()

    def on_body(self, body: bytes) -> None:
        if not self.done:  # after a HEAD answer or a complete one: not this answer's body
            self.body.append(body)

    def on_message_complete(self) -> None:
        if self.done:
            return
        if self.parser.get_status_code() >= 200:
            self._finish()
        else:  # 100 Continue and the like: the real answer follows
            self.reason, self.body, self.framed, self.headers_done = b"", [b""], False, False

    def _finish(self) -> None:
        # llhttp clears what decides keep-alive once the callback returns: ask now
        self.done, self.keep = True, self.parser.should_keep_alive()

    def answer(self) -> Answer:
        reason = self.reason.decode("latin-1")
        return Answer(self.parser.get_status_code(), reason, b"".join(self.body))


def _feed(message: _Message, data: bytes) -> None:
    """Parse `data`; bytes after a complete answer only stop the connection's reuse."""
    try:
        message.parser.feed_data(data)
    except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
        if not message.done:
            raise ProtocolError(f"malformed HTTP answer: {exc}") from exc
        message.extra = True


def read_answer(recv: Callable[[int], bytes], method: str) -> tuple[Answer, bool]:
    """One HTTP/1.1 answer from `recv`; also whether the connection may carry another request."""
    message, received = _Message(method), 0
    try:
        while not message.done:
            if not (data := recv(_RECV_SIZE)):
                if message.headers_done and not message.framed:  # the body ends at close
                    return message.answer(), False
                raise ProtocolError("connection closed before the answer was complete")
            received += len(data)
            if received > _MAX_HEAD and not message.headers_done:
                raise ProtocolError("answer head too long")
            _feed(message, data)
        return message.answer(), message.keep and not message.extra
    finally:
        del message.parser  # the parser holds the callbacks: break the cycle


class PooledWriter:
    """JSON requests through the direct connection pool of `pool_manager` for `host`."""

    def __init__(self, pool_manager: Any, host: str, timeout: float) -> None:
        self._manager, self._host, self._timeout = pool_manager, host.rstrip("/"), timeout
        self._pool: Any = None
        url = urllib3.util.parse_url(self._host)
        self._prefix = (url.path or "").rstrip("/")
        scheme, port = url.scheme or "http", url.port
        hostname = f"[{url.host}]" if url.host and ":" in url.host else str(url.host)
        self._host_header = (
            hostname if port is None or port == _DEFAULT_PORTS.get(scheme) else f"{hostname}:{port}"
        )
        # A proxy needs the client's own request path (absolute URLs, proxy headers).
        self.usable = type(pool_manager) is urllib3.PoolManager

    def request(self, method: str, path: str, body: bytes, headers: Mapping[str, str]) -> Answer:
        """Send one request with `body` and read its answer; the connection goes back to the
        pool only when the whole answer was read and the server keeps it open."""
        head = [f"{method} {self._prefix}{path} HTTP/1.1", f"Host: {self._host_header}"]
        head += [f"{name}: {value}" for name, value in headers.items()]
        head.append(f"Content-Length: {len(body)}\r\n\r\n")
        data = "\r\n".join(head).encode("latin-1") + body
        pool = self._connection_pool()
        conn = pool._get_conn()
        keep = False
        try:
            if conn.sock is None:
                conn.timeout = self._timeout
                conn.connect()
            if conn.sock.gettimeout() != self._timeout:  # a watch may have left its own
                conn.sock.settimeout(self._timeout)
            conn.sock.sendall(data)
            answer, keep = read_answer(conn.sock.recv, method)
            return answer
        finally:
            if not keep:
                conn.close()
            pool._put_conn(conn if keep else None)  # None: a fresh connection next time

    def _connection_pool(self) -> Any:
        """The client's pool for `host` (looked up again when the client closed it)."""
        pool = self._pool
        if pool is None or pool.pool is None:
            pool = self._pool = self._manager.connection_from_url(self._host)
        if pool.pool is None:
            raise ClosedPoolError(pool, "Pool is closed.")
        return pool
