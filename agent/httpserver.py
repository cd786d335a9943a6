"""The `/metrics`, `/healthz` and `/readyz` HTTP server both binaries run (`gputopo-agent run` on
`:9445`, `gputopo-scheduler run` on `:9446`), each over its own Prometheus registry.

`parse_address` (`agent.hostport`) reads the `--metrics-address` flag (`HOST:PORT`; port 0 binds
an ephemeral port, an IPv6 host is written in brackets).

The HTTP protocol is waitress's (a pure-Python WSGI server); this module holds the small WSGI app
and maps `ServerLimits` onto waitress's settings, so that idle, half-sent or abandoned connections
cannot starve the kubelet's probes or grow the process:

- one thread polls every connection; a connection that has not sent a whole request costs a
  socket, not a thread, and is closed after `request_timeout_s` without activity;
- requests are answered by `workers` threads; at most `max_connections` connections are open, and
  beyond that new ones wait in the listen backlog until idle ones time out;
- a connection may carry several requests (HTTP/1.1 keep-alive); between them it is idle, as
  above. A client that hangs up costs at most one DEBUG line and never a traceback; nothing else
  is logged per request.
"""

from __future__ import annotations

import logging
import math
import platform
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, generate_latest
from waitress import wasyncore
from waitress.server import create_server

from agent.hostport import parse_address

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

log = logging.getLogger(__name__)

TEXT = "text/plain; charset=utf-8"
MAX_HEAD_BYTES = 8192
"""A longer request head is refused (431): ours are a request line and a few headers."""
_LOOP_S = 1  # how long waitress's poll waits at most (whole seconds); stop() wakes it at once
_STOP_WAIT_S = 2.0  # how long stop() waits for a handler still answering


def register_build_info(registry: CollectorRegistry, prefix: str, version: str) -> None:
    """`<prefix>_build_info{version,python_version} 1` on `registry`."""
    build = Gauge(
        f"{prefix}_build_info",
        "Build information (always 1)",
        ["version", "python_version"],
        registry=registry,
    )
    build.labels(version=version or "unknown", python_version=platform.python_version()).set(1)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerLimits:
    """What connections may cost; see the module docstring."""

    request_timeout_s: float = 5.0
    workers: int = 4
    max_connections: int = 2048


class _Quiet(logging.Filter):
    """Keeps waitress's per-connection noise out of the log.

    A client that hung up mid-reply becomes one DEBUG line of ours; "Task queue depth is N" (a
    request waiting for a busy worker, normal for a metrics server) is dropped.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith("Client disconnected"):
            log.debug("metrics client hung up: %s", message)
            return False
        return not message.startswith("Task queue depth")


_QUIET = _Quiet()
_WAITRESS_LOGGERS = ("waitress", "waitress.queue")  # a filter sees only its own logger's records


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
    ) -> None:
        host, port = parse_address(address)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listener = socket.create_server((host, port), family=family, backlog=1024)
        self._registry, self._ready, self._healthy = registry, ready, healthy
        self._unready_reason = unready_reason
        self._map: dict[int, Any] = {}  # waitress's connections by file descriptor
        self._server = _waitress(self._app, listener, self._map, limits or ServerLimits())
        self._port = int(listener.getsockname()[1])
        self._thread = threading.Thread(target=self._server.run, name="metrics", daemon=True)
        for name in _WAITRESS_LOGGERS:
            logging.getLogger(name).addFilter(_QUIET)  # a no-op when already there

    @property
    def port(self) -> int:
        return self._port

    def start(self) -> MetricsServer:
        self._thread.start()
        log.info("metrics on port %s", self.port)
        return self

    def stop(self) -> None:
        """Stop accepting, let a reply being sent finish, then close every connection.

        The order matters: a worker that has written its reply still wakes the polling loop
        through waitress's trigger, so the workers stop before the trigger is closed (closing
        it first made that wake-up fail with EBADF and waitress log a traceback).
        """
        self._on_loop(self._close_listener)  # no new connections
        self._server.task_dispatcher.shutdown(cancel_pending=True, timeout=_STOP_WAIT_S)
        self._on_loop(self._close_all)
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _on_loop(self, action: Callable[[], None]) -> None:
        """Run `action` on the polling thread, or here when that thread is not running."""
        if not self._thread.is_alive():
            action()
            return
        try:
            self._server.trigger.pull_trigger(action)
        except OSError:  # the trigger's pipe is already closed: the loop is ending anyway
            action()

    def _close_listener(self) -> None:
        """Close the listening socket alone (the server's own `close` closes the trigger too)."""
        wasyncore.dispatcher.close(self._server)

    def _close_all(self) -> None:
        """Close the listener and every connection; waitress's loop ends with an empty map."""
        for dispatcher in list(self._map.values()):
            dispatcher.close()

    def _app(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
        if method not in {"GET", "HEAD"}:
            status, body, content_type = (
                HTTPStatus.METHOD_NOT_ALLOWED,
                b"method not allowed\n",
                TEXT,
            )
        else:
            try:
                status, body, content_type = self._route(path)
            except Exception:
                log.exception("metrics server: answering %s failed", path)
                status, body, content_type = (
                    HTTPStatus.INTERNAL_SERVER_ERROR,
                    b"internal error\n",
                    TEXT,
                )
        headers = [("Content-Type", content_type), ("Content-Length", str(len(body)))]
        start_response(f"{status.value} {status.phrase}", headers)
        return [body]

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


def _waitress(
    app: Any, listener: socket.socket, connections: dict[int, Any], limits: ServerLimits
) -> Any:
    """A waitress server on `listener` (not yet running) with `limits` applied."""
    return create_server(
        app,
        map=connections,
        sockets=[listener],
        threads=limits.workers,
        channel_timeout=math.ceil(limits.request_timeout_s),  # waitress counts whole seconds
        cleanup_interval=1,
        connection_limit=limits.max_connections,
        backlog=1024,
        asyncore_use_poll=True,  # select() cannot watch descriptors above 1023
        asyncore_loop_timeout=_LOOP_S,
        max_request_header_size=MAX_HEAD_BYTES,
        max_request_body_size=MAX_HEAD_BYTES,
        expose_tracebacks=False,
        log_socket_errors=False,  # a reset or broken pipe is the client's business
        ident="gputopo",
    )
