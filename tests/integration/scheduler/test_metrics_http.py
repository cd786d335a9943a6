"""The scheduler's `/metrics`, `/healthz` and `/readyz`, served by the agent's `MetricsServer`."""

from __future__ import annotations

import urllib.request

from tests.builders.scheduler import running


def _get(port: int, path: str) -> tuple[int, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
        return reply.status, reply.read().decode()


def test_a_synced_scheduler_is_ready_and_serves_its_own_registry(fake_api) -> None:
    with running(fake_api) as runtime:
        port = runtime.server.port
        assert _get(port, "/readyz") == (200, "ok\n")
        assert _get(port, "/healthz") == (200, "ok\n")
        status, body = _get(port, "/metrics")
    assert status == 200
    assert "gputopo_scheduler_build_info{" in body
    assert "gputopo_scheduler_pending_pods" in body
    assert "gputopo_agent_" not in body
