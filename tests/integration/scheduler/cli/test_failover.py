"""Two `gputopo-scheduler run` processes with leader election against one fake API server: the
standby lists and watches while the leader binds, so when the leader stops it binds within a
second of taking the lease, from the cache it already has (no list after the takeover)."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest

from tests.builders.commands import readyz
from tests.builders.process import ROOT, CommandProcess, module_argv
from tests.builders.scheduler import NAME, create_pod, gpu_node, node_of, pod_body, wait_for


def _holder(fake) -> str:
    lease = fake.get_object("leases", NAME, "default") or {}
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


def _replica(kubeconfig: str) -> CommandProcess:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "GPUTOPO_LEADER_ELECT": "true",
        "GPUTOPO_LEADER_ELECT_NAMESPACE": "default",
        "GPUTOPO_METRICS_ADDRESS": "127.0.0.1:0",
        "GPUTOPO_KUBECONFIG": kubeconfig,
    }
    return CommandProcess(module_argv("scheduler.cli", "run"), env)


def _lists_after(requests: list, index: int) -> list[str]:
    """The collection reads (GET without `watch`) at or after `index`, leases aside."""
    return [
        r.path
        for r in requests[index:]
        if r.method == "GET" and "/leases" not in r.path and r.query.get("watch") is None
    ]


@pytest.mark.slow
def test_the_standby_binds_within_a_second_of_taking_the_lease(fake_api, core_v1):
    gpu_node(fake_api, "n1")
    kubeconfig = str(fake_api.write_kubeconfig(Path(tempfile.mkdtemp(dir="/tmp")) / "kubeconfig"))
    replicas = [_replica(kubeconfig), _replica(kubeconfig)]
    try:
        held = wait_for(lambda: _holder(fake_api), 30, "a leader")
        wait_for(lambda: any(r.logged(held) for r in replicas), 10, "the leader's start line")
        leader, standby = replicas if replicas[0].logged(held) else replicas[::-1]
        port = standby.port()
        wait_for(lambda: readyz(port)[0] == 200, 30, "the standby's cache synced")
        assert leader.stop() == 0
        for i in range(4):
            create_pod(core_v1, pod_body(f"p{i}", gpus=1))
        wait_for(lambda: _holder(fake_api) not in ("", held), 10, "the standby takes the lease")
        took, taken_at = time.monotonic(), len(fake_api.requests)
        wait_for(lambda: node_of(fake_api, "p0"), 5, "p0 bound")
        bound_after = time.monotonic() - took
        wait_for(lambda: all(node_of(fake_api, f"p{i}") for i in range(4)), 5, "all bound")
    finally:
        for replica in replicas:
            replica.stop()
    assert bound_after < 1.0
    assert _lists_after(fake_api.requests, taken_at) == []
