"""The metrics HTTP server: endpoints on an ephemeral port, and `--metrics-address` parsing."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from agent.httpserver import MetricsServer, parse_address
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
