"""A client that drops its connection is quiet; any other failure in a connection is logged."""

from __future__ import annotations

import logging
import socket
import struct
import time

import pytest

HANDLERS = "tests.fakeapi.handlers"


def _connect(fake_api) -> socket.socket:
    return socket.create_connection(("127.0.0.1", fake_api.port), timeout=5)


def _reset(sock: socket.socket) -> None:
    """Close with an RST (linger 0), as a killed client does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _records_from(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == HANDLERS and "connection from" in r.getMessage()]


def test_a_reset_mid_request_is_logged_at_debug_only(
    fake_api, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG, logger=HANDLERS)
    sock = _connect(fake_api)
    sock.sendall(b"POST /api/v1/namespaces HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n")
    _reset(sock)  # the server is left waiting for a body that never comes
    deadline = time.monotonic() + 5
    while not _records_from(caplog) and time.monotonic() < deadline:
        time.sleep(0.01)
    records = _records_from(caplog)
    assert [r.levelno for r in records] == [logging.DEBUG]
    assert "ConnectionResetError" in records[0].getMessage()
    assert "Traceback" not in capfd.readouterr().err


def test_any_other_failure_is_logged_with_its_traceback(
    fake_api, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=HANDLERS)
    with _connect(fake_api) as sock:
        sock.sendall(b"GET /api/v1/nodes HTTP/1.1\r\nHost: x\r\nContent-Length: many\r\n\r\n")
        assert sock.recv(1024) == b""  # the server gave up on the connection: handled by now
    records = _records_from(caplog)
    assert [r.levelno for r in records] == [logging.ERROR]
    assert "Traceback" in records[0].getMessage()
    assert "ValueError" in records[0].getMessage()
