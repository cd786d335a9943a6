"""Small JSON writes over the `kubernetes` client's own urllib3 connection pool, without the
client's per-call machinery.

The scheduler makes two or three writes per pod (the binding, its `Scheduled` Event, at times
`PodScheduled=False`); through the client each costs far more CPU than the decision itself
(request models, header dicts, retry and timeout objects, `http.client`'s e-mail header parser).
`PooledWriter` takes a connection from the client's pool (opened, TLS included, by urllib3 as for
any other call), writes the whole request with one `sendall`, reads the answer with a minimal
HTTP/1.1 reader (`Content-Length`, chunked, or until close), and returns the connection to the pool
when it may be reused. Only a direct pool is used: behind a proxy the caller takes the client's
own path (`usable` is False).

A failure to send or to read raises `OSError` or `urllib3.exceptions.HTTPError` (the
connection is closed, never reused); an HTTP error status is an answer, returned like any other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import urllib3
from urllib3.exceptions import ClosedPoolError, ProtocolError

_MAX_LINE = 65536
_MAX_HEADERS = 200
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class Answer:
    """An HTTP answer: status, reason phrase and the whole body."""

    status: int
    reason: str
    body: bytes


class _Reader:
    """Buffered reads from one socket (`recv` releases the GIL once per call, not per line)."""

    def __init__(self, recv: Callable[[int], bytes]) -> None:
        self._recv, self._buf = recv, b""

    def _fill(self) -> None:
        data = self._recv(_MAX_LINE)
        if not data:
            raise ProtocolError("connection closed before the answer was complete")
        self._buf += data

    def line(self) -> bytes:
        while (end := self._buf.find(b"\r\n")) < 0:
            if len(self._buf) > _MAX_LINE:
                raise ProtocolError("answer line too long")
            self._fill()
        line, self._buf = self._buf[:end], self._buf[end + 2 :]
        return line

    def exactly(self, size: int) -> bytes:
        while len(self._buf) < size:
            self._fill()
        data, self._buf = self._buf[:size], self._buf[size:]
        return data

    def rest(self) -> bytes:
        """Everything until the peer closes."""
        chunks = [self._buf]
        while data := self._recv(_MAX_LINE):
            chunks.append(data)
        self._buf = b""
        return b"".join(chunks)


def _head(reader: _Reader) -> tuple[bytes, int, str, dict[bytes, bytes]]:
    """Status line and headers (names lower-cased); 1xx interim answers are skipped."""
    while True:
        version, _, rest = reader.line().partition(b" ")
        code, _, reason = rest.partition(b" ")
        if not version.startswith(b"HTTP/1.") or not code.isdigit():
            raise ProtocolError(f"not an HTTP/1.x status line: {version + b' ' + rest!r}")
        headers: dict[bytes, bytes] = {}
        while line := reader.line():
            if len(headers) > _MAX_HEADERS:
                raise ProtocolError("too many answer headers")
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        if not 100 <= int(code) < 200:
            return version, int(code), reason.decode("latin-1"), headers


def _chunked(reader: _Reader) -> bytes:
    chunks = []
    while size := int(reader.line().split(b";", 1)[0].strip() or b"0", 16):
        chunks.append(reader.exactly(size))
        reader.line()
    while reader.line():  # trailers, up to the blank line
        pass
    return b"".join(chunks)


def read_answer(recv: Callable[[int], bytes], method: str) -> tuple[Answer, bool]:
    """One HTTP/1.1 answer from `recv`; also whether the connection may carry another request."""
    reader = _Reader(recv)
    version, status, reason, headers = _head(reader)
    keep = version != b"HTTP/1.0" and headers.get(b"connection", b"").lower() != b"close"
    if method == "HEAD" or status in (204, 304):
        body = b""
    elif b"chunked" in headers.get(b"transfer-encoding", b"").lower():
        body = _chunked(reader)
    elif (length := headers.get(b"content-length")) is not None:
        body = reader.exactly(int(length))
    else:
        body, keep = reader.rest(), False
    return Answer(status, reason, body), keep


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
