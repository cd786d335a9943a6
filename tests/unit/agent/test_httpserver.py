"""The metrics HTTP server: endpoints on an ephemeral port, and `--metrics-address` parsing."""

from __future__ import annotations

import logging
import select
import socket
import struct
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agent.httpserver import MetricsServer, ServerLimits, parse_address
from agent.metrics import AgentMetrics, MetricsSnapshot
from tests.builders.topology import dgx_h100


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_http_endpoints_on_an_ephemeral_port() -> None:
    metrics = AgentMetrics("0.1.0")
    metrics.update(MetricsSnapshot(inventory=dgx_h100()))
    ready = {"value": False}
    server = MetricsServer("127.0.0.1:0", metrics.registry, ready=lambda: ready["value"]).start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        status, body = _get(base + "/metrics")
        assert status == 200
        assert 'gputopo_agent_gpu_healthy{gpu="7"' in body
        assert _get(base + "/healthz") == (200, "ok\n")
        assert _get(base + "/readyz")[0] == 503
        ready["value"] = True
        assert _get(base + "/readyz") == (200, "ok\n")
        assert _get(base + "/nope")[0] == 404
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("text", "parsed"),
    [(":9445", ("", 9445)), ("127.0.0.1:0", ("127.0.0.1", 0)), ("[::1]:80", ("::1", 80))],
)
def test_parse_address(text, parsed) -> None:
    assert parse_address(text) == parsed


@pytest.mark.parametrize("bad", ["9445", "host:", "h:99999", "h:x"])
def test_bad_address(bad) -> None:
    with pytest.raises(ValueError, match="bad address"):
        parse_address(bad)


# -- abuse: idle, half-sent and hung-up connections (issue 11, item 6) ---------------------------

FLOOD = 1_000
HALF_SENT = 100
HEALTHZ_DEADLINE_S = 2.0


def _proc_status() -> dict[str, int]:
    """This process's thread count and resident memory (KiB), from /proc/self/status."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in {"Threads", "VmRSS"}:
            fields[key] = int(value.split()[0])
    return fields


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def _hang_up(sock: socket.socket) -> None:
    """Close with a reset (SO_LINGER 0), as a client that gives up does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _timed_get(url: str) -> float:
    start = time.monotonic()
    assert _get(url) == (200, "ok\n")
    return time.monotonic() - start


def _wait_until(predicate, what: str, timeout: float = 20.0) -> None:
    done = threading.Event()
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        done.wait(0.01)


def test_a_flood_of_idle_and_half_sent_connections_costs_no_threads_and_healthz_answers() -> None:
    server = MetricsServer("127.0.0.1:0", AgentMetrics("0.1.0").registry).start()
    before = _proc_status()
    clients: list[socket.socket] = []
    try:
        clients.extend(_connect(server.port) for _ in range(FLOOD))
        for _ in range(HALF_SENT):
            clients.append(_connect(server.port))
            clients[-1].sendall(b"GET /healthz HTTP/1.1\r\nHost: agent\r\n")
        waits = [_timed_get(f"http://127.0.0.1:{server.port}/healthz") for _ in range(20)]
        during = _proc_status()
    finally:
        for sock in clients:
            sock.close()
        server.stop()
    print(f"threads {before['Threads']} -> {during['Threads']}, RSS {before['VmRSS']} -> "
          f"{during['VmRSS']} KiB, /healthz slowest {max(waits):.3f}s")  # fmt: skip
    assert max(waits) < HEALTHZ_DEADLINE_S
    assert during["Threads"] <= before["Threads"] + 2
    assert during["VmRSS"] - before["VmRSS"] < 16 * 1024


def test_a_client_that_hangs_up_costs_one_debug_line_and_no_traceback(caplog, capfd) -> None:
    caplog.set_level(logging.DEBUG, logger="agent.httpserver")
    entered, answer = threading.Semaphore(0), threading.Semaphore(0)

    def healthy() -> bool:  # holds each reply until its client has hung up
        entered.release()
        return answer.acquire(timeout=10)

    registry, one_at_a_time = AgentMetrics("0.1.0").registry, ServerLimits(workers=1)
    server = MetricsServer("127.0.0.1:0", registry, healthy=healthy, limits=one_at_a_time).start()
    hangups = 50
    try:
        for _ in range(hangups):
            client = _connect(server.port)
            client.sendall(b"GET /healthz HTTP/1.1\r\nHost: agent\r\n\r\n")
            assert entered.acquire(timeout=10)
            _hang_up(client)
            answer.release()

        def lines() -> list[logging.LogRecord]:
            return [r for r in caplog.records if "hung up" in r.getMessage()]

        _wait_until(lambda: len(lines()) >= hangups, f"{hangups} hang-up lines")
    finally:
        server.stop()
    assert len(lines()) == hangups
    assert {r.levelno for r in lines()} == {logging.DEBUG}
    assert not [r for r in caplog.records if r.exc_info]
    assert "Traceback" not in capfd.readouterr().err


