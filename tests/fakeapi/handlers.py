"""HTTP for the fake API server: routing, JSON bodies, chunked watch streams, injected faults."""

from __future__ import annotations

import contextlib
import json
import logging
import select
import socket
import sys
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from tests.fakeapi import discovery, eviction
from tests.fakeapi.errors import ApiError, bad_request, method_not_allowed
from tests.fakeapi.objects import Ref
from tests.fakeapi.watch import stream

if TYPE_CHECKING:
    from tests.fakeapi.server import FakeApiServer

logger = logging.getLogger(__name__)
_NOT_FOUND = "the server could not find the requested resource"


class FakeHttpServer(ThreadingHTTPServer):
    """A threading HTTP server that knows its fake and can cut every open connection."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], fake: FakeApiServer) -> None:
        self.fake = fake
        self.open_connections: set[socket.socket] = set()
        super().__init__(address, Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.fake.lock:
            self.open_connections.add(request)
        super().process_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up (connection reset, broken pipe) is normal and logged at DEBUG;
        anything else is logged as an error with its traceback."""
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionResetError | BrokenPipeError):
            logger.debug("fake API server: connection from %s ended: %r", client_address, exc)
            return
        trace = "".join(traceback.format_exception(exc))
        logger.error("fake API server: connection from %s failed:\n%s", client_address, trace)

    def shutdown_request(self, request: Any) -> None:
        with self.fake.lock:
            self.open_connections.discard(request)
        super().shutdown_request(request)

    def cut_connections(self) -> None:
        with self.fake.lock:
            conns = list(self.open_connections)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = 1 << 16  # headers and body leave in one send (flushed after each request)
    server: FakeHttpServer

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("fake API server: %s", format % args)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _handle(self, method: str) -> None:
        fake = self.server.fake
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        content_type = self.headers.get("Content-Type", "")
        user = self._user()
        fake.record(method, parts.path, query, raw, content_type, user)
        try:
            fake.before_request(method, parts.path)
            self._route(method, parts.path, query, raw, content_type)
        except ApiError as exc:
            retry = (exc.details or {}).get("retryAfterSeconds")
            self._send_json(
                exc.code, exc.status_body(), {"Retry-After": str(retry)} if retry else {}
            )
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:
            logger.exception("fake API server: %s %s failed", method, self.path)
            self._send_json(500, ApiError(500, f"fake API server bug: {exc!r}").status_body())

    def _route(self, method: str, path: str, query: dict[str, str], raw: bytes, ctype: str) -> None:
        fake = self.server.fake
        segments = [s for s in path.split("/") if s]
        answer = discovery.answer(fake.registry, segments)
        if answer is not None:
            if method != "GET":
                raise method_not_allowed()
            self._send_json(200, answer)
            return
        ref = discovery.parse_ref(fake.registry, segments)
        if ref is None:
            raise ApiError(404, _NOT_FOUND)
        if method == "GET" and not ref.name and query.get("watch", "").lower() in ("true", "1"):
            self._watch(ref, query)
            return
        code, body = self._dispatch(method, ref, query, raw, ctype)
        if code == 201 and method in ("PUT", "PATCH"):
            fake.record_created(method, path, query, self._user())
        self._send_json(code, body)

    def _dispatch(
        self, method: str, ref: Ref, query: dict[str, str], raw: bytes, ctype: str
    ) -> tuple[int, dict[str, Any]]:
        api = self.server.fake.api
        if method == "POST" and ref.name and ref.sub == "eviction":
            return eviction.evict(api, ref, _json(raw), query)
        if query.get("dryRun"):
            raise NotImplementedError("fake API server: dryRun is not modelled")
        if method == "GET":
            return 200, (api.get(ref) if ref.name else api.list(ref, query))
        if method == "POST" and (not ref.name or ref.sub == "binding"):
            return api.create(ref, _json(raw), self._manager(query))
        if ref.sub == "eviction":
            raise method_not_allowed()
        if method == "PUT" and ref.name and ref.sub != "binding":
            return api.replace(ref, _json(raw), self._manager(query))
        if method == "PATCH" and ref.name and ref.sub != "binding":
            return api.patch(ref, raw, ctype, query, self._manager(query))
        if method == "DELETE" and not ref.sub:
            if not ref.name:
                return api.delete_collection(ref, query)
            return api.delete(ref, _json(raw) if raw else None, query)
        raise method_not_allowed()

    def _user(self) -> str:
        """The bearer token as sent, which the fake takes as the user's name ("" without one)."""
        scheme, _, token = self.headers.get("Authorization", "").partition(" ")
        return token.strip() if scheme.lower() == "bearer" else ""

    def _manager(self, query: dict[str, str]) -> str:
        """`fieldManager`, else the User-Agent up to its first "/", as a real server names it."""
        agent = self.headers.get("User-Agent", "")
        return query.get("fieldManager") or agent.split("/", 1)[0] or "unknown"

    def _send_json(
        self, code: int, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(code)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _watch(self, ref: Ref, query: dict[str, str]) -> None:
        fake = self.server.fake
        stop = fake.watch_stopper()
        events = stream(fake.api, ref, query, stop)  # raises ApiError before any header is sent
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        try:
            for event in events:
                if event is None and self._client_gone():
                    return
                self._write_event(event)
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            return

    def _write_event(self, event: dict[str, Any] | None) -> None:
        if event is None:
            return
        line = json.dumps(event, separators=(",", ":")).encode() + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
        self.wfile.flush()

    def _client_gone(self) -> bool:
        readable, _, _ = select.select([self.connection], [], [], 0)
        if not readable:
            return False
        try:
            return bool(self.connection.recv(1, socket.MSG_PEEK) == b"")
        except OSError:
            return True


def _json(raw: bytes) -> Any:
    if not raw:
        raise bad_request("the request has no body")
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise bad_request(f"the request body is not valid JSON: {exc}") from exc
