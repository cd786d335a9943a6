"""The `/metrics`, `/healthz` and `/readyz` HTTP server both binaries run (`gputopo-agent run` on
`:9445`, `gputopo-scheduler run` on `:9446`), each over its own Prometheus registry.

`parse_address` reads the `--metrics-address` flag (`HOST:PORT`; port 0 binds an ephemeral port,
an IPv6 host is written in brackets). Nothing is logged per request.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)


def parse_address(address: str) -> tuple[str, int]:
    """`:9445` -> ("", 9445); `127.0.0.1:0`; `[::1]:9445`. ValueError names the address."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"bad address {address!r}: expected HOST:PORT (port 0 = ephemeral)")
    return host.strip("[]"), int(port)


class MetricsServer:
    """Serves `/metrics`, `/healthz` and `/readyz` on its own thread; `port` is the bound port.

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
    ) -> None:
        host, port = parse_address(address)
        server_class = _V6Server if ":" in host else ThreadingHTTPServer
        self._http = server_class((host, port), _handler(registry, ready, healthy, unready_reason))
        self._thread = threading.Thread(
            target=self._http.serve_forever,
            kwargs={"poll_interval": 0.05},  # stop() returns promptly
            name="metrics",
            daemon=True,
        )

    @property
    def port(self) -> int:
        return int(self._http.server_address[1])

    def start(self) -> MetricsServer:
        self._thread.start()
        log.info("metrics on port %s", self.port)
        return self

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()


class _V6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


def _handler(
    registry: CollectorRegistry,
    ready: Callable[[], bool],
    healthy: Callable[[], bool],
    unready_reason: Callable[[], str],
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._reply(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path in {"/healthz", "/readyz"}:
                ok = (healthy if path == "/healthz" else ready)()
                why = "" if ok or path == "/healthz" else unready_reason()
                body = "ok" if ok else f"not ready: {why}" if why else "not ready"
                self._reply(200 if ok else 503, f"{body}\n".encode())
            else:
                self._reply(404, b"not found\n")

        def _reply(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Nothing is logged per scrape."""

    return Handler