def _closed_by_server(sock: socket.socket) -> bool:
    """True when the server closed `sock` (EOF or reset) within 10 s; False if it is still open."""
    sock.settimeout(10)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_a_connection_without_a_whole_request_is_closed_after_the_timeout() -> None:
    limits = ServerLimits(request_timeout_s=0.5)
    server = MetricsServer("127.0.0.1:0", AgentMetrics("0.1.0").registry, limits=limits).start()
    try:
        idle, half = _connect(server.port), _connect(server.port)
        half.sendall(b"GET /metrics HTTP/1.1\r\nHost: agent\r\n")
        start = time.monotonic()
        assert _closed_by_server(idle)
        assert _closed_by_server(half)
        waited = time.monotonic() - start
        assert _get(f"http://127.0.0.1:{server.port}/healthz") == (200, "ok\n")
    finally:
        for sock in (idle, half):
            sock.close()
        server.stop()
    assert 0.4 <= waited < 10


def test_beyond_max_connections_the_oldest_idle_one_is_closed(caplog) -> None:
    limits = ServerLimits(max_connections=10)
    server = MetricsServer("127.0.0.1:0", AgentMetrics("0.1.0").registry, limits=limits).start()
    clients = []
    try:
        for _ in range(20):
            clients.append(_connect(server.port))
            _wait_until(lambda: _get(f"http://127.0.0.1:{server.port}/readyz")[0] == 200, "ready")
        closed = [_closed_by_server(sock) for sock in clients[:10]]
        clients[-1].settimeout(0.2)
        with pytest.raises(TimeoutError):
            clients[-1].recv(1)  # the newest is still open
    finally:
        for sock in clients:
            sock.close()
        server.stop()
    assert all(closed)
    assert [r.levelname for r in caplog.records if "sent no request" in r.getMessage()] == [
        "WARNING"
    ]


def _send(port: int, path: str) -> socket.socket:
    sock = _connect(port)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: agent\r\n\r\n".encode())
    return sock


def _status(sock: socket.socket) -> int:
    """The status of the whole reply on `sock` (read to EOF)."""
    reply = b""
    while chunk := sock.recv(65536):
        reply += chunk
    sock.close()
    return int(reply.split(b" ", 2)[1])


def test_when_every_handler_is_busy_a_request_is_answered_503_at_once() -> None:
    entered, gate = threading.Event(), threading.Event()

    def healthy() -> bool:
        entered.set()
        return gate.wait(10)

    registry, limits = AgentMetrics("0.1.0").registry, ServerLimits(workers=1, max_queued=1)
    server = MetricsServer("127.0.0.1:0", registry, healthy=healthy, limits=limits).start()
    try:
        held = _send(server.port, "/healthz")
        assert entered.wait(10)  # the only handler is busy
        queued, refused = _send(server.port, "/readyz"), _send(server.port, "/readyz")
        ready, _, _ = select.select([queued, refused], [], [], 10)
        answered_first = [_status(sock) for sock in ready]  # while the handler is still held
        gate.set()
        rest = [_status(sock) for sock in (held, queued, refused) if sock not in ready]
    finally:
        gate.set()
        server.stop()
    assert answered_first == [503]
    assert sorted(rest) == [200, 200]


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        pytest.param(b"HEAD /healthz HTTP/1.1\r\n\r\n", 200, id="HEAD"),
        pytest.param(b"GET /readyz?verbose HTTP/1.0\n\n", 200, id="query, bare newlines"),
        pytest.param(b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 405, id="POST"),
        pytest.param(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400, id="TLS"),
        pytest.param(b"GET / HTTP/1.1\r\nX: " + b"a" * 9000 + b"\r\n\r\n", 431, id="huge head"),
    ],
)
def test_odd_requests_get_a_status(request_bytes, status) -> None:
    server = MetricsServer("127.0.0.1:0", AgentMetrics("0.1.0").registry).start()
    try:
        sock = _connect(server.port)
        sock.sendall(request_bytes)
        assert _status(sock) == status
    finally:
        server.stop()
